package main

// This file is the shop's order service, the producer: orders and their
// events written in one transaction, the events as platform.outbox rows.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/examples/shop"
)

// Writer pacing: orders per transaction, and every how many transactions
// one more rolls back.
const (
	ordersPerTx   = 20
	rollbackEvery = 10
	// txPause spaces the transactions a little, so the stream lasts while
	// platformd is killed and restarted.
	txPause = 5 * time.Millisecond
)

// writer is the shop's order service: it writes each chunk of orders, with
// their events as platform.outbox rows, in one transaction of the order
// database. The rows are plain INSERTs with ids of its own (UUID v7), as a
// producer in any language writes them; platformd's relay publishes them
// after the commit.
type writer struct {
	db *pgxpool.Pool

	committed atomic.Int64 // events committed

	mu sync.Mutex
	// rolledBack are the orders and events of the transactions rolled
	// back on purpose: none of them may ever reach a consumer.
	rolledBackOrders, rolledBackEvents []uuid.UUID
}

// run writes every order of the plan, in plan order (so event ids grow
// from one commit to the next), and rolls back one extra transaction
// every rollbackEvery.
func (w *writer) run(ctx context.Context, pl *plan) error {
	for start, n := 0, 0; start < len(pl.orders); start, n = start+ordersPerTx, n+1 {
		if n%rollbackEvery == rollbackEvery-1 {
			if err := w.rollBack(ctx); err != nil {
				return err
			}
		}
		chunk := pl.orders[start:min(start+ordersPerTx, len(pl.orders))]
		events := 0
		err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
			var err error
			events, err = writeOrders(ctx, tx, chunk)
			return err
		})
		if err != nil {
			return fmt.Errorf("write orders: %w", err)
		}
		w.committed.Add(int64(events))
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(txPause):
		}
	}
	return nil
}

// rollBack writes a few orders and their events, then rolls back.
func (w *writer) rollBack(ctx context.Context) error {
	var orders []order
	for range 3 {
		o := order{id: uuid.New(), customer: uuid.New(), lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}}
		ev, err := newEvent(shop.EventOrderPlaced, shop.OrderPlaced{OrderID: o.id, CustomerID: o.customer, Lines: o.lines})
		if err != nil {
			return err
		}
		o.events, o.status, o.version = []*event{ev}, "placed", 1
		orders = append(orders, o)
	}
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("write orders: %w", err)
	}
	_, err = writeOrders(ctx, tx, orders)
	if rerr := tx.Rollback(ctx); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("write orders to roll back: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range orders {
		w.rolledBackOrders = append(w.rolledBackOrders, o.id)
		w.rolledBackEvents = append(w.rolledBackEvents, o.events[0].id)
	}
	return nil
}

// writeOrders inserts the orders and their outbox rows through tx and
// returns the number of events.
func writeOrders(ctx context.Context, tx pgx.Tx, orders []order) (int, error) {
	var ids, customers, evIDs []uuid.UUID
	var lines, statuses, names, payloads []string
	var versions []int32
	for _, o := range orders {
		l, err := json.Marshal(o.lines)
		if err != nil {
			return 0, err
		}
		ids, customers, lines = append(ids, o.id), append(customers, o.customer), append(lines, string(l))
		statuses, versions = append(statuses, o.status), append(versions, o.version)
		for _, ev := range o.events {
			evIDs, names, payloads = append(evIDs, ev.id), append(names, ev.name), append(payloads, string(ev.payload))
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer_id, lines, status, version)
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::jsonb[], $4::text[], $5::int[])`, ids, customers, lines, statuses, versions); err != nil {
		return 0, fmt.Errorf("insert orders: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[])`, evIDs, names, payloads); err != nil {
		return 0, fmt.Errorf("insert outbox rows: %w", err)
	}
	return len(evIDs), nil
}
