package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// The failure workbench end to end in one daemon, over the real broker and
// database: bad messages become rows, grouped by cause; a retry of the
// permanent ones with a canary stops when its canary fails again; an edit
// fixes one, and its retry applies it once and resolves its row in that
// commit; a resolved failure is not retried again.
func TestFailureWorkbenchEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, "failures_e2e")
	e := newReloadEnv(t, dsn)
	e.write(t, "", "")
	d := e.start(t)
	t.Cleanup(d.Stop)
	b := &backend{d: d}
	db, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)

	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	publish := func(body []byte) {
		c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "reload."+e.suffix, shop.EventOrderPlaced, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	orders := make([]uuid.UUID, 3)
	events := make([]uuid.UUID, 3)
	for i := range orders {
		orders[i], events[i] = uuid.New(), uuid.Must(uuid.NewV7())
		payload := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "-%d"}]}`,
			orders[i], uuid.New(), uuid.New(), i+1)
		body, err := envelope.Encode(envelope.Envelope{EventID: events[i], EventName: shop.EventOrderPlaced,
			OccurredAt: time.Now().UTC(), Payload: json.RawMessage(payload)})
		require.NoError(t, err)
		publish(body)
	}
	publish([]byte("not an envelope"))
	require.Eventually(t, func() bool {
		return count(t, db, `SELECT count(*) FROM platform.failed_event WHERE state = 'failed'`) == 4
	},
		30*time.Second, 20*time.Millisecond)

	groups, err := b.ListFailureGroups(ctx, "stock", failure.Filter{}, []string{failure.GroupReason})
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.Equal(t, "permanent", groups[0].Key[failure.GroupReason])
	require.EqualValues(t, 3, groups[0].Count)
	require.Equal(t, "decode", groups[1].Key[failure.GroupReason])
	msgs, err := b.ListFailedMessages(ctx, "stock-events", 10)
	require.NoError(t, err)
	require.Len(t, msgs, 4, "the old listing answers from the store")

	// The canary fails again (the payloads are still bad): the rest is
	// never sent.
	r, err := b.RetryFailedEvents(ctx, "", failure.RetryRequest{Filter: failure.Filter{Pool: "stock-events", Reason: "permanent"}, Canary: 1, Rate: 100}, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 3, r.Selected)
	require.Eventually(t, func() bool {
		r, err = b.GetFailureRetry(ctx, "stock", r.ID)
		require.NoError(t, err)
		return r.State == failure.RetryCanaryFailed
	}, 30*time.Second, 20*time.Millisecond)
	require.EqualValues(t, 1, r.Sent)
	require.EqualValues(t, 1, r.FailedAgain)
	require.Equal(t, 3, count(t, db, `SELECT count(*) FROM platform.failed_event WHERE reason = 'permanent' AND state = 'failed'`),
		"the canary's row is back to failed, one row still")

	// Fix one by an edit of its payload, then retry it alone.
	var id uuid.UUID
	require.NoError(t, db.QueryRow(ctx, `SELECT id FROM platform.failed_event WHERE event_id = $1`, events[0]).Scan(&id))
	fixed := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1.000"}]}`, orders[0], uuid.New(), uuid.New())
	ev, err := b.EditFailedEvent(ctx, id, []byte(fixed), "negative quantity", "ops")
	require.NoError(t, err)
	require.NotNil(t, ev.EditedBody)
	r, err = b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{IDs: []uuid.UUID{id}}}, "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err = b.GetFailureRetry(ctx, "stock", r.ID)
		require.NoError(t, err)
		return r.State == failure.RetryDone && r.Resolved == 1
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM platform.failed_event WHERE id = $1 AND state = 'resolved' AND resolved_at IS NOT NULL`, id))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM reservation WHERE order_id = $1`, orders[0]), "applied once, with the edited payload")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM processed_event WHERE event_id = $1`, events[0]))

	_, err = b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{IDs: []uuid.UUID{id}}}, "ops")
	require.ErrorIs(t, err, admin.ErrFailedPrecondition, "a resolved failure is not retried")
}

// seedRetryableFailures stores n failures of stock's pool whose copies
// apply (good payloads), as a bad deploy since fixed leaves them.
func seedRetryableFailures(ctx context.Context, t testing.TB, db *pgxpool.Pool, n int) {
	t.Helper()
	_, err := db.Exec(ctx, `INSERT INTO platform.failed_event (id, pool, failure_key, event_id, event_name, routing_key, body, reason, error, state)
		SELECT platform.uuid_v7(), 'stock-events', id::text, id, 'order.order.placed.v1', 'order.order.placed.v1',
			convert_to(json_build_object('event_id', id, 'event_name', 'order.order.placed.v1', 'occurred_at', now(),
				'payload', json_build_object('order_id', gen_random_uuid(), 'customer_id', gen_random_uuid(),
					'lines', json_build_array(json_build_object('product_id', gen_random_uuid(), 'quantity', '1.000'))))::text, 'UTF8'),
			'permanent', 'stock.reserve: product unknown', 'failed'
		FROM (SELECT gen_random_uuid() AS id FROM generate_series(1, $1)) g`, n)
	require.NoError(t, err)
}

// publishOrders publishes n good order events straight to queue, as fast
// as the channel takes them (no confirms: a backlog to drain).
func publishOrders(ctx context.Context, t testing.TB, ch *amqp.Channel, queue string, n int) {
	t.Helper()
	for range n {
		body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced,
			OccurredAt: time.Now(), Payload: []byte(fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1.000"}]}`,
				uuid.New(), uuid.New(), uuid.New()))})
		require.NoError(t, err)
		require.NoError(t, ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{ContentType: "application/json", Body: body}))
	}
}

