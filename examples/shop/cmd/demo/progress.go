package main

// This file follows the run's progress: the numbered steps and notes a
// newcomer reads, and the bounded polls of platformd's counters, the
// queues, the outboxes and the processed_event rows that tell when a step
// is over.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	drainPoll = 200 * time.Millisecond
	// maxPollFailures is how many polls in a row may fail (platformd,
	// RabbitMQ or PostgreSQL briefly unreachable) before the demo gives up.
	maxPollFailures = 50
	// stableFor is how many polls in a row the counters must not move, with
	// nothing ready or in flight, before the queues count as drained.
	stableFor = 3
)

// say prints the next numbered step.
func (dm *demo) say(format string, args ...any) {
	dm.step++
	_, _ = fmt.Fprintf(dm.out, "[%d/%d] "+format+"\n", append([]any{dm.step, dm.steps}, args...)...)
}

// note prints a detail of the current step.
func (dm *demo) note(format string, args ...any) {
	_, _ = fmt.Fprintf(dm.out, "      "+format+"\n", args...)
}

// pollUntil scrapes the counters every interval until cond holds, and
// returns that scrape. It fails if platformd exits or the producer fails;
// a producer that finishes sets *prodDone.
func (dm *demo) pollUntil(ctx context.Context, interval time.Duration, cond func(counters) bool, done <-chan error, prodDone *bool) (counters, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return counters{}, context.Cause(ctx)
		case <-dm.d.exited:
			return counters{}, dm.d.exitedErr()
		case err := <-done:
			if err != nil {
				return counters{}, fmt.Errorf("producer: %w", err)
			}
			*prodDone, done = true, nil
		case <-tick.C:
		}
		c, err := dm.scr.scrape(ctx)
		if err != nil {
			if fails++; fails >= maxPollFailures {
				return counters{}, fmt.Errorf("read platformd's metrics: %w", err)
			}
			continue
		}
		fails = 0
		dm.lastScrape = c
		if cond(c) {
			return c, nil
		}
	}
}

// waitDrained waits until every event of the plan has its processed_event
// row, nothing is ready in the shop's queues (retry queues included) or in
// flight in platformd, extra (if any) holds, and the counters have not
// moved for a few polls. It returns the last scrape.
func (dm *demo) waitDrained(ctx context.Context, extra func(counters) bool) (counters, error) {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	rowsDone := false
	var rows [2]int
	stable, prev, fails := 0, -1.0, 0
	lastNote := time.Now()
	var c counters
	for {
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("waiting for the queues to drain: %w", context.Cause(ctx))
		case <-dm.d.exited:
			return c, dm.d.exitedErr()
		case <-tick.C:
		}
		queued, outboxRows, err := dm.drainState(ctx, &c, &rows, &rowsDone)
		ready := queued + outboxRows
		if err != nil {
			// Tolerate a passing failure (PostgreSQL restarting...).
			if fails++; fails >= maxPollFailures {
				return c, err
			}
			stable = 0
			continue
		}
		fails = 0
		n := c.deliveries()
		if rowsDone && ready == 0 && c.inFlight == 0 && n == prev && (extra == nil || extra(c)) {
			if stable++; stable >= stableFor {
				return c, nil
			}
		} else {
			stable = 0
		}
		prev = n
		if time.Since(lastNote) >= 5*time.Second {
			lastNote = time.Now()
			dm.note("still draining: %d rows in the outboxes, %d ready in the queues, %d in flight, processed_event rows %d/%d stock, %d/%d shipping",
				outboxRows, queued, int(c.inFlight), rows[0], len(dm.plan.stockIDs), rows[1], len(dm.plan.shippingIDs))
			if outboxRows > 0 {
				// Rows that do not move while the queues are empty: a
				// relay waiting out the lease of a SIGKILLed run.
				if why, err := dm.relayLeaseWait(ctx); err == nil && why != "" {
					dm.note("%s", why)
				}
			}
		}
	}
}

// countRows counts the processed_event rows of this run's events in the
// stock and shipping databases.
func (dm *demo) countRows(ctx context.Context) ([2]int, error) {
	var rows [2]int
	for i, t := range dm.targets() {
		ids := [][]uuid.UUID{dm.plan.stockIDs, dm.plan.shippingIDs}[i]
		if err := t.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids).Scan(&rows[i]); err != nil {
			return rows, fmt.Errorf("count processed_event rows in %s: %w", t.service, err)
		}
	}
	return rows, nil
}

// countParcels counts the parcels of this run's orders.
func (dm *demo) countParcels(ctx context.Context) (int, error) {
	var n int
	if err := dm.shipping.db.QueryRow(ctx, `SELECT count(*) FROM parcel WHERE order_id = ANY($1)`, dm.plan.orderIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("count parcels: %w", err)
	}
	return n, nil
}

// drainState scrapes the counters into *c, counts this run's
// processed_event rows into *rows until they are all there (*rowsDone), and
// returns the messages ready in the watched queues and the rows waiting
// in the outboxes (messages still to come).
func (dm *demo) drainState(ctx context.Context, c *counters, rows *[2]int, rowsDone *bool) (queued, outboxRows int, err error) {
	if *c, err = dm.scr.scrape(ctx); err != nil {
		return 0, 0, fmt.Errorf("read platformd's metrics: %w", err)
	}
	for _, t := range dm.allTargets() {
		for _, q := range t.watched {
			n, _, _, err := dm.in.queue(q)
			if err != nil {
				return 0, 0, err
			}
			queued += n
		}
	}
	// Rows waiting in an outbox (platform.outbox) are messages still to come.
	for _, db := range []*pgxpool.Pool{dm.orderDB, dm.stock.db, dm.shipping.db} {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM platform.outbox`).Scan(&n); err != nil {
			return 0, 0, fmt.Errorf("count outbox rows: %w", err)
		}
		outboxRows += n
	}
	if !*rowsDone {
		if *rows, err = dm.countRows(ctx); err != nil {
			return 0, 0, err
		}
		parcels, err := dm.countParcels(ctx)
		if err != nil {
			return 0, 0, err
		}
		*rowsDone = *rows == [2]int{len(dm.plan.stockIDs), len(dm.plan.shippingIDs)} && parcels == len(dm.plan.orders)
		if *rowsDone && dm.billing != nil {
			var n int
			if err := dm.billing.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, dm.plan.stockIDs).Scan(&n); err != nil {
				return 0, 0, fmt.Errorf("count processed_event rows in billing: %w", err)
			}
			*rowsDone = n == len(dm.plan.stockIDs)
		}
	}
	return queued, outboxRows, nil
}
