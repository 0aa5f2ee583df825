package workers

import (
	"context"
	"maps"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/metrics"
)

func (b *bundle) dupCount(source string) float64 {
	return testutil.ToFloat64(b.metrics.DuplicatesTotal.WithLabelValues(b.cfg.Service, b.cfg.Name, source))
}

func (b *bundle) reservations() int { return b.count(`SELECT count(*) FROM reservation`) }

// The same event published twice as new messages (a relay republish): one
// effect, the second counted as a republish duplicate.
func TestPoolRepublishedEventAppliedOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.start(shop.HandlerStockReserve)
	env, o := b.order(2)
	b.publishEnv(env, nil)
	b.publishEnv(env, nil)
	b.publishEnv(env, amqp.Table{broker.HeaderReplay: "ops"})
	b.waitSettled("3 settled", func() bool { i := b.pool.Info(); return i.Processed+i.Duplicates == 3 })
	require.Equal(t, 2, b.count(`SELECT count(*) FROM reservation WHERE order_id = $1`, o.OrderID))
	require.Equal(t, 1, b.count(`SELECT count(*) FROM processed_event`))
	require.InDelta(t, 1, b.dupCount(metrics.SourceRepublish), 0)
	require.InDelta(t, 1, b.dupCount(metrics.SourceReplay), 0)
	require.Equal(t, 0, b.queueDepth(b.queue))
}

// Commit done, then the connection killed before the ack: the broker
// redelivers, and the redelivery is counted as a duplicate; one effect.
func TestPoolCommitThenConnectionLostBeforeAck(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	var killed atomic.Bool
	b.cfg.Concurrency = 1
	b.cfg.testBeforeSettleFunc = func() {
		if killed.CompareAndSwap(false, true) {
			conn, err := b.consume.Get(context.Background())
			if err == nil {
				_ = conn.Close()
			}
		}
	}
	b.start(shop.HandlerStockReserve)
	const n = 5
	for range n {
		env, _ := b.order(1)
		b.publishEnv(env, nil)
	}
	b.waitFor("all settled after reconnect", func() bool {
		return b.count(`SELECT count(*) FROM processed_event`) == n && b.queueDepth(b.queue) == 0 && b.pool.Info().InFlight == 0
	})
	require.True(t, killed.Load())
	require.Equal(t, n, b.reservations())
	require.Equal(t, n, b.count(`SELECT count(*) FROM processed_event`))
	require.Positive(t, b.dupCount(metrics.SourceRedelivery))
	require.Equal(t, 0, b.queueDepth(b.queue))
}

