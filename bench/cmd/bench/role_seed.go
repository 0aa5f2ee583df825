package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/envelope"
)

// seedInsertSQL is the article's dedup step for one message.
const seedInsertSQL = `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())
ON CONFLICT (event_id) DO NOTHING RETURNING event_id`

// runSeed is the seed port: the article's consumer as a Go programmer would
// port it, with nothing of platformd's but the envelope decoder and the
// shop's handler (so that the work per message is the same). N workers,
// each with its own channel; per message: begin, insert the id ON CONFLICT
// DO NOTHING, call the handler only if a row came back, commit, ack.
func runSeed(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("seed", flag.ExitOnError)
	amqpURL := fs.String("amqp", "", "AMQP URL")
	dbURL := fs.String("db", "", "service database URL")
	queue := fs.String("queue", "", "queue")
	workers := fs.Int("workers", 4, "workers (one channel and one transaction at a time each)")
	prefetch := fs.Int("prefetch", 200, "prefetch per worker")
	_ = fs.Parse(args)

	conn, db, closeAll, err := roleConnect(ctx, "bench-seed", *amqpURL, *dbURL, *workers)
	if err != nil {
		return err
	}
	defer closeAll()

	return consumeAll(ctx, conn, *queue, *workers, *prefetch, func(_ int, _ *amqp.Channel, deliveries <-chan amqp.Delivery) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case d, ok := <-deliveries:
				if !ok {
					return errors.New("seed: deliveries closed")
				}
				if err := seedHandle(ctx, db, d); err != nil {
					return err
				}
			}
		}
	})
}

func seedHandle(ctx context.Context, db *pgxpool.Pool, d amqp.Delivery) error {
	ev, err := decodeEvent(d.Body)
	if err != nil {
		return d.Reject(false)
	}
	if err := seedProcess(ctx, db, ev); err != nil {
		if nerr := d.Nack(false, true); nerr != nil {
			return nerr
		}
		return fmt.Errorf("seed: event %s: %w", ev.ID, err)
	}
	return d.Ack(false)
}

func seedProcess(ctx context.Context, db *pgxpool.Pool, ev consumer.Event) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var id [16]byte
	err = tx.QueryRow(ctx, seedInsertSQL, ev.ID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // duplicate: no handler, nothing to commit
	}
	if err != nil {
		return err
	}
	if err := shop.Reserve(ctx, tx, ev); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// decodeEvent decodes a body with the product's envelope decoder into the
// event handlers receive (what platformd's workers do).
func decodeEvent(body []byte) (consumer.Event, error) {
	env, err := envelope.Decode(body, 0)
	if err != nil {
		return consumer.Event{}, err
	}
	return consumer.Event{ID: env.EventID, Name: env.EventName, OccurredAt: env.OccurredAt, Payload: env.Payload}, nil
}
