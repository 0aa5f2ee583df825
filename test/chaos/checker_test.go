package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// seeds are processed_event rows written before the run: old ones, beyond
// the 48h horizon, that a purge must delete, and recent ones, inside it,
// that no purge may touch.
type seeds struct {
	old, inside map[string][]uuid.UUID // database -> ids
}

const (
	seedOldAge    = "72 hours"
	seedInsideAge = "30 hours"
)

func (e *env) seedProcessed(nOld, nInside int) *seeds {
	e.t.Helper()
	s := &seeds{old: map[string][]uuid.UUID{}, inside: map[string][]uuid.UUID{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, db := range []string{e.stockDB, e.shipDB} {
		for _, tier := range []struct {
			n   int
			age string
			dst map[string][]uuid.UUID
		}{{nOld, seedOldAge, s.old}, {nInside, seedInsideAge, s.inside}} {
			ids := make([]uuid.UUID, tier.n)
			for i := range ids {
				ids[i] = uuid.New()
			}
			if e.partitioned {
				ids = e.seedIDsPartitioned(db, tier.n, tier.age)
			}
			if _, err := e.db(db).Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
				SELECT unnest($1::uuid[]), now() - $2::interval`, ids, tier.age); err != nil {
				e.t.Fatalf("seed %s: %v", db, err)
			}
			tier.dst[db] = ids
		}
	}
	return s
}

// dbNow is the database clock: rows recorded by this run have
// processed_at after it.
func (e *env) dbNow() time.Time {
	e.t.Helper()
	var now time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.db(e.stockDB).QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		e.t.Fatalf("db clock: %v", err)
	}
	return now
}

// recorded counts the processed_event rows of a service written since t0.
func (e *env) recorded(db string, t0 time.Time) (int, error) {
	return e.count(db, `SELECT count(*) FROM processed_event WHERE processed_at >= $1`, t0)
}

// quiesce waits until every good event is recorded, every bad input is in
// a failure queue and no other queue holds a message (ready, unacked, or
// waiting in a retry queue).
func (e *env) quiesce(pl *plan, t0 time.Time, timeout time.Duration) (string, bool) {
	nStock, nShip := pl.count(evPlaced), pl.count(evStatusChanged)
	badStock := 0
	for _, b := range pl.bad {
		if b.queue == e.stockQ {
			badStock++
		}
	}
	badShip := len(pl.bad) - badStock
	var last string
	ok := waitUntil(timeout, func() bool {
		s, err1 := e.recorded(e.stockDB, t0)
		h, err2 := e.recorded(e.shipDB, t0)
		fs, err3 := e.queueDepth(e.stockQ + ".failed")
		fh, err4 := e.queueDepth(e.shipQ + ".failed")
		qs, err5 := e.queueDepth(e.stockQ)
		qh, err6 := e.queueDepth(e.shipQ)
		last = fmt.Sprintf("recorded %d/%d stock, %d/%d shipping; failed %d/%d, %d/%d; queued %d, %d",
			s, nStock, h, nShip, fs, badStock, fh, badShip, qs, qh)
		for _, err := range []error{err1, err2, err3, err4, err5, err6} {
			if err != nil {
				last += "; " + err.Error()
				return false
			}
		}
		if s < nStock || h < nShip || fs < badStock || fh < badShip || qs > 0 || qh > 0 {
			return false
		}
		left, err := e.leftovers()
		if err != nil {
			last += "; " + err.Error()
			return false
		}
		if len(left) > 0 {
			last += fmt.Sprintf("; in queues: %v", left)
			return false
		}
		return true
	})
	return last, ok
}

// report is what the checker found.
type report struct {
	events, stockEvents, shipEvents int
	applied, twice, lost, wrong     int
	unexpected                      int
	badTotal, badQuarantined        int
	failureCopies                   int
	problems                        []string
}

func (r *report) problem(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// failedMessage is one message read from a failure queue.
type failedMessage struct {
	queue string
	body  []byte
	hdr   amqp.Table
}

// readFailed drains the failure queues (at the very end: nothing consumes
// them any more).
func (e *env) readFailed() ([]failedMessage, error) {
	conn, err := e.dialAMQP()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	var out []failedMessage
	for _, q := range []string{e.stockQ, e.shipQ} {
		for {
			d, ok, err := ch.Get(q+".failed", true)
			if err != nil {
				return nil, fmt.Errorf("get %s.failed: %w", q, err)
			}
			if !ok {
				break
			}
			out = append(out, failedMessage{queue: q, body: d.Body, hdr: d.Headers})
		}
	}
	return out, nil
}

// queueDepth returns a queue's ready messages.
func (e *env) queueDepth(name string) (int, error) {
	conn, err := e.dialAMQP()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	return q.Messages, nil
}

// leftovers lists every queue of the vhost but the failure queues that
// still holds a message (ready or unacknowledged).
func (e *env) leftovers() (map[string]int, error) {
	out, err := e.ctl("list_queues", "-p", e.vhost, "--quiet", "--no-table-headers", "name", "messages")
	if err != nil {
		return nil, err
	}
	left := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasSuffix(f[0], ".failed") {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
			left[f[0]] = n
		}
	}
	return left, nil
}

func pgUUIDs(rows pgx.Rows) (map[uuid.UUID]bool, error) {
	set := map[uuid.UUID]bool{}
	var id uuid.UUID
	_, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		set[id] = true
		return nil
	})
	return set, err
}

// check reads the databases and the failure queues (every daemon must be
// stopped) and compares them with what was sent.
func (e *env) check(pl *plan, sd *seeds) *report {
	t := e.t
	t.Helper()
	r := &report{events: len(pl.goods), badTotal: len(pl.bad)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	limit := func(list []string) string {
		if len(list) > 5 {
			return strings.Join(list[:5], "; ") + fmt.Sprintf("; ... (%d in all)", len(list))
		}
		return strings.Join(list, "; ")
	}

	// Stock: one reservation row per line of every order, once.
	type agg struct {
		n     int
		milli int64
	}
	got := map[uuid.UUID]agg{}
	rows, err := e.db(e.stockDB).Query(ctx, `SELECT order_id, count(*), (sum(quantity) * 1000)::bigint FROM reservation GROUP BY order_id`)
	if err != nil {
		t.Fatalf("read reservations: %v", err)
	}
	var oid uuid.UUID
	var a agg
	if _, err := pgx.ForEachRow(rows, []any{&oid, &a.n, &a.milli}, func() error { got[oid] = a; return nil }); err != nil {
		t.Fatalf("read reservations: %v", err)
	}
	var lost, twice, wrong []string
	for order, g := range pl.stockByOrd {
		r.stockEvents++
		x, ok := got[order]
		switch {
		case !ok:
			lost = append(lost, "order "+order.String()+" (event "+g.id.String()+")")
		case x.n > g.lines:
			twice = append(twice, fmt.Sprintf("order %s: %d reservation rows for %d lines", order, x.n, g.lines))
		case x.n < g.lines || x.milli != g.qtyMilli:
			wrong = append(wrong, fmt.Sprintf("order %s: %d rows, %d thousandths; want %d, %d", order, x.n, x.milli, g.lines, g.qtyMilli))
		default:
			r.applied++
		}
		delete(got, order)
	}
	for order, x := range got {
		r.unexpected++
		r.problem("reservation of an order nobody sent (a bad input applied?): %s, %d rows", order, x.n)
	}
	for _, b := range pl.bad {
		if b.orderID != uuid.Nil {
			if _, ok := got[b.orderID]; ok {
				r.problem("bad input %q was applied", b.kind)
			}
		}
	}

	// Shipping: the newest version's status of every order.
	shipRows, err := e.db(e.shipDB).Query(ctx, `SELECT order_id, status, version FROM order_status`)
	if err != nil {
		t.Fatalf("read order_status: %v", err)
	}
	type st struct {
		status  string
		version int
	}
	ship := map[uuid.UUID]st{}
	var s st
	if _, err := pgx.ForEachRow(shipRows, []any{&oid, &s.status, &s.version}, func() error { ship[oid] = s; return nil }); err != nil {
		t.Fatalf("read order_status: %v", err)
	}
	for order, want := range pl.shipFinal {
		g, ok := ship[order]
		switch {
		case !ok:
			wrong = append(wrong, "shipping order "+order.String()+": no order_status row")
		case g.version != want.version || g.status != want.status:
			wrong = append(wrong, fmt.Sprintf("shipping order %s: %s v%d, want %s v%d", order, g.status, g.version, want.status, want.version))
		}
		delete(ship, order)
	}
	for order := range ship {
		r.unexpected++
		r.problem("order_status of an order nobody sent (a bad input applied?): %s", order)
	}

	// processed_event: every good id recorded in its service, no bad id,
	// the seeds beyond the horizon purged, those inside kept.
	for _, svc := range []struct{ db, name string }{{e.stockDB, evPlaced}, {e.shipDB, evStatusChanged}} {
		rows, err := e.db(svc.db).Query(ctx, `SELECT event_id FROM processed_event`)
		if err != nil {
			t.Fatalf("read processed_event: %v", err)
		}
		ids, err := pgUUIDs(rows)
		if err != nil {
			t.Fatalf("read processed_event: %v", err)
		}
		var missing []string
		for _, g := range pl.goods {
			if g.name != svc.name {
				continue
			}
			if !ids[g.id] {
				missing = append(missing, g.id.String())
			} else if g.name == evStatusChanged {
				r.applied++
			}
			delete(ids, g.id)
		}
		if g := len(missing); g > 0 {
			r.problem("%s: %d good events have no processed_event row (lost, or purged inside the horizon): %s", svc.db, g, limit(missing))
		}
		if svc.name == evStatusChanged {
			r.shipEvents = pl.count(evStatusChanged)
			r.lost += len(missing)
		}
		for _, b := range pl.bad {
			if b.eventID != uuid.Nil && ids[b.eventID] {
				r.problem("bad input %q (event %s) has a processed_event row", b.kind, b.eventID)
			}
		}
		purgedInside := 0
		for _, id := range sd.inside[svc.db] {
			if !ids[id] {
				purgedInside++
			}
			delete(ids, id)
		}
		if purgedInside > 0 {
			r.problem("%s: %d processed_event rows inside the horizon (%s old, horizon 48h) were purged", svc.db, purgedInside, seedInsideAge)
		}
		keptOld := 0
		for _, id := range sd.old[svc.db] {
			if ids[id] {
				keptOld++
			}
			delete(ids, id)
		}
		if keptOld > 0 {
			r.problem("%s: %d processed_event rows beyond the horizon (%s old) survived the purges", svc.db, keptOld, seedOldAge)
		}
		for _, b := range pl.bad {
			delete(ids, b.eventID)
		}
		if len(ids) > 0 {
			r.problem("%s: %d processed_event rows of events nobody sent", svc.db, len(ids))
		}
	}
	r.lost += len(lost)
	r.twice = len(twice)
	r.wrong = len(wrong)
	if len(lost) > 0 {
		r.problem("lost: %s", limit(lost))
	}
	if len(twice) > 0 {
		r.problem("applied twice: %s", limit(twice))
	}
	if len(wrong) > 0 {
		r.problem("wrong state: %s", limit(wrong))
	}

	// Failure queues: every bad input, with its reason; nothing else.
	msgs, err := e.readFailed()
	if err != nil {
		t.Fatalf("read failure queues: %v", err)
	}
	r.failureCopies = len(msgs)
	byBody := map[string]*badInput{}
	for _, b := range pl.bad {
		byBody[string(b.body)] = b
	}
	goodByID := map[uuid.UUID]*goodEvent{}
	for _, g := range pl.goods {
		goodByID[g.id] = g
	}
	seen := map[*badInput]int{}
	for _, m := range msgs {
		b, ok := byBody[string(m.body)]
		if !ok {
			var w struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal(m.body, &w)
			if id, err := uuid.Parse(w.EventID); err == nil && goodByID[id] != nil {
				r.problem("good event %s in %s.failed: reason %v, error %v", id, m.queue, m.hdr["x-failure-reason"], m.hdr["x-error"])
			} else {
				r.problem("unknown message in %s.failed (%d bytes): reason %v", m.queue, len(m.body), m.hdr["x-failure-reason"])
			}
			continue
		}
		seen[b]++
		wantPool := poolStock
		if b.queue == e.shipQ {
			wantPool = poolShip
		}
		switch {
		case m.queue != b.queue:
			r.problem("bad input %q in %s.failed, want %s.failed", b.kind, m.queue, b.queue)
		case m.hdr["x-failure-reason"] != b.reason:
			r.problem("bad input %q quarantined with reason %v (error %v), want %s", b.kind, m.hdr["x-failure-reason"], m.hdr["x-error"], b.reason)
		case m.hdr["x-pool"] != wantPool:
			r.problem("bad input %q: x-pool %v, want %s", b.kind, m.hdr["x-pool"], wantPool)
		case m.hdr["x-original-routing-key"] != b.rk:
			r.problem("bad input %q: x-original-routing-key %v, want %s", b.kind, m.hdr["x-original-routing-key"], b.rk)
		default:
			if errText, _ := m.hdr["x-error"].(string); errText == "" {
				r.problem("bad input %q: empty x-error", b.kind)
			} else if at, _ := m.hdr["x-failed-at"].(string); at == "" {
				r.problem("bad input %q: no x-failed-at", b.kind)
			} else if _, err := time.Parse(time.RFC3339, at); err != nil {
				r.problem("bad input %q: x-failed-at %q is not RFC 3339", b.kind, at)
			} else if _, ok := m.hdr["x-attempt"]; !ok {
				r.problem("bad input %q: no x-attempt", b.kind)
			} else {
				for _, sec := range e.secretList() {
					if strings.Contains(errText, sec) {
						r.problem("bad input %q: x-error carries a secret", b.kind)
					}
				}
				if seen[b] == 1 {
					r.badQuarantined++
				}
			}
		}
	}
	var notFound []string
	for _, b := range pl.bad {
		if seen[b] == 0 {
			notFound = append(notFound, b.kind)
		}
	}
	sort.Strings(notFound)
	if len(notFound) > 0 {
		r.problem("bad inputs missing from the failure queues: %s", strings.Join(notFound, ", "))
	}

	left, err := e.leftovers()
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	for q, n := range left {
		r.problem("queue %s still holds %d messages after the daemons stopped", q, n)
	}
	return r
}