// A handler failing twice then succeeding: one effect, x-attempt seen as 0,
// 1, 2. A handler always failing: in the failure queue after the
// configured attempts with every header; a permanent error goes at once.
func TestPoolRetriesAndFailureQueue(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	flaky, flakyOrder := b.order(1)
	always, _ := b.order(1)
	perm, _ := b.order(1)
	b.failN[flaky.EventID] = 2
	b.failN[always.EventID] = 1000
	b.failPerm[perm.EventID] = true
	b.start(shop.HandlerStockReserve, "test.probe")
	b.publishEnv(flaky, nil)
	b.publishEnv(always, nil)
	b.publishEnv(perm, nil)

	b.waitSettled("flaky processed, two failed", func() bool {
		i := b.pool.Info()
		return i.Processed == 1 && i.Failed == 2
	})
	b.mu.Lock()
	require.Equal(t, []int{0, 1, 2}, b.attempts[flaky.EventID])
	require.Equal(t, []int{0, 1, 2}, b.attempts[always.EventID]) // 2 delays: 3 attempts
	require.Equal(t, []int{0}, b.attempts[perm.EventID])
	b.mu.Unlock()
	require.Equal(t, 1, b.count(`SELECT count(*) FROM reservation WHERE order_id = $1`, flakyOrder.OrderID))
	require.Equal(t, 1, b.reservations())
	require.EqualValues(t, 4, b.pool.Info().Retried) // 2 retries of flaky + 2 of always
	failed := b.getFailed()
	require.Len(t, failed, 2)
	byReason := map[string]storedFailure{}
	for _, f := range failed {
		byReason[f.Reason] = f
		require.Equal(t, b.cfg.Name, f.Pool)
		require.Equal(t, shop.EventOrderPlaced, f.RoutingKey)
		require.Equal(t, shop.EventOrderPlaced, f.EventName)
		require.WithinDuration(t, time.Now(), f.FailedAt, time.Minute)
		require.NotEmpty(t, f.Error)
		require.Equal(t, "test.probe", f.Handler, "the failing handler is named")
		require.Equal(t, failure.StateFailed, f.State)
		require.Equal(t, 1, f.Copies)
		require.Nil(t, f.SequenceKey, "the pool has no partition key")
	}
	require.Contains(t, byReason, broker.ReasonRetriesExhausted)
	require.Contains(t, byReason, broker.ReasonPermanent)
	require.Equal(t, 2, byReason[broker.ReasonRetriesExhausted].Attempt)
	require.Equal(t, 0, byReason[broker.ReasonPermanent].Attempt)
	require.Equal(t, always.EventID, *byReason[broker.ReasonRetriesExhausted].EventID)
	body, _ := encodeForTest(t, always)
	require.Equal(t, body, byReason[broker.ReasonRetriesExhausted].Body) // body byte for byte
	require.EqualValues(t, 2, byReason[broker.ReasonRetriesExhausted].Headers[broker.HeaderAttempt], "the delivery's headers are kept")
	require.Equal(t, 0, b.count(`SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, []string{always.EventID.String(), perm.EventID.String()}))
}

// Malformed bodies and an unknown event name go to the failure queue with
// decode / no_handler; the valid messages around them are processed once.
func TestPoolRejectsBadMessages(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Bindings = []string{"order.#"}
	b.start(shop.HandlerStockReserve)
	bad := [][]byte{
		[]byte(`not json`),
		[]byte(`[1,2]`),
		[]byte(`{"event_id":"00000000-0000-0000-0000-000000000000","event_name":"order.order.placed.v1","occurred_at":"2026-01-01T00:00:00Z","payload":{}}`),
		[]byte("{\"event_id\":\"\xff\"}"),
	}
	for i, body := range bad {
		good, _ := b.order(1)
		b.publishEnv(good, nil)
		b.publishRaw(shop.EventOrderPlaced, body, amqp.Table{"i": int32(i)})
	}
	unknown, _ := b.order(1)
	unknown.EventName = "order.order.cancelled.v1"
	b.publishEnv(unknown, nil)
	b.waitSettled("all settled", func() bool { i := b.pool.Info(); return i.Processed == 4 && i.Failed == 5 })
	require.Equal(t, 4, b.reservations())
	reasons := map[string]int{}
	for _, f := range b.getFailed() {
		reasons[f.Reason]++
		if f.Reason == broker.ReasonDecode {
			require.Nil(t, f.EventID, "an undecodable body has no event id")
			require.Contains(t, bad, f.Body, "the body byte for byte")
		}
	}
	require.Equal(t, map[string]int{broker.ReasonDecode: 4, broker.ReasonNoHandler: 1}, reasons)
	require.InDelta(t, 5, testutil.ToFloat64(b.metrics.MessagesTotal.WithLabelValues("stock", b.cfg.Name, metrics.OutcomeRejected)), 0)
}

// An event older than the horizon is quarantined (beyond_horizon) unless
// the override header is set or the policy is process.
func TestPoolBeyondHorizonGuard(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{config.BeyondHorizonQuarantine, config.BeyondHorizonProcess} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			b.cfg.BeyondHorizon = policy
			b.cfg.HorizonFunc = func() time.Duration { return time.Hour }
			b.start(shop.HandlerStockReserve)
			old, _ := b.order(1)
			old.EventID = uuidV4(t) // not v7: judged by occurred_at
			old.OccurredAt = time.Now().Add(-2 * time.Hour).UTC()
			fresh, _ := b.order(1)
			forced, _ := b.order(1)
			forced.EventID = uuidV4(t)
			forced.OccurredAt = old.OccurredAt
			b.publishEnv(old, nil)
			b.publishEnv(fresh, nil)
			b.publishEnv(forced, amqp.Table{broker.HeaderBeyondHorizonOverride: "true"})
			if policy == config.BeyondHorizonQuarantine {
				b.waitSettled("settled", func() bool { i := b.pool.Info(); return i.Processed == 2 && i.Failed == 1 })
				f := b.getFailed()
				require.Len(t, f, 1)
				require.Equal(t, broker.ReasonBeyondHorizon, f[0].Reason)
				require.Equal(t, 2, b.reservations())
				require.Equal(t, 0, b.count(`SELECT count(*) FROM processed_event WHERE event_id = $1`, old.EventID))
				return
			}
			b.waitSettled("settled", func() bool { return b.pool.Info().Processed == 3 })
			require.Equal(t, 3, b.reservations())
		})
	}
}

// Stop under load, then a new pool on the same queue: nothing lost,
// nothing applied twice.
func TestPoolStopUnderLoadThenRestart(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.start(shop.HandlerStockReserve)
	n := 1500
	if testing.Short() {
		n = 300
	}
	sent := b.publishMany(n, 0.1)
	b.waitSettled("some processed", func() bool { return b.pool.Info().Processed > 50 })
	b.stop()
	require.Equal(t, StateStopped, b.poolInfoAfterStop.State)
	b.start(shop.HandlerStockReserve)
	b.waitFor("all processed", func() bool { return b.reservations() == sent && b.queueDepth(b.queue) == 0 })
	b.stop() // every batch in hand finishes and settles: nothing can apply later
	require.Equal(t, sent, b.reservations())
	require.Equal(t, sent, b.count(`SELECT count(*) FROM processed_event`))
}

// publishMany publishes n distinct orders of one line and republishes a
// share of them; it returns the number of distinct events.
func (b *bundle) publishMany(n int, dupShare float64) int {
	b.t.Helper()
	every := 0
	if dupShare > 0 {
		every = int(1 / dupShare)
	}
	for i := range n {
		env, _ := b.order(1)
		body, err := encodeForTest(b.t, env)
		require.NoError(b.t, err)
		require.NoError(b.t, b.pubCh.PublishWithContext(b.ctx, b.exchange, env.EventName, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}))
		if every > 0 && i%every == 0 {
			require.NoError(b.t, b.pubCh.PublishWithContext(b.ctx, b.exchange, env.EventName, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}))
		}
	}
	return n
}

// Operator closes of every connection (code 320) and terminated database
// sessions under load: the pool recovers on its own, nothing is lost and
// nothing is applied twice.
func TestPoolRecoversFromBrokerAndDatabaseFaults(t *testing.T) {
	t.Parallel()
	b := newBundle(t, withVhost)
	b.start(shop.HandlerStockReserve)
	n := 3000
	if testing.Short() {
		n = 600
	}
	vhost := b.url[len(testenv.AMQPURL()):]
	done := make(chan int)
	go func() { done <- b.publishResilient(n, 0.1) }()
	faults := 0
	for i := 0; i < 3; i++ {
		// The faults land a quarter, half and three quarters of the way.
		b.waitFor("progress before the fault", func() bool { return b.reservations() >= (i+1)*n/4 })
		out, err := exec.Command("rabbitmqctl", "close_all_connections", "-p", vhost, "chaos test").CombinedOutput()
		require.NoError(t, err, string(out))
		faults++
		_, err = b.check.Exec(b.ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'platformd'`)
		require.NoError(t, err)
		faults++
	}
	sent := <-done
	b.waitFor("all processed", func() bool { return b.reservations() == sent && b.queueDepth(b.queue) == 0 })
	b.stop() // every batch in hand finishes and settles: nothing can apply later
	require.Equal(t, sent, b.reservations(), "applied exactly once")
	require.Equal(t, sent, b.count(`SELECT count(*) FROM processed_event`))
	t.Logf("faults: %d, events: %d, info: %+v", faults, sent, b.poolInfoAfterStop)
}

