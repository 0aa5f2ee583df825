package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/test/exactly"
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

// quiesce waits until every good event is recorded, every bad input is a
// row of its service's failure store in state failed with none retrying
// or parked, and no queue holds a message (ready, unacked, or waiting in a
// retry queue).
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
		fs, ms, err3 := e.failureStates(e.stockDB)
		fh, mh, err4 := e.failureStates(e.shipDB)
		qs, err5 := e.queueDepth(e.stockQ)
		qh, err6 := e.queueDepth(e.shipQ)
		last = fmt.Sprintf("recorded %d/%d stock, %d/%d shipping; failed %d/%d, %d/%d (retrying or parked %d, %d); queued %d, %d",
			s, nStock, h, nShip, fs, badStock, fh, badShip, ms, mh, qs, qh)
		for _, err := range []error{err1, err2, err3, err4, err5, err6} {
			if err != nil {
				last += "; " + err.Error()
				return false
			}
		}
		if s < nStock || h < nShip || fs < badStock || fh < badShip || ms > 0 || mh > 0 || qs > 0 || qh > 0 {
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

// failureStates counts the rows of a service database's failure store in
// state failed, and those still in motion (retrying or parked).
func (e *env) failureStates(db string) (failed, moving int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = e.db(db).QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'failed'),
		count(*) FILTER (WHERE state IN ('retrying', 'parked')) FROM platform.failed_event`).Scan(&failed, &moving)
	return failed, moving, err
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

// leftovers lists every queue of the vhost that still holds a message
// (ready or unacknowledged): failures are rows of the failure store, so no
// queue is exempt.
func (e *env) leftovers() (map[string]int, error) {
	out, err := e.ctl("list_queues", "-p", e.vhost, "--quiet", "--no-table-headers", "name", "messages")
	if err != nil {
		return nil, err
	}
	left := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		if n, err := strconv.Atoi(f[1]); err == nil && n > 0 {
			left[f[0]] = n
		}
	}
	return left, nil
}

// check reads the databases and their failure stores (every daemon must be
// stopped) and compares them with what was sent, through the suite's
// exactly-once checker (package exactly).
func (e *env) check(pl *plan, sd *seeds) *exactly.Report {
	t := e.t
	t.Helper()
	r := &exactly.Report{Events: len(pl.goods), BadTotal: len(pl.bad)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Stock: one reservation row per line of every order, once; no
	// order of a bad input reserved.
	got, err := exactly.ReadCounts(ctx, e.db(e.stockDB), `SELECT order_id, count(*), (sum(quantity) * 1000)::bigint FROM reservation GROUP BY order_id`)
	if err != nil {
		t.Fatalf("read reservations: %v", err)
	}
	want := map[uuid.UUID]exactly.Want{}
	for order, g := range pl.stockByOrd {
		want[order] = exactly.Want{Rows: g.lines, Sum: g.qtyMilli, Label: "order " + order.String() + " (event " + g.id.String() + ")"}
	}
	forbidden := map[uuid.UUID]string{}
	for _, b := range pl.bad {
		if b.orderID != uuid.Nil {
			forbidden[b.orderID] = b.kind
		}
	}
	exactly.Tally(r, exactly.Ledger[uuid.UUID]{What: "reservation", Want: want, Got: got, Forbidden: forbidden})

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
	var oid uuid.UUID
	var s st
	if _, err := pgx.ForEachRow(shipRows, []any{&oid, &s.status, &s.version}, func() error { ship[oid] = s; return nil }); err != nil {
		t.Fatalf("read order_status: %v", err)
	}
	final := map[uuid.UUID]st{}
	for order, g := range pl.shipFinal {
		final[order] = st{status: g.status, version: g.version}
	}
	exactly.Final(r, "shipping order_status", final, ship)

	// processed_event: every good id recorded in its service, no bad id,
	// the seeds beyond the horizon purged, those inside kept. Shipping's
	// events are counted here (its table keeps one row per order).
	never := map[uuid.UUID]string{}
	for _, b := range pl.bad {
		if b.eventID != uuid.Nil {
			never[b.eventID] = b.kind
		}
	}
	for _, svc := range []struct{ db, name string }{{e.stockDB, evPlaced}, {e.shipDB, evStatusChanged}} {
		ids, err := exactly.ReadIDs(ctx, e.db(svc.db), `SELECT event_id FROM processed_event`)
		if err != nil {
			t.Fatalf("read processed_event: %v", err)
		}
		var sent []uuid.UUID
		for _, g := range pl.goods {
			if g.name == svc.name {
				sent = append(sent, g.id)
			}
		}
		exactly.CheckRecorded(r, exactly.Recorded{DB: svc.db, Sent: sent, Count: svc.name == evStatusChanged, Never: never,
			Kept: sd.inside[svc.db], KeptAge: seedInsideAge + ", horizon 48h", Purged: sd.old[svc.db], PurgedAge: seedOldAge}, ids)
	}
	r.Close()

	// Failure stores: every bad input one row, with its reason; nothing
	// else.
	var rows []exactly.Failed
	for _, db := range []string{e.stockDB, e.shipDB} {
		f, err := exactly.ReadFailed(ctx, e.db(db), db)
		if err != nil {
			t.Fatalf("read failure store: %v", err)
		}
		rows = append(rows, f...)
	}
	bad := make([]exactly.Bad, len(pl.bad))
	for i, b := range pl.bad {
		pool, db := poolStock, e.stockDB
		if b.queue == e.shipQ {
			pool, db = poolShip, e.shipDB
		}
		bad[i] = exactly.Bad{Kind: b.kind, Body: b.body, DB: db, Pool: pool, Reason: b.reason, RoutingKey: b.rk}
	}
	goods := map[uuid.UUID]bool{}
	for _, g := range pl.goods {
		goods[g.id] = true
	}
	exactly.Quarantined(r, bad, rows, goods, e.secretList())

	left, err := e.leftovers()
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	exactly.Leftovers(r, left)
	return r
}
