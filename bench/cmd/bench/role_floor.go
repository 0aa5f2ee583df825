package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/dedup"
)

// runFloor is the floor contender: the least a consumer with platformd's
// effects has to do, and nothing else. raw's consumer loop, and per batch
// of up to -batch deliveries (or what came within -wait): the envelope
// decoder, one transaction with the dedup insert (-dedup) and the shop's
// batch handler for the ids it returned, the commit, one multiple-ack. No
// linger, no retry or failure routing, no in-flight registry, no metrics,
// no logs: whatever platformd adds costs more. Its throughput against raw
// is the ceiling of platformd's ratio to raw on the same machine. It prints
// "DONE <unix ns>" once -expect deliveries are acked, that is committed.
func runFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	amqpURL := fs.String("amqp", "", "AMQP URL")
	dbURL := fs.String("db", "", "service database URL")
	queue := fs.String("queue", "", "queue")
	consumers := fs.Int("consumers", 4, "channels consuming in parallel, one transaction at a time each")
	prefetch := fs.Int("prefetch", 200, "prefetch per channel")
	batch := fs.Int("batch", 100, "most deliveries per transaction")
	wait := fs.Duration("wait", 5*time.Millisecond, "longest wait for a batch to fill")
	dedup := fs.Bool("dedup", true, "insert the ids into processed_event and run the handler for the new ones only")
	expect := fs.Int("expect", 0, "print DONE after this many acks")
	_ = fs.Parse(args)

	reg, err := reserveHandler()
	if err != nil {
		return err
	}
	conn, db, closeAll, err := roleConnect(ctx, "bench-floor", *amqpURL, *dbURL, *consumers)
	if err != nil {
		return err
	}
	defer closeAll()

	done := &doneCounter{expect: int64(*expect)}
	return consumeAll(ctx, conn, *queue, *consumers, *prefetch, func(_ int, ch *amqp.Channel, deliveries <-chan amqp.Delivery) error {
		held := make([]amqp.Delivery, 0, *batch)
		for {
			held = held[:0]
			select {
			case <-ctx.Done():
				return nil
			case d, ok := <-deliveries:
				if !ok {
					return errors.New("floor: deliveries closed")
				}
				held = append(held, d)
			}
			// amqp091-go hands deliveries over one at a time through an
			// unbuffered channel: without a wait, batches are of one.
			linger := time.NewTimer(*wait)
		more:
			for len(held) < *batch {
				select {
				case d, ok := <-deliveries:
					if !ok {
						break more
					}
					held = append(held, d)
				case <-linger.C:
					break more
				}
			}
			linger.Stop()
			if err := floorBatch(ctx, db, reg, held, *dedup); err != nil {
				return err
			}
			if err := ch.Ack(held[len(held)-1].DeliveryTag, true); err != nil {
				return err
			}
			done.add(len(held), time.Now().UnixNano())
		}
	})
}

// reserveHandler returns the shop's stock.reserve as a batch handler.
func reserveHandler() (consumer.BatchHandler, error) {
	reg, err := shopRegistry()
	if err != nil {
		return nil, err
	}
	r, err := reg.Lookup(shop.HandlerStockReserve)
	if err != nil {
		return nil, err
	}
	bh, ok := r.Handler.(consumer.BatchHandler)
	if !ok {
		return nil, fmt.Errorf("floor: %s is not a batch handler", shop.HandlerStockReserve)
	}
	return bh, nil
}

// floorBatch applies the effects of ds in one transaction: with dedup,
// those of the first copy of each id not yet in processed_event.
func floorBatch(ctx context.Context, db *pgxpool.Pool, h consumer.BatchHandler, ds []amqp.Delivery, withDedup bool) error {
	events := make([]consumer.Event, 0, len(ds))
	for _, d := range ds {
		ev, err := decodeEvent(d.Body)
		if err != nil {
			return fmt.Errorf("floor: decode: %w", err)
		}
		events = append(events, ev)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if withDedup {
		ids := make([][16]byte, len(events))
		for i, ev := range events {
			ids[i] = ev.ID
		}
		fresh, err := dedup.RecordIDs(ctx, tx, ids) // platformd's statement
		if err != nil {
			return err
		}
		// The first copy of each inserted id runs; later copies and ids
		// already recorded are duplicates.
		events = slices.DeleteFunc(events, func(ev consumer.Event) bool {
			if _, ok := fresh[ev.ID]; ok {
				delete(fresh, ev.ID)
				return false
			}
			return true
		})
	}
	if len(events) > 0 {
		if err := h.HandleBatch(ctx, tx, events); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