// Pause under load: nothing consumed while paused (queue depth grows),
// in-flight work finished; resume drains it; one effect per event. The
// pause is stored: a new pool on the same database starts paused.
func TestPoolPauseResume(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.start(shop.HandlerStockReserve)
	b.publishMany(200, 0)
	b.waitSettled("some processed", func() bool { return p.Info().Processed > 0 })
	info, err := p.Pause(b.ctx, "incident 42", "test")
	require.NoError(t, err)
	require.Equal(t, StatePaused, info.State)
	require.Equal(t, "incident 42", info.PausedReason)
	require.Zero(t, info.InFlight)
	before, ready := b.reservations(), b.queueDepth(b.queue)
	b.publishMany(100, 0)
	// All 100 more ready in the queue means none was delivered: a paused
	// pool that consumed one would keep the depth short of it for good.
	b.waitFor("100 more ready while paused", func() bool { return b.queueDepth(b.queue) == ready+100 })
	require.Equal(t, before, b.reservations(), "nothing consumed while paused")

	// A restart honours the stored pause: its workers, connected, take
	// nothing.
	b.stop()
	p = b.start(shop.HandlerStockReserve)
	require.Equal(t, StatePaused, p.Info().State)
	require.Equal(t, ready+100, b.queueDepth(b.queue))
	require.Equal(t, before, b.reservations())

	info, err = p.Resume(b.ctx, "test")
	require.NoError(t, err)
	require.NotEqual(t, StatePaused, info.State)
	b.waitFor("drained", func() bool { return b.reservations() == 300 && b.queueDepth(b.queue) == 0 })
	require.Equal(t, 300, b.count(`SELECT count(*) FROM processed_event`))
}

