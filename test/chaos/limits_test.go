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

// TestChaosPauseAllSurvivesSIGKILL: the kill switch set through the admin
// API, then the daemon SIGKILLed and started again while events wait: the
// restarted daemon consumes nothing until ResumeAll, then applies every
// event once.
func TestChaosPauseAllSurvivesSIGKILL(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	const n = 300
	e := newEnv(t)
	d := e.newDaemon(daemonOpts{name: "solo", services: []string{svcStock}})
	d.migrate()
	d.start()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &chaos{t: t, ctx: ctx, e: e, a: d, t0: time.Now()}
	c.waitPools(d, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)

	actx, acancel := e.adminCtx()
	_, err := d.adminClient().PauseAll(actx, &adminv1.PauseAllRequest{Reason: "chaos: kill switch"})
	acancel()
	if err != nil {
		t.Fatalf("PauseAll: %v", err)
	}
	c.waitPools(d, adminv1.PoolState_POOL_STATE_PAUSED, 10*time.Second)
	d.kill()

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
	for range n {
		payload := fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"lines":[{"product_id":%q,"quantity":"1"}]}`, uuid.New(), uuid.New(), uuid.New())
		body, _ := json.Marshal(map[string]any{"event_id": uuid.Must(uuid.NewV7()), "event_name": "order.order.placed.v1",
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(payload)})
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, "order.order.placed.v1", false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
	}
	before := c.stockApplied()
	d.start()
	c.waitPools(d, adminv1.PoolState_POOL_STATE_PAUSED, 30*time.Second)
	_ = sleepCtx(ctx, 1500*time.Millisecond)
	if got := c.stockApplied(); got != before {
		t.Fatalf("a daemon started under the kill switch applied %d events", got-before)
	}
	p, err := d.poolInfo(poolStock)
	if err != nil || p.GetPausedReason() != "pause-all: chaos: kill switch" {
		t.Errorf("restarted daemon reports %v (%v), want paused with the kill switch's reason", p, err)
	}

	actx, acancel = e.adminCtx()
	_, err = d.adminClient().ResumeAll(actx, &adminv1.ResumeAllRequest{})
	acancel()
	if err != nil {
		t.Fatalf("ResumeAll: %v", err)
	}
	if !waitUntil(60*time.Second, func() bool { return c.stockApplied() == before+n }) {
		t.Fatalf("after ResumeAll: %d of %d events applied", c.stockApplied()-before, n)
	}
	if dups, err := e.count(e.stockDB, `SELECT count(*) - count(DISTINCT order_id) FROM reservation`); err != nil || dups != 0 {
		t.Errorf("%d events applied twice (%v)", dups, err)
	}
}
