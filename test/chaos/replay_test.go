package chaos

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/testdb"
)

// replayServices: order, a producer with an archive, beside the stock
// service.
const replayServices = `  - name: order
    database: "{{ORDER_DSN}}"
    outbox: {relay: true, batch_size: 200, poll: 200ms, archive: 24h}
`

// TestReplayKilled SIGKILLs the daemon running a replay, twice, at random
// points, and starts another each time: the replay resumes and finishes
// with published = matched, and a tap bound to the exchange sees each
// event exactly once with the replay's x-replay header.
func TestReplayKilled(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	e := newEnv(t)
	rng := seedRNG(t)
	ctx := context.Background()
	n := 1500
	if testing.Short() {
		n = 600
	}
	orderDB := testdb.Name("chaos_order")
	t.Cleanup(func() { testdb.Drop(orderDB) })
	mk := func(name string) *daemon {
		svcs := strings.NewReplacer("{{ORDER_DSN}}", e.dsn(pgAddr(t), orderDB, "")).Replace(replayServices)
		return e.newDaemon(daemonOpts{name: name, dbAddr: pgAddr(t), servicesYAML: svcs, services: []string{svcStock}})
	}

	// The tap: copies by x-replay value and event id.
	deliveries, ch := e.tap("tap.replay." + e.id)
	var mu sync.Mutex
	copies := map[string]map[string]int{} // replay id -> event id -> copies
	go func() {
		for d := range deliveries {
			r, _ := d.Headers["x-replay"].(string)
			mu.Lock()
			if copies[r] == nil {
				copies[r] = map[string]int{}
			}
			copies[r][d.MessageId]++
			mu.Unlock()
		}
	}()

	a := mk("a")
	a.migrate()
	a.start()
	db := e.db(orderDB) //nolint:contextcheck // the harness's pool outlives this call
	start := time.Now().Add(-time.Minute)
	if _, err := db.Exec(ctx, `SELECT platform.publish('order.order.placed.v1', jsonb_build_object(
		'order_id', gen_random_uuid(), 'customer_id', gen_random_uuid(),
		'lines', jsonb_build_array(jsonb_build_object('product_id', gen_random_uuid(), 'quantity', '1.000'))))
		FROM generate_series(1, $1)`, n); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(time.Minute, func() bool {
		var k int
		return db.QueryRow(ctx, `SELECT count(*) FROM platform.outbox_archive`).Scan(&k) == nil && k == n
	}) {
		t.Fatal("the orders were not archived within 1m")
	}

	actx, cancel := e.adminCtx()
	resp, err := a.adminClient().ReplayEvents(actx, &adminv1.ReplayEventsRequest{
		Service: "order", From: timestamppb.New(start), To: timestamppb.New(time.Now().Add(time.Minute)), Rate: 400,
	})
	cancel()
	if err != nil {
		t.Fatalf("ReplayEvents: %v", err)
	}
	id := resp.GetReplay().GetId()
	get := func(d *daemon) *adminv1.Replay {
		rctx, cancel := e.readCtx()
		defer cancel()
		r, err := d.adminClient().GetReplay(rctx, &adminv1.GetReplayRequest{Service: "order", Id: id})
		if err != nil {
			return nil
		}
		return r.GetReplay()
	}
	cur := a
	for i, name := range []string{"b", "c"} {
		at := int64(n) * int64(20+rng.IntN(25)*(i+1)) / 100
		if !waitUntil(time.Minute, func() bool { r := get(cur); return r != nil && r.GetPublished() >= at }) {
			t.Fatalf("the replay did not reach %d published on daemon %s", at, cur.name)
		}
		t.Logf("SIGKILL %s at %d published", cur.name, get(cur).GetPublished())
		cur.kill()
		cur = mk(name)
		cur.start()
	}
	if !waitUntil(2*time.Minute, func() bool {
		r := get(cur)
		return r != nil && r.GetState() == adminv1.ReplayState_REPLAY_STATE_DONE
	}) {
		t.Fatalf("the replay did not finish on daemon %s: %v", cur.name, get(cur))
	}
	r := get(cur)
	if r.GetPublished() != int64(n) || r.GetMatched() != int64(n) {
		t.Errorf("published %d, matched %d, want %d", r.GetPublished(), r.GetMatched(), n)
	}
	if !waitUntil(30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(copies[id]) == n }) {
		mu.Lock()
		t.Fatalf("the tap saw %d distinct events of the replay, want %d", len(copies[id]), n)
	}
	// A sentinel published after the replay ended: once the tap saw it,
	// it saw every copy before it (one queue keeps order).
	if err := ch.PublishWithContext(ctx, e.exchange, "sentinel", false, false, amqp.Publishing{MessageId: "sentinel"}); err != nil {
		t.Fatal(err)
	}
	if !waitUntil(30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return copies[""]["sentinel"] == 1 }) {
		t.Fatal("the sentinel did not reach the tap")
	}
	mu.Lock()
	defer mu.Unlock()
	for ev, k := range copies[id] {
		if k != 1 {
			t.Errorf("event %s published %d times by the replay", ev, k)
		}
	}
	cur.stop()
}