// A pause stored by another daemon (directly in the database, as the admin
// API of another instance does) is picked up by polling or NOTIFY.
func TestPoolPicksUpStoredPause(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.start(shop.HandlerStockReserve)
	_, err := b.check.Exec(b.ctx, `INSERT INTO platform.pool_state (pool, paused, reason, updated_by) VALUES ($1, true, 'elsewhere', 'other')`, b.cfg.Name)
	require.NoError(t, err)
	p.testSignals.Paused.WaitUntil("paused", func() bool { return p.Info().State == StatePaused })
	require.Equal(t, "elsewhere", p.Info().PausedReason)
	// The state says paused as soon as the pause is read; the workers then
	// cancel their consumers. Published before that, an event could still
	// reach one (and be handled): wait until every worker is quiesced.
	p.testSignals.Quiesced.WaitOrTimeout()
	b.publishMany(20, 0)
	b.waitFor("20 ready while paused", func() bool { return b.queueDepth(b.queue) == 20 })
	require.Equal(t, 0, b.reservations())
	require.NoError(t, p.Refresh(b.ctx))
	_, err = b.check.Exec(b.ctx, `UPDATE platform.pool_state SET paused = false WHERE pool = $1`, b.cfg.Name)
	require.NoError(t, err)
	b.waitFor("drained", func() bool { return b.reservations() == 20 })
}

