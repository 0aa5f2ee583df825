package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// TestChaosFailureStore SIGKILLs the daemon while thousands of bad events
// are stored as failures (a kill between a batch's commit and its ack
// redelivers failures already stored), then while a server-side retry of
// them all runs (a kill between a chunk's confirm and its mark resends
// copies). Every bad event must end as exactly one row, resolved once by
// the transaction that applied its fixed body, every event applied once,
// none twice, none lost.
func TestChaosFailureStore(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	rng := seedRNG(t)
	nBad, nGood, kills := 10000, 2000, 3
	if testing.Short() {
		nBad, nGood, kills = 2000, 500, 2
	}
	e := newEnv(t)
	d := e.newDaemon(daemonOpts{name: "solo", services: []string{svcStock}})
	d.migrate()
	d.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &chaos{t: t, ctx: ctx, e: e, a: d, rng: rng, t0: time.Now()}
	c.waitPools(d, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	db := e.db(e.stockDB)
	t0 := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("%6.1fs "+format, append([]any{time.Since(t0).Seconds()}, args...)...)
	}

	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	type event struct {
		id, order uuid.UUID
		bad       bool
	}
	body := func(ev event, quantity string) []byte {
		payload := fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":%q}]}`,
			ev.order, uuid.New(), uuid.New(), quantity)
		b, _ := json.Marshal(map[string]any{"event_id": ev.id, "event_name": "order.order.placed.v1",
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(payload)})
		return b
	}
	events := make([]event, 0, nBad+nGood)
	for i := range nBad + nGood {
		events = append(events, event{id: uuid.Must(uuid.NewV7()), order: uuid.New(), bad: i%((nBad+nGood)/nGood) != 0})
	}
	bad := 0
	for _, ev := range events {
		if ev.bad {
			bad++
		}
	}
	// Publish every event, a tenth of the bad ones twice (a republish:
	// the second copy counts in its row's copies), killing the daemon
	// at random points while they are stored.
	killAt := map[int]bool{}
	for range kills {
		killAt[nBad/4+rng.IntN(nBad/2)] = true
	}
	published := 0
	// Confirms are waited for in windows of 200: one round trip per
	// message made the publishing, not the daemon, the test's length.
	var pending []*amqp.DeferredConfirmation
	confirm := func() {
		for _, dc := range pending {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				t.Fatalf("publish not confirmed: %v", err)
			}
		}
		pending = pending[:0]
	}
	for i, ev := range events {
		q := "1.000"
		if ev.bad {
			q = "-1"
		}
		copies := 1
		if ev.bad && rng.IntN(10) == 0 {
			copies = 2
		}
		for range copies {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, "order.order.placed.v1", false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body(ev, q)})
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, dc)
			published++
		}
		if len(pending) >= 200 {
			confirm()
		}
		if killAt[i] {
			d.kill()
			logf("SIGKILL while failures are stored (%d published)", published)
			d.start()
		}
	}
	confirm()
	stored := func() int {
		n, err := e.count(e.stockDB, `SELECT count(*) FROM platform.failed_event`)
		if err != nil {
			return -1
		}
		return n
	}
	if !waitUntil(3*time.Minute, func() bool { return stored() == bad }) {
		t.Fatalf("%d failures stored, want one row per bad event: %d", stored(), bad)
	}
	var copies, distinct int
	if err := db.QueryRow(ctx, `SELECT coalesce(sum(copies), 0), count(DISTINCT event_id) FROM platform.failed_event WHERE reason = 'permanent'`).Scan(&copies, &distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != bad {
		t.Errorf("%d distinct events among the failures, want %d", distinct, bad)
	}
	logf("stored: %d failures of %d bad events, %d copies counted, after %d kills", stored(), bad, copies, kills)

	// Fix them (as an edit would: the edited body is what a retry
	// sends), then retry them all, killing the daemon mid-way.
	if _, err := db.Exec(ctx, `UPDATE platform.failed_event
		SET edited_body = convert_to(replace(convert_from(body, 'UTF8'), '"quantity":"-1"', '"quantity":"1.000"'), 'UTF8')`); err != nil {
		t.Fatal(err)
	}
	actx, acancel := e.adminCtx()
	resp, err := d.adminClient().RetryFailedEvents(actx, &adminv1.RetryFailedEventsRequest{
		Filter: &adminv1.FailureFilter{Pool: poolStock, Reason: "permanent"}, Rate: 2000})
	acancel()
	if err != nil {
		t.Fatalf("RetryFailedEvents: %v", err)
	}
	id := resp.GetRetry().GetId()
	if got := resp.GetRetry().GetSelected(); int(got) != bad {
		t.Fatalf("retry selected %d, want %d", got, bad)
	}
	for k := range kills {
		resolved := func() int {
			n, _ := e.count(e.stockDB, `SELECT count(*) FROM platform.failed_event WHERE state = 'resolved'`)
			return n
		}
		target := bad * (k + 1) / (kills + 2)
		waitUntil(time.Minute, func() bool { return resolved() >= target })
		d.kill()
		logf("SIGKILL during the retry (%d of %d resolved)", resolved(), bad)
		d.start()
	}
	done := func() bool {
		actx, acancel := e.readCtx()
		defer acancel()
		r, err := d.adminClient().GetFailureRetry(actx, &adminv1.GetFailureRetryRequest{Id: id})
		return err == nil && r.GetRetry().GetState() == adminv1.FailureRetryState_FAILURE_RETRY_STATE_DONE && int(r.GetRetry().GetResolved()) == bad
	}
	if !waitUntil(3*time.Minute, done) {
		n, _ := e.count(e.stockDB, `SELECT count(*) FROM platform.failed_event WHERE state = 'resolved'`)
		t.Fatalf("retry not done with every failure resolved after 3m: %d of %d resolved", n, bad)
	}
	d.stop()

	// Every event applied once, its reservation once; every failure one
	// row, resolved.
	check := func(what, q string, want int) {
		n, err := e.count(e.stockDB, q)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != want {
			t.Errorf("%s: %d, want %d", what, n, want)
		}
	}
	check("events applied", `SELECT count(*) FROM processed_event`, len(events))
	check("reservations", `SELECT count(*) FROM reservation`, len(events))
	check("orders reserved twice", `SELECT count(*) FROM (SELECT order_id FROM reservation GROUP BY order_id HAVING count(*) > 1) d`, 0)
	check("failure rows", `SELECT count(*) FROM platform.failed_event`, bad)
	check("failures not resolved", `SELECT count(*) FROM platform.failed_event WHERE state <> 'resolved' OR resolved_at IS NULL`, 0)
	t.Logf("chaos: failure store: %d bad of %d events, %d published, %d kills while storing and %d while retrying: one row each, resolved once, applied twice 0, lost 0",
		bad, len(events), published, kills, kills)
}