// A server-side retry gives way to a backlog of another service's pool on
// its daemon, and goes back to its rate once it is gone; the copies it
// sends to its own pool's queue never make it give way (that pool shares
// its queue with them at the operator's rate); the time is counted.
func TestFailureRetryGivesWayToABacklog(t *testing.T) {
	t.Parallel()
	e := newReplayEnv(t)
	ctx := context.Background()
	seedRetryableFailures(ctx, t, e.stock, 4000)
	var runner *failure.Runner
	for _, s := range e.d.serviceList() {
		if s.name == "stock" {
			runner = s.retryRunner()
		}
	}
	require.NotNil(t, runner)
	sig := runner.TestSignals()
	sig.Yielding.Init(t)
	sig.ChunkSent.Init(t)
	conn, err := amqp.Dial(e.env.broker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	_, err = e.b.PausePool(ctx, "stock2-events", "a backlog to come", "test")
	require.NoError(t, err)
	publishOrders(ctx, t, ch, e.stock2Queue, 8000)

	// 400/s: chunks of 80 every 200 ms into stock's own queue.
	r, err := e.b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{Pool: "stock-events"}, Rate: 400}, "test")
	require.NoError(t, err)
	for range 3 {
		require.Equal(t, 80, sig.ChunkSent.WaitOrTimeout(), "the whole rate while no other pool has a backlog")
	}
	_, err = e.b.ResumePool(ctx, "stock2-events", "test")
	require.NoError(t, err)
	require.Equal(t, "stock2/stock2-events", sig.Yielding.WaitOrTimeout(), "the first pool given way to is the other service's")
	require.Less(t, e.pool(ctx, t, "stock2-events").Processed, uint64(8000), "while its backlog drains")
	require.Empty(t, sig.Yielding.WaitOrTimeout(), "back to its rate once the backlog is gone")
	require.Positive(t, testutil.ToFloat64(e.d.metrics.Failures.RetryYieldSeconds.WithLabelValues("stock")))
	_, err = e.b.CancelFailureRetry(ctx, "stock", r.ID, "test")
	require.NoError(t, err)
}