// A pool paused from elsewhere (the stored pause read by Refresh, as a
// NOTIFY from another daemon's admin API makes it) reports paused only
// once it applies nothing more: its workers first finish their batches
// and handle what the broker had already sent them, and between those
// batches in_flight is 0. An operator (or the chaos suite) reading
// "paused, nothing in flight" must not see effects applied after it.
func TestPoolReportsPausedOnceDrained(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.start("test.probe")
	release := sync.OnceFunc(b.holdHandlers())
	t.Cleanup(release) // a failed assertion must not leave the handlers held
	b.publishMany(100, 0)
	b.waitFor("both workers holding a batch", func() bool { return b.holding.Load() == int32(b.cfg.Concurrency) })
	_, err := b.check.Exec(b.ctx, `INSERT INTO platform.pool_state (pool, paused, reason, updated_by) VALUES ($1, true, 'elsewhere', 'other')`, b.cfg.Name)
	require.NoError(t, err)
	require.NoError(t, p.Refresh(b.ctx))
	first := p.Info()
	require.NotEqual(t, StatePaused, first.State, "reported paused while batches are in flight and prefetched deliveries wait")
	require.Equal(t, "elsewhere", first.PausedReason, "the reason shows while the pool drains")
	release()
	p.testSignals.Quiesced.WaitOrTimeout()
	drained := p.Info()
	require.Equal(t, StatePaused, drained.State)
	require.Zero(t, drained.InFlight)
	// Nothing is applied after the pool said paused.
	b.publishMany(10, 0)
	b.waitFor("10 ready while paused", func() bool { return b.queueDepth(b.queue) >= 10 })
	require.Equal(t, drained.Processed, p.Info().Processed, "processed after the pool reported paused")
}

// A copy that carries x-failure-id settles its row: resolved in the very
// transaction that applies it (or finds it a duplicate), back to failed with
// the new attempt and error when it fails again, and a quarantined
// beyond-horizon event goes through only with the override.
func TestFailureCopiesSettleTheirRows(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.HorizonFunc = func() time.Duration { return time.Hour }
	b.start(shop.HandlerStockReserve, "test.probe")
	old, _ := b.order(1)
	old.EventID = uuidV4(t)
	old.OccurredAt = time.Now().Add(-3 * time.Hour).UTC()
	flaky, _ := b.order(1)
	b.failN[flaky.EventID] = 3 // exhausts 2 delays, then succeeds on retry
	b.publishEnv(old, nil)
	b.publishEnv(flaky, nil)
	b.waitSettled("two failed", func() bool { return b.pool.Info().Failed == 2 })
	rows := b.getFailed()
	require.Len(t, rows, 2)
	byEvent := map[uuid.UUID]storedFailure{}
	for _, f := range rows {
		byEvent[*f.EventID] = f
	}
	require.Equal(t, broker.ReasonBeyondHorizon, byEvent[old.EventID].Reason)
	require.Equal(t, broker.ReasonRetriesExhausted, byEvent[flaky.EventID].Reason)

	// The retry of flaky applies it and resolves its row in one commit.
	retry := func(env envelope.Envelope, id uuid.UUID, extra amqp.Table) {
		h := amqp.Table{failure.HeaderFailureID: id.String(), broker.HeaderReplay: "retry-failed:test"}
		maps.Copy(h, extra)
		b.publishEnv(env, h)
	}
	retry(flaky, byEvent[flaky.EventID].ID, nil)
	b.waitSettled("flaky processed", func() bool { return b.pool.Info().Processed == 1 })
	b.mu.Lock()
	require.Equal(t, []int{0, 1, 2, 0}, b.attempts[flaky.EventID]) // attempt count reset
	b.mu.Unlock()
	require.Equal(t, 1, b.count(`SELECT count(*) FROM platform.failed_event WHERE id = $1 AND state = 'resolved'
		AND resolved_at IS NOT NULL AND resolved_by = $2`, byEvent[flaky.EventID].ID, b.cfg.Name))

	// A second copy of the same retry is a duplicate: the row stays
	// resolved, resolved once.
	var at time.Time
	require.NoError(t, b.check.QueryRow(b.ctx, `SELECT resolved_at FROM platform.failed_event WHERE id = $1`, byEvent[flaky.EventID].ID).Scan(&at))
	retry(flaky, byEvent[flaky.EventID].ID, nil)
	b.waitSettled("duplicate", func() bool { return b.pool.Info().Duplicates == 1 })
	var again time.Time
	require.NoError(t, b.check.QueryRow(b.ctx, `SELECT resolved_at FROM platform.failed_event WHERE id = $1`, byEvent[flaky.EventID].ID).Scan(&again))
	require.Equal(t, at, again, "resolved exactly once")

	// Without the override the old event fails again: the same row, back
	// to failed, not a second one; with it, it is applied and resolved.
	require.NoError(t, b.check.QueryRow(b.ctx, `UPDATE platform.failed_event SET state = 'retrying' WHERE id = $1 RETURNING failed_at`,
		byEvent[old.EventID].ID).Scan(&at))
	retry(old, byEvent[old.EventID].ID, nil)
	b.waitFor("quarantined again", func() bool {
		return b.count(`SELECT count(*) FROM platform.failed_event WHERE id = $1 AND state = 'failed' AND failed_at > $2`, byEvent[old.EventID].ID, at) == 1
	})
	require.Len(t, b.getFailed(), 2, "a failing copy updates its row")
	retry(old, byEvent[old.EventID].ID, amqp.Table{broker.HeaderBeyondHorizonOverride: true})
	b.waitSettled("old applied", func() bool { return b.pool.Info().Processed == 2 })
	require.Equal(t, 2, b.count(`SELECT count(*) FROM platform.failed_event WHERE pool = $1 AND state = 'resolved'`, b.cfg.Name))
	require.Equal(t, 2, b.reservations())
}

