package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/metrics"
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

// report prints what happened and what the databases hold, at a glance.
func (dm *demo) report(c counters, v verdict) {
	pl := dm.plan
	w := dm.out
	p := func(label, format string, args ...any) {
		_, _ = fmt.Fprintf(w, "%-27s"+format+"\n", append([]any{label + ":"}, args...)...)
	}
	_, _ = fmt.Fprintln(w)
	p("events published", "%d (%d orders, %d status changes) by order, %d stock.stock.reserved.v1 by stock", len(pl.events),
		len(pl.stockIDs), len(pl.shippingIDs), len(pl.orders))
	kill := "no SIGKILL"
	if n := len(dm.killedAfter); n > 0 {
		what := "SIGKILL"
		if dm.proxy != nil {
			what = "connection loss + SIGKILL"
		}
		kill = what
		if n > 1 {
			kill = fmt.Sprintf("%d x %s", n, what)
		}
	}
	dups := int(c.outcome[outDuplicate])
	p("duplicates provoked", "%s, %s, replayed %d", dm.relayKillText(), kill, len(pl.replay))
	// Each event was processed once (checked below); every other delivery
	// platformd settled was a duplicate it skipped.
	runs := "1 platformd run"
	if dm.runs > 1 {
		runs = fmt.Sprintf("%d platformd runs", dm.runs)
	}
	deliveries := len(pl.events) + len(pl.orders) + dups
	if dm.billing != nil {
		deliveries += len(pl.stockIDs) // billing's copy of each order.order.placed.v1
	}
	p("deliveries (with copies)", "%d over %s", deliveries, runs)
	p("duplicates skipped", "%-4d (relay republish %d, broker redelivery %d, replay %d)", dups,
		int(c.source[metrics.SourceRepublish]), int(c.source[metrics.SourceRedelivery]), int(c.source[metrics.SourceReplay]))
	if n := c.outcome[outRetried] + c.outcome[outFailed] + c.outcome[outRejected]; n > 0 {
		p("retried/failed/rejected", "%d/%d/%d", int(c.outcome[outRetried]), int(c.outcome[outFailed]), int(c.outcome[outRejected]))
	}
	p("reservations created", "%d (expected %d)", v.reservations, pl.lines)
	p("parcels prepared", "%d (expected %d), from stock.stock.reserved.v1 relayed from stock's outbox", v.parcels, len(pl.orders))
	p("rolled-back orders", "%d written then rolled back, none delivered", len(dm.writer.rolledBackOrders))
	p("order statuses", "%d at their latest version (expected %d)", v.latest, len(pl.orders))
	p("processed_event rows", "stock %d, shipping %d (expected %d, %d)", v.rows[0], v.rows[1], len(pl.stockIDs), len(pl.shippingIDs))
	if dm.billing != nil {
		p("invoices (billing, PHP)", "%d (expected %d), by a remote handler; billing processed_event rows %d", v.invoices, len(pl.orders), v.billingRows)
	}
	if len(v.problems) == 0 {
		p("exactly once", "OK")
	} else {
		p("exactly once", "FAILED (see below)")
	}
	foot := fmt.Sprintf("Duplicates are platformd's own counters, summed over its runs. The other lines are read "+
		"from the databases, for this run's %d events only.", len(pl.events))
	if dm.leftover > 0 {
		foot += fmt.Sprintf(" The counters include the %d messages an earlier run left queued.", dm.leftover)
	}
	if dm.approx {
		foot += " The counters of a SIGKILLed run miss what it settled after the demo last read them: " +
			"the duplicate counts are a little low."
	}
	foot += fmt.Sprintf(" Took %s.", time.Since(dm.started).Round(100*time.Millisecond))
	_, _ = fmt.Fprintf(w, "\n%s\n", wrap(foot, 92))
}

// relayKillText describes the relay kills for the report.
func (dm *demo) relayKillText() string {
	if len(dm.relayKilled) == 0 {
		return "no relay kill"
	}
	rows, known := 0, true
	for _, n := range dm.relayKilled {
		if n < 0 {
			known = false
		}
		rows += max(n, 0)
	}
	what := fmt.Sprintf("%d x relay SIGKILLed between confirm and delete", len(dm.relayKilled))
	if known {
		what += fmt.Sprintf(" (%d rows confirmed, not deleted)", rows)
	}
	return what
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
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
