package soak

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// seedAge are the ages of the processed_event rows seeded before the run
// in every consumer service: beyond the 48h horizon (a purge may delete
// them) and inside it (no purge may).
const (
	seedOld    = "72 hours"
	seedInside = "30 hours"
	seedCount  = 200
)

var consumerDBs = []string{"stock", "shipping", "billing", "ledger"}

// seed writes the purge's test rows and keeps the ids of those inside the
// horizon, which the checker looks up by id: a window on their age would
// drift with the run's length (an hour's run and its drain leave the
// 30-hour rows 31 hours old, and a window check counts them gone).
func (w *world) seed(ctx context.Context) error {
	w.seededInside = make(map[string][]uuid.UUID, len(consumerDBs))
	for _, db := range consumerDBs {
		for _, age := range []string{seedOld, seedInside} {
			ids := make([]uuid.UUID, seedCount)
			for i := range ids {
				ids[i] = uuid.New()
			}
			if age == seedInside {
				w.seededInside[db] = ids
			}
			if _, err := w.db(db).Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
				SELECT unnest($1::uuid[]), now() - $2::interval`, ids, age); err != nil {
				return fmt.Errorf("seed %s: %w", db, err)
			}
		}
	}
	return nil
}

// failedRow is a row of a failure store.
type failedRow struct {
	db, pool, reason, state, errText string
	eventID                          *uuid.UUID
	first                            time.Time
}

// report is the checker's outcome.
type report struct {
	events, chain       int // distinct events expected (produced; billing's)
	applications        int // (event, service) pairs checked
	twice, lost, wrong  int
	outOfOrder          int
	tapMissing          int // published events the tap never saw
	tapUnknown          int // tapped events nobody published
	failuresExplained   int
	failuresUnexplained int
	problems            []string
}

func (r *report) problem(format string, args ...any) {
	if len(r.problems) < 60 {
		r.problems = append(r.problems, fmt.Sprintf(format, args...))
	} else if len(r.problems) == 60 {
		r.problems = append(r.problems, "... (more problems not listed)")
	}
}

func counts(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string) (map[uuid.UUID]int, error) {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	out := map[uuid.UUID]int{}
	var k uuid.UUID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { out[k] = n; return nil })
	return out, err
}

func (w *world) failures(ctx context.Context) ([]failedRow, error) {
	var out []failedRow
	for _, db := range consumerDBs {
		rows, err := w.db(db).Query(ctx, `SELECT pool, reason, state, coalesce(error, ''), event_id, first_failed_at FROM platform.failed_event`)
		if err != nil {
			return nil, fmt.Errorf("failure store of %s: %w", db, err)
		}
		for rows.Next() {
			f := failedRow{db: db}
			if err := rows.Scan(&f.pool, &f.reason, &f.state, &f.errText, &f.eventID, &f.first); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, f)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// check reads everything and judges the run.
func (w *world) check(ctx context.Context, produced []*sent, faults []fault, tapped map[uuid.UUID]string) (*report, error) {
	r := &report{}
	published, err := counts(ctx, w.db("order"), `SELECT event_id, 1 FROM platform.outbox_archive`)
	if err != nil {
		return nil, fmt.Errorf("order's archive: %w", err)
	}
	fails, err := w.failures(ctx)
	if err != nil {
		return nil, err
	}
	failedIn := map[string]map[uuid.UUID]failedRow{}
	for _, f := range fails {
		if f.eventID == nil {
			continue
		}
		if failedIn[f.db] == nil {
			failedIn[f.db] = map[uuid.UUID]failedRow{}
		}
		failedIn[f.db][*f.eventID] = f
	}
	var placed, statuses []*sent
	maxVersion := map[uuid.UUID]int{}
	for _, ev := range produced {
		if published[ev.id] == 0 {
			if !ev.uncertain {
				r.lost++
				r.problem("lost: %s %s committed to order's outbox, never published by the relay", ev.name, ev.id)
			}
			continue
		}
		if ev.name == evPlaced {
			placed = append(placed, ev)
		} else {
			statuses = append(statuses, ev)
			maxVersion[ev.orderID] = max(maxVersion[ev.orderID], ev.version)
		}
	}
	r.events = len(placed) + len(statuses)

	// account judges one event in one service: applied n times, where want
	// is once.
	account := func(db string, ev uuid.UUID, name string, n, want int) {
		r.applications++
		switch {
		case n == want:
		case n > want:
			r.twice++
			r.problem("applied twice: %s %s in %s (%d applications)", name, ev, db, n)
		case n == 0:
			if _, ok := failedIn[db][ev]; ok {
				return // in the failure store with its reason: judged below
			}
			r.lost++
			r.problem("lost: %s %s in %s: not applied, not in its failure store", name, ev, db)
		default:
			r.wrong++
			r.problem("wrong: %s %s in %s: %d of %d rows", name, ev, db, n, want)
		}
	}

	// stock: one reservation per line, per order (one placed event each).
	resv, err := counts(ctx, w.db("stock"), `SELECT order_id, count(*)::int FROM reservation GROUP BY order_id`)
	if err != nil {
		return nil, fmt.Errorf("stock: %w", err)
	}
	for _, ev := range placed {
		n := resv[ev.orderID]
		if ev.poison {
			// shop's strict decoding refuses the unknown member: a
			// permanent failure there too.
			if n > 0 {
				r.wrong++
				r.problem("wrong: poison order %s applied in stock", ev.id)
			} else if f, ok := failedIn["stock"][ev.id]; !ok || f.reason != "permanent" {
				r.lost++
				r.problem("lost: poison order %s not in stock's failure store as permanent", ev.id)
			}
			continue
		}
		if n%ev.lines == 0 {
			account("stock", ev.id, ev.name, n/ev.lines, 1)
		} else {
			account("stock", ev.id, ev.name, n, ev.lines)
		}
	}
	// billing (remote handler): one invoice per placed event; a poison
	// order is a permanent failure instead.
	inv, err := counts(ctx, w.db("billing"), `SELECT event_id, count(*)::int FROM invoice GROUP BY event_id`)
	if err != nil {
		return nil, fmt.Errorf("billing: %w", err)
	}
	for _, ev := range placed {
		if ev.poison {
			if inv[ev.id] > 0 {
				r.wrong++
				r.problem("wrong: poison order %s applied in billing", ev.id)
			} else if f, ok := failedIn["billing"][ev.id]; !ok || f.reason != "permanent" {
				r.lost++
				r.problem("lost: poison order %s not in billing's failure store as permanent", ev.id)
			}
			continue
		}
		account("billing", ev.id, ev.name, inv[ev.id], 1)
	}
	// the chain: billing's published invoices, one per applied order.
	chain := map[uuid.UUID]int{}
	var chainIDs []uuid.UUID
	rows, err := w.db("billing").Query(ctx, `SELECT event_id, (payload->>'invoice_for')::uuid FROM platform.outbox_archive`)
	if err != nil {
		return nil, fmt.Errorf("billing's archive: %w", err)
	}
	for rows.Next() {
		var id, of uuid.UUID
		if err := rows.Scan(&id, &of); err != nil {
			rows.Close()
			return nil, err
		}
		chain[of]++
		chainIDs = append(chainIDs, id)
	}
	rows.Close()
	r.chain = len(chainIDs)

	// The tap: every event published (the two archives) went through the
	// exchange, and nothing else did.
	known := map[uuid.UUID]bool{}
	for id := range published {
		known[id] = true
	}
	for _, id := range chainIDs {
		known[id] = true
	}
	for id := range known {
		if _, ok := tapped[id]; !ok {
			r.tapMissing++
			r.problem("not on the tap: %s, confirmed to its relay, never routed by the exchange", id)
		}
	}
	for id, name := range tapped {
		if !known[id] {
			r.tapUnknown++
			r.problem("unknown on the tap: %s %s, published by nobody the soak knows", name, id)
		}
	}
	for _, ev := range placed {
		if !ev.poison && inv[ev.id] > 0 {
			account("billing-outbox", ev.id, "its invoice.opened", chain[ev.id], 1)
		}
	}
	// ledger (SQL handlers): one entry per status event and per invoice
	// published by billing.
	entries, err := counts(ctx, w.db("ledger"), `SELECT event_id, count(*)::int FROM entry GROUP BY event_id`)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	for _, ev := range statuses {
		account("ledger", ev.id, ev.name, entries[ev.id], 1)
	}
	for _, id := range chainIDs {
		account("ledger", id, evInvoice, entries[id], 1)
	}
	// shipping (Go handler, newer versions only): each order's last
	// version.
	ship, err := counts(ctx, w.db("shipping"), `SELECT order_id, version FROM order_status`)
	if err != nil {
		return nil, fmt.Errorf("shipping: %w", err)
	}
	for _, ev := range statuses {
		r.applications++
		if ship[ev.orderID] < ev.version {
			if _, ok := failedIn["shipping"][ev.id]; !ok {
				r.lost++
				r.problem("lost: %s %s (version %d) in shipping: order at version %d", ev.name, ev.id, ev.version, ship[ev.orderID])
			}
		}
	}
	for o, v := range maxVersion {
		if ship[o] > v {
			r.wrong++
			r.problem("wrong: order %s at version %d in shipping, highest sent %d", o, ship[o], v)
		}
	}
	// Per-key order: ledger-status is partitioned by order_id on one
	// daemon; first applications at attempt 0 keep each order's versions
	// increasing (a retried event is not ordered, docs/hosting.md).
	rows, err = w.db("ledger").Query(ctx, `SELECT order_id, version, attempt, event_id FROM entry WHERE kind = 'status' ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("ledger order: %w", err)
	}
	last := map[uuid.UUID]int{}
	firstSeen := map[uuid.UUID]bool{}
	for rows.Next() {
		var o, id uuid.UUID
		var v, attempt int
		if err := rows.Scan(&o, &v, &attempt, &id); err != nil {
			rows.Close()
			return nil, err
		}
		if firstSeen[id] || attempt > 0 {
			firstSeen[id] = true
			continue
		}
		firstSeen[id] = true
		if v <= last[o] {
			r.outOfOrder++
			r.problem("out of order: order %s version %d applied after version %d in ledger-status", o, v, last[o])
		}
		last[o] = max(last[o], v)
	}
	rows.Close()

	// Failures: a poison order's permanent refusal, or a row that a fault
	// explains (stored during or within a minute after it) and that the
	// final retry resolved.
	poison := map[uuid.UUID]bool{}
	for _, ev := range placed {
		if ev.poison {
			poison[ev.id] = true
		}
	}
	for _, f := range fails {
		if f.eventID != nil && poison[*f.eventID] && f.reason == "permanent" && strings.Contains(f.errText, "poison") {
			r.failuresExplained++
			continue
		}
		var by string
		for _, ft := range faults {
			if !f.first.Before(ft.start.Add(-5*time.Second)) && !f.first.After(ft.end.Add(time.Minute)) {
				by = ft.kind
				break
			}
		}
		if by == "" || f.state != "resolved" {
			r.failuresUnexplained++
			r.problem("failure unexplained: %s %s reason %s state %s at %s: %s (fault nearby: %q)",
				f.db, f.pool, f.reason, f.state, f.first.Format(time.RFC3339), f.errText, by)
			continue
		}
		r.failuresExplained++
	}

	// The purge: never past the horizon (48h), the rows inside it kept.
	for _, db := range consumerDBs {
		var inside, early int
		if err := w.db(db).QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`,
			w.seededInside[db]).Scan(&inside); err != nil {
			return nil, fmt.Errorf("%s seeds: %w", db, err)
		}
		if inside != seedCount {
			r.problem("purge past the horizon: %s keeps %d of the %d rows 30h old (horizon 48h)", db, inside, seedCount)
			r.lost += seedCount - inside
		}
		if err := w.db(db).QueryRow(ctx, `SELECT count(*) FROM platform.purge_run
			WHERE cutoff > started_at - interval '48 hours' + interval '1 minute'`).Scan(&early); err != nil {
			return nil, fmt.Errorf("%s purge runs: %w", db, err)
		}
		if early > 0 {
			r.problem("purge past the horizon: %d runs of %s with a cutoff later than 48h before their start", early, db)
		}
	}
	return r, nil
}

// drained says what still waits: outbox rows, queued messages, failures
// retrying or parked or left failed but the poison orders' ("" when
// nothing).
func (w *world) drained(ctx context.Context) string {
	var left []string
	for _, db := range []string{"order", "billing"} {
		var n int
		if err := w.db(db).QueryRow(ctx, `SELECT count(*) FROM platform.outbox`).Scan(&n); err != nil {
			return err.Error()
		}
		if n > 0 {
			left = append(left, fmt.Sprintf("%s outbox %d", db, n))
		}
	}
	out, err := w.ctl(ctx, "list_queues", "-q", "--no-table-headers", "name", "messages")
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 { // the tap too: the checker reads all it saw
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
			left = append(left, fmt.Sprintf("queue %s %d", f[0], n))
		}
	}
	fails, err := w.failures(ctx)
	if err != nil {
		return err.Error()
	}
	for _, f := range fails {
		if f.state == "retrying" || f.state == "parked" || (f.state == "failed" && !strings.Contains(f.errText, "poison")) {
			left = append(left, fmt.Sprintf("failure %s %s %s", f.db, f.reason, f.state))
		}
	}
	return strings.Join(left, ", ")
}