// BenchmarkLivePoolUnderFailureRetry measures what a server-side retry of
// 100,000 failures at 2,000/s (a canary of 100 first) costs a live pool of
// another service: the time stock2's pool takes to drain a backlog of
// 100,000 events, without then with the retry running (its copies applied by
// stock's pool meanwhile), the order alternating from one round to the
// next. It reports the throughput kept (kept-%: the median of the rounds'
// ratios, and their extremes). While the live pool drains at full speed
// the retry gives way (a tenth of its rate); live traffic arriving at a
// rate instead (5 s at 1,000/s) is no backlog: the live-1000/s metrics say
// what share of it the pool applied within those 5 s, alone and beside
// the retry, and retry-copies/s the rate the retry kept meanwhile.
func BenchmarkLivePoolUnderFailureRetry(b *testing.B) {
	e := newReplayEnv(b)
	ctx := context.Background()
	const failures = 100_000
	seedRetryableFailures(ctx, b, e.stock, failures)
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(b, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(b, err)
	const k = 100_000
	// load puts a backlog of k events in stock2's queue, the pool paused;
	// drain resumes it and returns how long it took to apply them.
	load := func() uint64 {
		_, err := e.b.PausePool(ctx, "stock2-events", "bench", "bench")
		require.NoError(b, err)
		before := e.pool(ctx, b, "stock2-events").Processed
		publishOrders(ctx, b, ch, e.stock2Queue, k)
		return before
	}
	drain := func(before uint64) time.Duration {
		start := time.Now()
		_, err := e.b.ResumePool(ctx, "stock2-events", "bench")
		require.NoError(b, err)
		require.Eventually(b, func() bool { return e.pool(ctx, b, "stock2-events").Processed >= before+k }, 2*time.Minute, 5*time.Millisecond)
		return time.Since(start)
	}
	// sent reads the retry's copies sent so far.
	sent := func(id uuid.UUID) int64 {
		if id == uuid.Nil {
			return 0
		}
		r, err := e.b.GetFailureRetry(ctx, "stock", id)
		require.NoError(b, err)
		return r.Sent
	}
	// paced publishes to stock2's queue at liveRate for liveWindow, as live
	// traffic arrives, and returns the share of it the pool applied within
	// the window (a pool that keeps its rate applies what arrives as it
	// arrives) and the copies per second the retry (id, if any) sent
	// meanwhile.
	const liveRate, liveWindow = 1000, 5 * time.Second
	paced := func(id uuid.UUID) (applied, copies float64) {
		before, sent0, t0 := e.pool(ctx, b, "stock2-events").Processed, sent(id), time.Now()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		published := 0
		end := time.Now().Add(liveWindow)
		for time.Now().Before(end) {
			<-tick.C
			publishOrders(ctx, b, ch, e.stock2Queue, liveRate/100)
			published += liveRate / 100
		}
		done := e.pool(ctx, b, "stock2-events").Processed - before
		copies = float64(sent(id)-sent0) / time.Since(t0).Seconds()
		require.Eventually(b, func() bool { return e.pool(ctx, b, "stock2-events").Processed >= before+uint64(published) }, 2*time.Minute, 5*time.Millisecond)
		return 100 * float64(done) / float64(published), copies
	}
	startRetry := func() uuid.UUID {
		// Each retry selects 100,000: the rows the rounds before resolved
		// are made up first.
		var left int
		require.NoError(b, e.stock.QueryRow(ctx, `SELECT count(*) FROM platform.failed_event WHERE state = 'failed'`).Scan(&left))
		if left < failures {
			seedRetryableFailures(ctx, b, e.stock, failures-left)
		}
		r, err := e.b.RetryFailedEvents(ctx, "stock", failure.RetryRequest{Filter: failure.Filter{Pool: "stock-events", State: failure.StateFailed},
			Canary: 100, Rate: 2000}, "bench")
		require.NoError(b, err)
		require.Eventually(b, func() bool { // past its canary, sending the rest
			r, err = e.b.GetFailureRetry(ctx, "stock", r.ID)
			return err == nil && r.State == failure.RetryRunning && r.Sent > 1000
		}, time.Minute, 10*time.Millisecond, "the retry past its canary")
		return r.ID
	}
	stopRetry := func(id uuid.UUID) {
		_, err := e.b.CancelFailureRetry(ctx, "stock", id, "bench")
		require.NoError(b, err)
	}
	var alone, under time.Duration
	var kept, pacedAlone, pacedUnder, copies []float64
	round := 0
	// The backlog is loaded before the retry starts, so that the drain
	// meets a retry sending steadily at its rate.
	withRetry := func() time.Duration {
		before := load()
		id := startRetry()
		u := drain(before)
		require.Eventually(b, func() bool { // back to its rate: the paced traffic is no backlog
			r, err := e.b.GetFailureRetry(ctx, "stock", id)
			return err == nil && !strings.HasPrefix(r.Error, "waiting: giving way")
		}, time.Minute, 10*time.Millisecond)
		p, c := paced(id)
		pacedUnder, copies = append(pacedUnder, p), append(copies, c)
		stopRetry(id)
		return u
	}
	withoutRetry := func() time.Duration {
		a := drain(load())
		p, _ := paced(uuid.Nil)
		pacedAlone = append(pacedAlone, p)
		return a
	}
	for b.Loop() {
		var a, u time.Duration
		if round%2 == 0 {
			a = withoutRetry()
			u = withRetry()
		} else {
			u = withRetry()
			a = withoutRetry()
		}
		round++
		alone, under = alone+a, under+u
		kept = append(kept, 100*a.Seconds()/u.Seconds())
	}
	b.StopTimer()
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(median(kept), "kept-%")
	b.ReportMetric(kept[0], "kept-min-%")
	b.ReportMetric(kept[len(kept)-1], "kept-max-%")
	b.ReportMetric(median(pacedAlone), "live-1000/s-applied-alone-%")
	b.ReportMetric(median(pacedUnder), "live-1000/s-applied-under-retry-%")
	b.ReportMetric(pacedUnder[0], "live-1000/s-applied-under-retry-min-%")
	b.ReportMetric(median(copies), "retry-copies/s")
	b.ReportMetric(copies[0], "retry-copies-min/s")
	b.ReportMetric(float64(k)*float64(b.N)/alone.Seconds(), "alone-msg/s")
	b.ReportMetric(float64(k)*float64(b.N)/under.Seconds(), "under-retry-msg/s")
}
