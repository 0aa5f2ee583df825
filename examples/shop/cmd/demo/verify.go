package main

// This file checks the databases against the plan: every effect of this
// run's events exactly once (reservations, statuses, parcels, invoices,
// processed_event rows), nothing of the rolled-back orders, no failure.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/examples/shop"
)

// verdict is what the databases hold for this run's orders and events.
type verdict struct {
	reservations int // rows for this run's orders
	parcels      int // parcels for this run's orders
	latest       int // orders whose status is at their final version
	rows         [2]int
	invoices     int // billing's invoices for this run's orders (examples/shop-php)
	billingRows  int // billing's processed_event rows of this run's events
	problems     []string
}

// maxExamples bounds the examples listed per kind of problem.
const maxExamples = 3

// problemList collects one kind of problem: a count and a few examples.
type problemList struct {
	what     string
	n        int
	examples []string
}

func (p *problemList) add(format string, args ...any) {
	p.n++
	if len(p.examples) < maxExamples {
		p.examples = append(p.examples, fmt.Sprintf(format, args...))
	}
}

func (p *problemList) flush(v *verdict) {
	if p.n == 0 {
		return
	}
	v.problems = append(v.problems, fmt.Sprintf("%s: %d, e.g. %s", p.what, p.n, strings.Join(p.examples, "; ")))
}

