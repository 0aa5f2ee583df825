package failure

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
)

type runnerBundle struct {
	db     *pgxpool.Pool
	store  *Store
	queue  string
	copies <-chan amqp.Delivery
	runner *Runner
}

// setupRunner returns a started runner whose pool "p" is a fresh queue;
// pools in unhosted are not hosted.
func setupRunner(t *testing.T, cfg RunnerConfig, unhosted ...string) *runnerBundle {
	t.Helper()
	b := &runnerBundle{db: database(t)}
	b.store = NewStore(b.db)
	b.queue, b.copies = queue(t)
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "failure-test", nil, discardLog)
	t.Cleanup(conn.Close)
	cfg.Store, cfg.Broker, cfg.Logger = b.store, conn, discardLog
	cfg.QueueOf = func(pool string) (string, bool) {
		if slices.Contains(unhosted, pool) {
			return "", false
		}
		return b.queue, true
	}
	cfg.Poll = cmp.Or(cfg.Poll, 20*time.Millisecond)
	cfg.ChunkEvery = cmp.Or(cfg.ChunkEvery, 500*time.Millisecond) // the tests' chunk sizes
	cfg.LockRetry = 20 * time.Millisecond
	r, err := NewRunner(cfg)
	require.NoError(t, err)
	b.runner = r
	return b
}

func (b *runnerBundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.runner.Start(context.Background()))
	t.Cleanup(b.runner.Stop)
}

// receive returns the next n copies.
func (b *runnerBundle) receive(t *testing.T, n int) []amqp.Delivery {
	t.Helper()
	out := make([]amqp.Delivery, 0, n)
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case d := <-b.copies:
			out = append(out, d)
		case <-timeout:
			t.Fatalf("%d copies of %d received", len(out), n)
		}
	}
	return out
}

func (b *runnerBundle) waitState(t *testing.T, id uuid.UUID, want string) Retry {
	t.Helper()
	var r Retry
	require.Eventually(t, func() bool {
		var err error
		r, err = b.store.GetRetry(context.Background(), id)
		require.NoError(t, err)
		return r.State == want
	}, 30*time.Second, 10*time.Millisecond, "retry never %s", want)
	return r
}