// What an older version left in <queue>.failed is moved into the store when
// the pool starts: each message a row with its headers as the row's
// fields, the body byte for byte, and the queue left empty.
func TestOldFailureQueueIsMovedIntoTheStore(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	_, err := b.pubCh.QueueDeclare(broker.FailedQueue(b.queue), true, false, false, false, amqp.Table{amqp.QueueTypeArg: "classic"})
	require.NoError(t, err)
	env, _ := b.order(1)
	body, err := encodeForTest(t, env)
	require.NoError(t, err)
	pub := func(body []byte, h amqp.Table) {
		c, err := b.pubCh.PublishWithDeferredConfirmWithContext(b.ctx, "", broker.FailedQueue(b.queue), false, false,
			amqp.Publishing{Headers: h, Body: body, DeliveryMode: amqp.Persistent})
		require.NoError(t, err)
		ok, err := c.WaitContext(b.ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	pub(body, amqp.Table{broker.HeaderFailureReason: broker.ReasonRetriesExhausted, broker.HeaderError: "boom", broker.HeaderAttempt: int32(3),
		broker.HeaderOriginalRoutingKey: shop.EventOrderPlaced, broker.HeaderPool: b.cfg.Name})
	pub([]byte("not json"), amqp.Table{broker.HeaderFailureReason: broker.ReasonDecode, broker.HeaderError: "invalid character"})
	b.start(shop.HandlerStockReserve)
	b.waitFor("moved", func() bool { return len(b.getFailed()) == 2 && b.queueDepth(broker.FailedQueue(b.queue)) == 0 })
	rows := b.getFailed()
	byReason := map[string]storedFailure{}
	for _, f := range rows {
		byReason[f.Reason] = f
	}
	moved := byReason[broker.ReasonRetriesExhausted]
	require.Equal(t, env.EventID, *moved.EventID)
	require.Equal(t, body, moved.Body)
	require.Equal(t, "boom", moved.Error)
	require.Equal(t, 3, moved.Attempt)
	require.Equal(t, shop.EventOrderPlaced, moved.RoutingKey)
	require.Equal(t, failure.StateFailed, moved.State)
	require.Equal(t, []byte("not json"), byReason[broker.ReasonDecode].Body)
	require.Nil(t, byReason[broker.ReasonDecode].EventID)
}
