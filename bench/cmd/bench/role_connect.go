package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// roleConnect opens what a contender role needs, both named name (the
// broker's connection_name, PostgreSQL's application_name): a broker
// connection, and with dbURL set a database pool of maxConns. close ends
// both.
func roleConnect(ctx context.Context, name, amqpURL, dbURL string, maxConns int) (conn *amqp.Connection, db *pgxpool.Pool, closeAll func(), err error) {
	if dbURL != "" {
		cfg, err := pgxpool.ParseConfig(dbURL)
		if err != nil {
			return nil, nil, nil, err
		}
		cfg.MaxConns = int32(maxConns)
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		if db, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
			return nil, nil, nil, err
		}
	}
	conn, err = amqp.DialConfig(amqpURL, amqp.Config{Properties: amqp.Table{"connection_name": name}})
	if err != nil {
		if db != nil {
			db.Close()
		}
		return nil, nil, nil, err
	}
	return conn, db, func() {
		_ = conn.Close()
		if db != nil {
			db.Close()
		}
	}, nil
}

// consumeAll opens n channels on conn, each consuming queue with prefetch,
// and runs loop on each in a goroutine of its own until every loop has
// returned. It returns nil once ctx is done (the role was stopped), else
// the loops' errors.
func consumeAll(ctx context.Context, conn *amqp.Connection, queue string, n, prefetch int,
	loop func(k int, ch *amqp.Channel, deliveries <-chan amqp.Delivery) error) error {
	type consumer struct {
		ch         *amqp.Channel
		deliveries <-chan amqp.Delivery
	}
	cs := make([]consumer, n)
	for k := range cs {
		ch, deliveries, err := consumeOn(conn, queue, prefetch)
		if err != nil {
			return err
		}
		cs[k] = consumer{ch, deliveries}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for k, c := range cs {
		wg.Go(func() { errs[k] = loop(k, c.ch, c.deliveries) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return errors.Join(errs...)
}

// doneCounter prints "DONE <unix ns>" on standard output once expect
// messages are acked (never when expect is 0): the bench's end instant
// for the roles that ack only what they have finished.
type doneCounter struct {
	expect int64
	acked  atomic.Int64
	once   sync.Once
}

// add counts n more acks made at now (unix ns).
func (d *doneCounter) add(n int, now int64) {
	if total := d.acked.Add(int64(n)); d.expect > 0 && total >= d.expect {
		d.once.Do(func() { fmt.Printf("DONE %d\n", now) })
	}
}