// The runner sends each unresolved row's copy to its pool's queue with
// the retry's headers, the attempt's dropped, the edited body if any;
// rows settled since the retry was made get no copy.
func TestRunnerSendsCopies(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	plain := insert(t, b.db, row{EventName: "stock.reserved", Headers: `{"x-attempt": 5, "x-error": "boom", "x-failure-reason": "permanent",
		"x-failed-at": "2026", "x-death": [{"count": 1}], "x-first-death-queue": "q", "x-last-death-reason": "expired",
		"x-delivery-count": 3, "x-platformd-publish-id": "7", "x-beyond-horizon-override": true, "traceparent": "00-a-b-01",
		"x-n": 12345678901, "x-f": 1.5, "x-t": {"a": 1}}`})
	edited := insert(t, b.db, row{EventName: "stock.reserved"})
	f, err := b.store.EditBody(ctx, edited, []byte(`{"n":2}`), "", "op")
	require.NoError(t, err)
	settled := insert(t, b.db, row{})
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}}, "op")
	require.NoError(t, err)
	require.NoError(t, Resolve(ctx, b.db, []uuid.UUID{settled}, "elsewhere"))
	b.start(t)

	got := b.receive(t, 2)
	done := b.waitState(t, r.ID, RetryDone)
	require.Equal(t, int64(2), done.Sent)
	require.False(t, done.FinishedAt.IsZero())
	select {
	case d := <-b.copies:
		t.Fatalf("a copy of a settled row: %s", d.Headers[HeaderFailureID])
	default:
	}
	byID := map[string]amqp.Delivery{}
	for _, d := range got {
		byID[d.Headers[HeaderFailureID].(string)] = d
	}
	d := byID[plain.String()]
	require.Equal(t, amqp.Table{
		"x-replay": "retry-failed:" + r.ID.String(), "x-failure-id": plain.String(), "x-original-routing-key": "stock.reserved",
		"traceparent": "00-a-b-01", "x-n": int64(12345678901), "x-f": 1.5, "x-t": amqp.Table{"a": int8(1)},
	}, withoutPublishID(d.Headers))
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, b.queue, d.RoutingKey)
	require.Contains(t, string(d.Body), `"payload":{"n":1}`)
	require.Equal(t, f.EditedBody, byID[edited.String()].Body)

	require.Equal(t, StateRetrying, stateOf(t, b.db, plain))
	require.Equal(t, StateResolved, stateOf(t, b.db, settled))
	var unsent int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM platform.failure_retry_item WHERE sent_at IS NULL`).Scan(&unsent))
	require.Zero(t, unsent)
	var retryID uuid.UUID
	require.NoError(t, b.db.QueryRow(ctx, `SELECT retry_id FROM platform.failed_event WHERE id = $1`, plain).Scan(&retryID))
	require.Equal(t, r.ID, retryID)
}

// withoutPublishID drops the publisher's own return-matching header.
func withoutPublishID(h amqp.Table) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		if k != "x-platformd-publish-id" {
			out[k] = v
		}
	}
	// AMQP reads small integers back in the smallest width.
	if t, ok := out["x-t"].(amqp.Table); ok {
		if v, ok := t["a"].(int64); ok && v == 1 {
			t["a"] = int8(1)
		}
	}
	return out
}

// With OverrideBeyondHorizon the copies carry the override.
func TestRunnerOverride(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	insert(t, b.db, row{Reason: "beyond_horizon"})
	_, err := b.store.CreateRetry(t.Context(), RetryRequest{Filter: Filter{Reason: "beyond_horizon"}, OverrideBeyondHorizon: true}, "op")
	require.NoError(t, err)
	b.start(t)
	d := b.receive(t, 1)[0]
	require.Equal(t, true, d.Headers[broker.HeaderBeyondHorizonOverride])
}

// The canary's copies go first; the rest waits for their outcome and goes
// once every canary row is resolved.
func TestRunnerCanaryPasses(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	var ids []uuid.UUID
	for range 5 {
		ids = append(ids, insert(t, b.db, row{}))
	}
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Canary: 2}, "op")
	require.NoError(t, err)
	b.runner.TestSignals().ChunkSent.Init(t)
	b.runner.TestSignals().CanaryWaiting.Init(t)
	b.start(t)
	canary := b.receive(t, 2)
	require.ElementsMatch(t, []string{ids[0].String(), ids[1].String()},
		[]string{canary[0].Headers[HeaderFailureID].(string), canary[1].Headers[HeaderFailureID].(string)})
	require.Equal(t, 2, b.runner.TestSignals().ChunkSent.WaitOrTimeout())
	// The runner waits on the canary: several polls see it pending, and
	// nothing more is sent meanwhile.
	for range 3 {
		require.Equal(t, int64(2), b.runner.TestSignals().CanaryWaiting.WaitOrTimeout())
	}
	b.runner.TestSignals().ChunkSent.RequireEmpty()
	got, err := b.store.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RetryCanary, got.State)
	require.Equal(t, int64(2), got.Sent)
	// The workers apply the copies.
	require.NoError(t, Resolve(ctx, b.db, ids[:2], "worker"))
	rest := b.receive(t, 3)
	require.Len(t, rest, 3)
	done := b.waitState(t, r.ID, RetryDone)
	require.Equal(t, int64(5), done.Sent)
	require.Equal(t, int64(2), done.Resolved)
}

// A canary copy that fails again stops the retry: canary_failed, the rest
// never sent.
func TestRunnerCanaryFails(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	for range 4 {
		insert(t, b.db, row{})
	}
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Canary: 1}, "op")
	require.NoError(t, err)
	b.start(t)
	d := b.receive(t, 1)[0]
	id := uuid.MustParse(d.Headers[HeaderFailureID].(string))
	// The worker's write of the copy's failure (Store.Write, FailureID set).
	require.Eventually(t, func() bool { return stateOf(t, b.db, id) == StateRetrying }, 10*time.Second, 5*time.Millisecond)
	_, err = b.store.Write(ctx, []Entry{{FailureID: id, Pool: "p", Body: d.Body, Reason: "permanent", State: StateFailed, Error: "again"}})
	require.NoError(t, err)
	got := b.waitState(t, r.ID, RetryCanaryFailed)
	require.Equal(t, int64(1), got.Sent)
	require.Equal(t, int64(1), got.FailedAgain)
	require.Contains(t, got.Error, "failed again")
	require.Eventually(t, func() bool { return !b.runner.Active() }, 10*time.Second, 5*time.Millisecond)
	select {
	case d := <-b.copies:
		t.Fatalf("a copy after the canary failed: %s", d.Headers[HeaderFailureID])
	default:
	}
}

// A cancelled retry stops within a chunk.
func TestRunnerCancel(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	seed(t, b.db, "p", 200, 1)
	// 10/s: chunks of 5 every half second.
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Rate: 10}, "op")
	require.NoError(t, err)
	b.runner.TestSignals().ChunkSent.Init(t)
	b.start(t)
	require.Equal(t, 5, b.runner.TestSignals().ChunkSent.WaitOrTimeout())
	c, err := b.store.CancelRetry(ctx, r.ID, "op")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !b.runner.Active() }, 10*time.Second, 5*time.Millisecond)
	got, err := b.store.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RetryCancelled, got.State)
	require.LessOrEqual(t, got.Sent, c.Sent+5)
}

// A retry resumes after a restart from its unsent items.
func TestRunnerResumes(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	seed(t, b.db, "p", 40, 1)
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Rate: 20}, "op")
	require.NoError(t, err)
	b.runner.TestSignals().ChunkSent.Init(t)
	b.start(t)
	require.Equal(t, 10, b.runner.TestSignals().ChunkSent.WaitOrTimeout())
	b.runner.Stop()
	got, err := b.store.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, RetryRunning, got.State)
	require.Less(t, got.Sent, int64(40))

	r2, err := NewRunner(b.runner.cfg)
	require.NoError(t, err)
	require.NoError(t, r2.Start(ctx))
	t.Cleanup(r2.Stop)
	done := b.waitState(t, r.ID, RetryDone)
	require.Equal(t, int64(40), done.Sent)
	seen := map[string]bool{}
	for _, d := range b.receive(t, 40) {
		seen[d.Headers[HeaderFailureID].(string)] = true
	}
	require.Len(t, seen, 40)
}

// Items of a pool this daemon does not host are left unsent and the
// retry says why; past UnhostedTimeout without progress it is finished
// with an error.
func TestRunnerUnhostedPool(t *testing.T) {
	t.Parallel()
	b := setupRunner(t, RunnerConfig{UnhostedTimeout: 300 * time.Millisecond}, "elsewhere")
	ctx := t.Context()
	insert(t, b.db, row{Pool: "p"})
	insert(t, b.db, row{Pool: "elsewhere"})
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{State: StateFailed}}, "op")
	require.NoError(t, err)
	b.start(t)
	require.Len(t, b.receive(t, 1), 1)
	require.Eventually(t, func() bool {
		got, err := b.store.GetRetry(ctx, r.ID)
		require.NoError(t, err)
		return got.State == RetryRunning && got.Error != ""
	}, 10*time.Second, 5*time.Millisecond)
	done := b.waitState(t, r.ID, RetryDone)
	require.Equal(t, int64(1), done.Sent)
	require.Contains(t, done.Error, "1 copies not sent: pools elsewhere are not hosted")
}

// TestRunnerThroughput runs a retry against the real broker into a real
// queue and reports copies/s: 5,000 failures with no rate cap by default,
// 100,000 at 2,000/s with PLATFORMD_RETRY_100K=1.
func TestRunnerThroughput(t *testing.T) {
	t.Parallel()
	n, rate := 5_000, RetryRateMax
	if os.Getenv("PLATFORMD_RETRY_100K") != "" {
		n, rate = 100_000, 2000
	}
	b := setupRunner(t, RunnerConfig{})
	ctx := t.Context()
	seed(t, b.db, "p", n, 5)
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Rate: rate}, "op")
	require.NoError(t, err)
	t0 := time.Now()
	b.start(t)
	// Per-second buckets of arrivals, for the spread.
	buckets := map[int]int{}
	seen := map[string]bool{}
	var first time.Time
	timeout := time.After(time.Duration(n/rate+60) * time.Second)
	for len(seen) < n {
		select {
		case d := <-b.copies:
			seen[d.Headers[HeaderFailureID].(string)] = true
			if first.IsZero() {
				first = time.Now()
			}
			buckets[int(time.Since(t0).Seconds())]++
		case <-timeout:
			t.Fatalf("%d copies of %d", len(seen), n)
		}
	}
	took := time.Since(t0)
	steady := float64(n-1) / time.Since(first).Seconds()
	b.waitState(t, r.ID, RetryDone)
	var secs []int
	for s, c := range buckets {
		if s > 0 && s < int(took.Seconds())-1 { // full seconds only
			secs = append(secs, c)
		}
	}
	sort.Ints(secs)
	spread := "n/a"
	if len(secs) > 0 {
		spread = fmt.Sprintf("per-second min %d, median %d, max %d", secs[0], secs[len(secs)/2], secs[len(secs)-1])
	}
	t.Logf("retry of %d copies at rate %d: %s from start, %.0f copies/s; first to last copy %.0f copies/s (%s)",
		n, rate, took.Round(time.Millisecond), float64(n)/took.Seconds(), steady, spread)
	if rate == 2000 {
		require.Greater(t, steady, 1900.0)
	}
}

// While a pool the retry does not send to has a backlog, the retry sends
// at a tenth of its rate, in chunks to match, and goes back to its rate
// once the backlog has been gone for YieldHold: live traffic first.
func TestRunnerGivesWayToABacklog(t *testing.T) {
	t.Parallel()
	busy, none := "other/live", ""
	var backlog atomic.Pointer[string]
	backlog.Store(&busy)
	var targets atomic.Pointer[[]string]
	var yielded atomic.Int64
	b := setupRunner(t, RunnerConfig{
		ChunkEvery: 100 * time.Millisecond,
		Backlog: func(_ context.Context, tg []string) string {
			targets.Store(&tg)
			return *backlog.Load()
		},
		Yielded:   func(d time.Duration) { yielded.Add(int64(d)) },
		YieldHold: 300 * time.Millisecond,
	})
	ctx := t.Context()
	seed(t, b.db, "p", 1000, 1)
	// 1,000/s: chunks of 100 every 100 ms; giving way, 100/s: chunks of 10.
	r, err := b.store.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}, Rate: 1000}, "op")
	require.NoError(t, err)
	sig := b.runner.TestSignals()
	sig.ChunkSent.Init(t)
	sig.Yielding.Init(t)
	b.start(t)

	require.Equal(t, busy, sig.Yielding.WaitOrTimeout())
	got, err := b.store.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, "waiting: giving way to the backlog of other/live, at 100 copies/s", got.Error, "why it is slow, for an operator")
	for range 3 {
		require.Equal(t, 10, sig.ChunkSent.WaitOrTimeout(), "a tenth of the rate")
	}
	require.Equal(t, []string{"p"}, *targets.Load(), "the pools the retry sends to are not asked about")
	require.GreaterOrEqual(t, time.Duration(yielded.Load()), 2*100*time.Millisecond, "each chunk of 10 stands for 100 ms")

	backlog.Store(&none)
	gone := time.Now()
	require.Empty(t, sig.Yielding.WaitOrTimeout(), "back to its rate")
	// The hold counts from the last chunk that saw the backlog, at most
	// a chunk (100 ms) before it went.
	require.GreaterOrEqual(t, time.Since(gone), 200*time.Millisecond, "after the pool worked through what it held")
	got, err = b.store.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Empty(t, got.Error, "the note gone with the backlog")
	n := sig.ChunkSent.WaitOrTimeout()
	for n == 10 { // chunks sent before the backlog went
		n = sig.ChunkSent.WaitOrTimeout()
	}
	require.Equal(t, 100, n, "the whole rate again")
	got = b.waitState(t, r.ID, RetryDone)
	require.EqualValues(t, 1000, got.Sent, "every copy sent, whatever the pace")
}

// A yield share outside (0, 1] is refused, naming it.
func TestRunnerRefusesAYieldShareOutOfRange(t *testing.T) {
	t.Parallel()
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "failure-test", nil, discardLog)
	t.Cleanup(conn.Close)
	for _, share := range []float64{-0.5, 1.5} {
		_, err := NewRunner(RunnerConfig{Store: NewStore(database(t)), Broker: conn, Logger: discardLog, YieldShare: share,
			QueueOf: func(string) (string, bool) { return "", false }})
		require.ErrorContains(t, err, "yield share")
	}
}