// verify compares the databases with the plan: one reservation per order
// line, one parcel per order, each order at its final status version, one
// processed_event row per event, nothing of the rolled-back orders, and
// no new failure in the failure stores (platform.failed_event).
func (dm *demo) verify(ctx context.Context) (verdict, error) {
	var v verdict
	pl := dm.plan

	// Reservations: the cumulative effect a duplicate would double.
	type lineKey struct{ order, product uuid.UUID }
	want := make(map[lineKey]string, pl.lines)
	wantPerOrder := make(map[uuid.UUID]int, len(pl.orders))
	for _, o := range pl.orders {
		for _, l := range o.lines {
			want[lineKey{o.id, l.ProductID}] = l.Quantity
		}
		wantPerOrder[o.id] = len(o.lines)
	}
	got := make(map[uuid.UUID]int, len(pl.orders))
	wrongQty := problemList{what: "reservations with a wrong product or quantity"}
	var order, product uuid.UUID
	var qty string
	rows, _ := dm.stock.db.Query(ctx, `SELECT order_id, product_id, quantity::text FROM reservation WHERE order_id = ANY($1)`, pl.orderIDs)
	if _, err := pgx.ForEachRow(rows, []any{&order, &product, &qty}, func() error {
		v.reservations++
		got[order]++
		if w, ok := want[lineKey{order, product}]; !ok || w != qty {
			wrongQty.add("order %s product %s quantity %s (expected %q)", order, product, qty, w)
		}
		return nil
	}); err != nil {
		return v, fmt.Errorf("read reservations: %w", err)
	}
	twice := problemList{what: "orders whose reservation was applied twice"}
	lost := problemList{what: "orders whose reservation was lost"}
	for _, o := range pl.orders {
		switch n := got[o.id]; {
		case n > wantPerOrder[o.id]:
			twice.add("order %s has %d reservations for %d lines", o.id, n, wantPerOrder[o.id])
		case n < wantPerOrder[o.id]:
			lost.add("order %s has %d reservations for %d lines", o.id, n, wantPerOrder[o.id])
		}
	}
	twice.flush(&v)
	lost.flush(&v)
	wrongQty.flush(&v)

	// Order statuses: the state copy, kept at the newest version.
	type status struct {
		status  string
		version int32
	}
	have := make(map[uuid.UUID]status, len(pl.orders))
	var id uuid.UUID
	var s status
	rows, _ = dm.shipping.db.Query(ctx, `SELECT order_id, status, version FROM order_status WHERE order_id = ANY($1)`, pl.orderIDs)
	if _, err := pgx.ForEachRow(rows, []any{&id, &s.status, &s.version}, func() error {
		have[id] = s
		return nil
	}); err != nil {
		return v, fmt.Errorf("read order statuses: %w", err)
	}
	stale := problemList{what: "orders not at their latest status (an update lost)"}
	for _, o := range pl.orders {
		s, ok := have[o.id]
		switch {
		case !ok:
			stale.add("order %s has no status (expected %s v%d)", o.id, o.status, o.version)
		case s.version != o.version || s.status != o.status:
			stale.add("order %s is %s v%d (expected %s v%d)", o.id, s.status, s.version, o.status, o.version)
		default:
			v.latest++
		}
	}
	stale.flush(&v)

	// Parcels: the end of the chain, order -> relay -> stock -> stock's
	// outbox -> relay -> shipping; cumulative like reservations.
	parcels := make(map[uuid.UUID]int, len(pl.orders))
	var n int
	rows, _ = dm.shipping.db.Query(ctx, `SELECT order_id, count(*) FROM parcel WHERE order_id = ANY($1) GROUP BY order_id`, pl.orderIDs)
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		parcels[id] = n
		v.parcels += n
		return nil
	}); err != nil {
		return v, fmt.Errorf("read parcels: %w", err)
	}
	twiceParcel := problemList{what: "orders with more than one parcel (stock.stock.reserved.v1 applied twice)"}
	lostParcel := problemList{what: "orders without a parcel (stock.stock.reserved.v1 lost)"}
	for _, o := range pl.orders {
		switch n := parcels[o.id]; {
		case n > 1:
			twiceParcel.add("order %s has %d parcels", o.id, n)
		case n == 0:
			lostParcel.add("order %s has no parcel", o.id)
		}
	}
	twiceParcel.flush(&v)
	lostParcel.flush(&v)

	// Rolled-back orders: their outbox rows never existed, so nothing of
	// them may have reached a consumer.
	dm.writer.mu.Lock()
	rbOrders, rbEvents := dm.writer.rolledBackOrders, dm.writer.rolledBackEvents
	dm.writer.mu.Unlock()
	var leaked int
	if err := dm.stock.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM processed_event WHERE event_id = ANY($1))
		+ (SELECT count(*) FROM reservation WHERE order_id = ANY($2))`, rbEvents, rbOrders).Scan(&leaked); err != nil {
		return v, fmt.Errorf("check rolled-back orders: %w", err)
	}
	if leaked > 0 {
		v.problems = append(v.problems, fmt.Sprintf("%d effects of rolled-back orders reached stock (a rolled-back outbox row left)", leaked))
	}

	// processed_event: one row per event (the primary key forbids two).
	for i, t := range dm.targets() {
		ids := [][]uuid.UUID{pl.stockIDs, pl.shippingIDs}[i]
		if err := t.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids).Scan(&v.rows[i]); err != nil {
			return v, fmt.Errorf("count processed_event rows in %s: %w", t.service, err)
		}
		if v.rows[i] != len(ids) {
			v.problems = append(v.problems, fmt.Sprintf("%s processed_event holds %d of this run's %d event ids (events lost)", t.service, v.rows[i], len(ids)))
		}
	}

	if dm.billing != nil {
		if err := dm.verifyBilling(ctx, &v, rbOrders); err != nil {
			return v, err
		}
	}

	// Nothing may have failed: no new row of state failed in a pool's
	// failure store.
	for _, t := range dm.allTargets() {
		n, err := t.failures(ctx)
		if err != nil {
			return v, err
		}
		if d := n - dm.failedAtStart[t]; d > 0 {
			v.problems = append(v.problems, fmt.Sprintf("%d events failed in pool %s (see: platformctl failures list --pool %s)", d, t.pool, t.pool))
		}
	}
	return v, nil
}

// verifyBilling checks billing's invoices (examples/shop-php): one per
// order, whose lines and quantity are the order's, none of a rolled-back
// order, one processed_event row per order.order.placed.v1.
func (dm *demo) verifyBilling(ctx context.Context, v *verdict, rolledBack []uuid.UUID) error {
	pl := dm.plan
	type invoice struct {
		n, lines int
		quantity string
	}
	got := make(map[uuid.UUID]invoice, len(pl.orders))
	var id uuid.UUID
	var in invoice
	rows, _ := dm.billing.db.Query(ctx, `SELECT order_id, count(*), min(lines), min(quantity)::text FROM invoice WHERE order_id = ANY($1) GROUP BY order_id`, pl.orderIDs)
	if _, err := pgx.ForEachRow(rows, []any{&id, &in.n, &in.lines, &in.quantity}, func() error {
		got[id] = in
		v.invoices += in.n
		return nil
	}); err != nil {
		return fmt.Errorf("read invoices: %w", err)
	}
	twice := problemList{what: "orders invoiced twice (order.order.placed.v1 applied twice by billing)"}
	lost := problemList{what: "orders not invoiced"}
	wrong := problemList{what: "invoices with the wrong lines or quantity"}
	for _, o := range pl.orders {
		in := got[o.id]
		switch {
		case in.n > 1:
			twice.add("order %s has %d invoices", o.id, in.n)
		case in.n == 0:
			lost.add("order %s has no invoice", o.id)
		default:
			want := decimal3(o.lines)
			if in.lines != len(o.lines) || in.quantity != want {
				wrong.add("order %s: %d lines, quantity %s (expected %d, %s)", o.id, in.lines, in.quantity, len(o.lines), want)
			}
		}
	}
	twice.flush(v)
	lost.flush(v)
	wrong.flush(v)
	var leaked int
	if err := dm.billing.db.QueryRow(ctx, `SELECT count(*) FROM invoice WHERE order_id = ANY($1)`, rolledBack).Scan(&leaked); err != nil {
		return fmt.Errorf("check rolled-back orders in billing: %w", err)
	}
	if leaked > 0 {
		v.problems = append(v.problems, fmt.Sprintf("%d invoices of rolled-back orders", leaked))
	}
	if err := dm.billing.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, pl.stockIDs).Scan(&v.billingRows); err != nil {
		return fmt.Errorf("count processed_event rows in billing: %w", err)
	}
	if v.billingRows != len(pl.stockIDs) {
		v.problems = append(v.problems, fmt.Sprintf("billing processed_event holds %d of this run's %d order.order.placed.v1 ids (events lost)", v.billingRows, len(pl.stockIDs)))
	}
	return nil
}

// decimal3 is the sum of the lines' quantities (decimal strings with three
// places, as the plan writes them) with three places, as numeric(12,3)
// prints it.
func decimal3(lines []shop.OrderLine) string {
	var milli int64
	for _, l := range lines {
		whole, frac, _ := strings.Cut(l.Quantity, ".")
		w, _ := strconv.ParseInt(whole, 10, 64)
		f, _ := strconv.ParseInt((frac + "000")[:3], 10, 64)
		milli += w*1000 + f
	}
	return fmt.Sprintf("%d.%03d", milli/1000, milli%1000)
}
