package replay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/platformd/platformd/internal/broker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// create stores a running replay of sel and returns its id.
func create(t testing.TB, db *pgxpool.Pool, sel Selection, targetPool string, include bool, rate int, pools []PoolCount) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	items, _, err := Select(ctx, db, sel, 24*time.Hour)
	require.NoError(t, err)
	id := uuid.New()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, Create(ctx, tx, Record{ID: id, Selection: sel, TargetPool: targetPool, IncludeBeyondHorizon: include,
		Rate: rate, Matched: int64(len(items)), Pools: pools, CreatedBy: "test"}))
	require.NoError(t, tx.Commit(ctx))
	return id
}

// published is the counter vector every test runner reports to.
var published = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_replay_published_total"}, []string{"service", "replay"})

// runnerOpt changes a test runner's config or sets its test hooks.
type runnerOpt func(*RunnerConfig, *runnerTest)

func runner(t testing.TB, db *pgxpool.Pool, conn *broker.Conn, exchange string, targets []Target, after func(Record), opts ...runnerOpt) *Runner {
	t.Helper()
	cfg := RunnerConfig{
		Service: "order", DB: db, Broker: conn, Exchange: exchange, Archive: 24 * time.Hour, Poll: 50 * time.Millisecond, LockRetry: 50 * time.Millisecond,
		// Chunks of 50 ms at the replay's rate: the tests stop runners
		// between chunks, a few chunks in.
		ChunkEvery:  50 * time.Millisecond,
		TargetsFunc: func(Record) ([]Target, error) { return targets, nil }, Logger: discard,
		Published: published,
	}
	hooks := runnerTest{afterChunk: after}
	for _, o := range opts {
		o(&cfg, &hooks)
	}
	r, err := NewRunner(cfg)
	require.NoError(t, err)
	r.test = hooks
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	return r
}

func waitState(t testing.TB, db *pgxpool.Pool, id uuid.UUID, want string) Record {
	t.Helper()
	var rec Record
	require.Eventually(t, func() bool {
		var err error
		rec, err = Get(context.Background(), db, id)
		require.NoError(t, err)
		return rec.State == want
	}, 30*time.Second, 20*time.Millisecond, "replay %s %s", id, want)
	return rec
}

// collect reads copies from d until n arrived, then for a short while more.
func collectCopies(t testing.TB, d <-chan amqp.Delivery, n int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	deadline := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case m := <-d:
			got = append(got, m)
		case <-deadline:
			t.Fatalf("received %d of %d copies", len(got), n)
		}
	}
	for {
		select {
		case m := <-d:
			got = append(got, m)
		case <-time.After(300 * time.Millisecond):
			return got
		}
	}
}

// TestRunnerResumesWithoutDuplicates stops the runner abruptly after a
// few chunks (its context cancelled mid-replay), starts another: the
// replay finishes with published = matched and every event arrives on a
// tap queue exactly once, carrying x-replay and its original headers.
func TestRunnerResumesWithoutDuplicates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := database(t, "replay_resume")
	exchange := "replay-test-" + uuid.NewString()[:8]
	_, copies := tap(t, exchange, "#")
	now := time.Now()
	const n = 300
	for i := range n {
		archive(t, db, v7At(t, now.Add(-time.Duration(i)*time.Second)), "order.order.placed.v1", now.Add(-time.Minute))
	}
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "replay-test", nil, discard)
	t.Cleanup(conn.Close)
	id := create(t, db, Selection{From: now.Add(-time.Hour)}, "", false, 2000, []PoolCount{{Pool: "stock-events", Service: "stock"}})
	targets := []Target{{Pool: "stock-events", Service: "stock", Bindings: []string{"order.#"}}}

	var once sync.Once
	reached := make(chan struct{})
	first := runner(t, db, conn, exchange, targets, func(r Record) {
		if r.Published >= 100 {
			once.Do(func() { close(reached) })
		}
	})
	<-reached
	first.Stop() // abruptly: its context is cancelled mid-replay
	rec, err := Get(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, StateRunning, rec.State)
	require.Less(t, rec.Published, int64(n), "stopped mid-replay")
	require.NotNil(t, rec.Cursor)

	runner(t, db, conn, exchange, targets, nil)
	rec = waitState(t, db, id, StateDone)
	require.Equal(t, int64(n), rec.Published)
	require.Equal(t, int64(n), rec.Matched)
	require.Equal(t, int64(n), rec.Pools[0].Published)
	require.InDelta(t, float64(n), testutil.ToFloat64(published.WithLabelValues("order", id.String())), 0, "the metric counts each copy once")
	got := collectCopies(t, copies, n)
	seen := map[string]int{}
	for _, m := range got {
		require.Equal(t, id.String(), m.Headers[HeaderReplay])
		require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", m.Headers["traceparent"])
		require.Equal(t, "order.order.placed.v1", m.RoutingKey)
		seen[m.MessageId]++
	}
	require.Len(t, seen, n)
	for mid, c := range seen {
		require.Equal(t, 1, c, "event %s published twice", mid)
	}
}

// TestRunnerTargetedPool: a targeted replay goes to the pool's queue by
// the default exchange, with the event's name in x-original-routing-key;
// events beyond the pool's horizon are left out, or sent with the
// override header when asked. A cancelled replay stops.
func TestRunnerTargetedPool(t *testing.T) {
	t.Parallel()
	db := database(t, "replay_target")
	queue, copies := tap(t, "", "")
	now := time.Now()
	recent := v7At(t, now.Add(-time.Minute))
	old := v7At(t, now.Add(-72*time.Hour))
	archive(t, db, recent, "order.order.placed.v1", now.Add(-time.Minute))
	archive(t, db, old, "order.order.placed.v1", now.Add(-time.Minute))
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "replay-test", nil, discard)
	t.Cleanup(conn.Close)
	targets := []Target{{Pool: "stock-events", Service: "stock", Queue: queue, Bindings: []string{"nothing"}, Horizon: 48 * time.Hour, Quarantine: true}}
	pools := []PoolCount{{Pool: "stock-events", Service: "stock"}}
	runner(t, db, conn, "unused-exchange", targets, nil)

	id := create(t, db, Selection{From: now.Add(-time.Hour)}, "stock-events", false, 500, pools)
	rec := waitState(t, db, id, StateDone)
	require.Equal(t, int64(1), rec.Published, "the event beyond the horizon is left out")
	got := collectCopies(t, copies, 1)
	require.Len(t, got, 1)
	require.Equal(t, recent.String(), got[0].MessageId)
	require.Equal(t, queue, got[0].RoutingKey)
	require.Equal(t, "order.order.placed.v1", got[0].Headers[HeaderOriginalRoutingKey])
	require.NotContains(t, got[0].Headers, HeaderBeyondHorizonOverride)

	id = create(t, db, Selection{EventIDs: []uuid.UUID{old}}, "stock-events", true, 500, pools)
	rec = waitState(t, db, id, StateDone)
	require.Equal(t, int64(1), rec.Published)
	got = collectCopies(t, copies, 1)
	require.Len(t, got, 1)
	require.Equal(t, old.String(), got[0].MessageId)
	require.Equal(t, true, got[0].Headers[HeaderBeyondHorizonOverride])
}

// TestCancelStopsReplay: a cancelled replay publishes no more chunks.
func TestCancelStopsReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := database(t, "replay_cancel")
	exchange := "replay-test-" + uuid.NewString()[:8]
	_, copies := tap(t, exchange, "#")
	now := time.Now()
	for i := range 200 {
		archive(t, db, v7At(t, now.Add(-time.Duration(i)*time.Second)), "order.x", now.Add(-time.Minute))
	}
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "replay-test", nil, discard)
	t.Cleanup(conn.Close)
	id := create(t, db, Selection{From: now.Add(-time.Hour)}, "", false, 200, nil)
	cancelled := make(chan struct{})
	var once sync.Once
	runner(t, db, conn, exchange, nil, func(r Record) {
		if r.Published >= 20 {
			once.Do(func() {
				tx, err := db.Begin(ctx)
				require.NoError(t, err)
				was, err := Cancel(ctx, tx, id, "ops")
				require.NoError(t, err)
				require.True(t, was)
				require.NoError(t, tx.Commit(ctx))
				close(cancelled)
			})
		}
	})
	<-cancelled
	rec := waitState(t, db, id, StateCancelled)
	got := collectCopies(t, copies, int(rec.Published))
	rec, err := Get(ctx, db, id)
	require.NoError(t, err)
	require.Less(t, rec.Published, int64(200))
	require.Len(t, got, int(rec.Published))
	var cancelledBy string
	require.NoError(t, db.QueryRow(ctx, `SELECT cancelled_by FROM platform.replay WHERE id = $1`, id).Scan(&cancelledBy))
	require.Equal(t, "ops", cancelledBy)
}

// TestRunnerDiesBetweenCommitAndRecord: the runner loses its lease after
// the broker committed a chunk and before its progress is recorded (what a
// SIGKILL, or a pause past the lease's expiry, does there): the fenced
// record fails and the runner stops; the next holder finds the chunk's
// mark in the replay's journal queue, records it, and goes on; no event is
// published twice.
func TestRunnerDiesBetweenCommitAndRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := database(t, "replay_window")
	exchange := "replay-test-" + uuid.NewString()[:8]
	_, copies := tap(t, exchange, "#")
	now := time.Now()
	const n = 200
	for i := range n {
		archive(t, db, v7At(t, now.Add(-time.Duration(i)*time.Second)), "order.order.placed.v1", now.Add(-time.Minute))
	}
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "replay-test", nil, discard)
	t.Cleanup(conn.Close)
	id := create(t, db, Selection{From: now.Add(-time.Hour)}, "", false, 2000, nil)
	var once sync.Once
	killed := make(chan struct{})
	runner(t, db, conn, exchange, nil, nil, func(_ *RunnerConfig, h *runnerTest) {
		h.afterCommit = func(r Record) {
			if r.Published < 100 {
				return
			}
			once.Do(func() {
				// Another holder takes the lease, for a moment: the
				// runner's record of this chunk must not land.
				_, err := db.Exec(ctx, `UPDATE platform.lease SET holder = 'other', expires_at = clock_timestamp() + interval '300 milliseconds'
					WHERE name = $1`, LeaseName)
				if err != nil {
					t.Error(err)
				}
				close(killed)
			})
		}
	})
	<-killed
	rec := waitState(t, db, id, StateDone)
	require.Equal(t, int64(n), rec.Published)
	got := collectCopies(t, copies, n)
	seen := map[string]int{}
	for _, m := range got {
		seen[m.MessageId]++
	}
	require.Len(t, seen, n)
	for mid, c := range seen {
		require.Equal(t, 1, c, "event %s published twice", mid)
	}
}

// TestRunnerStopsWhenLeaseLost: two runners, one active; between two of
// its chunks its lease is taken by another holder, and the runner learns
// it (its renewal fails). It publishes nothing more: the tap holds exactly
// the copies recorded before; the standby publishes nothing while the
// other holds the lease; once that lease ends one of them finishes the
// replay, every event reaching the tap exactly once with the replay's
// x-replay. Without the lease checked before each chunk, the runner
// publishes its next chunk after it knew the lease lost.
func TestRunnerStopsWhenLeaseLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := database(t, "replay_lease")
	exchange := "replay-test-" + uuid.NewString()[:8]
	_, copies := tap(t, exchange, "#")
	now := time.Now()
	const n = 400
	for i := range n {
		archive(t, db, v7At(t, now.Add(-time.Duration(i)*time.Second)), "order.order.placed.v1", now.Add(-time.Minute))
	}
	conn := broker.NewConn([]string{testenv.AMQPURL()}, "replay-test", nil, discard)
	t.Cleanup(conn.Close)
	// Short enough for a quick test, long enough that a loaded machine's
	// slow renewal does not cost the first runner its lease on its own.
	const ttl = 1500 * time.Millisecond
	short := func(c *RunnerConfig, _ *runnerTest) { c.LeaseTTL = ttl }
	var active atomic.Pointer[Runner]
	var once sync.Once
	stolen := make(chan int64, 1)
	a := runner(t, db, conn, exchange, nil, func(r Record) {
		if r.Published < 50 {
			return
		}
		once.Do(func() {
			// Between two chunks: another holder takes the lease, and this
			// runner learns it at its next renewal.
			_, err := db.Exec(ctx, `UPDATE platform.lease SET holder = 'other', expires_at = clock_timestamp() + interval '1 hour' WHERE name = $1`, LeaseName)
			if err != nil {
				t.Error(err)
			}
			deadline := time.Now().Add(2 * ttl)
			for active.Load().lease.Held() && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) //nolint:forbidigo // a bounded poll of the runner's own view, inside its goroutine
			}
			stolen <- r.Published
		})
	}, short)
	active.Store(a)
	a.TestSignals().Active.Init(t) // before the replay exists: a works only for one
	id := create(t, db, Selection{From: now.Add(-time.Hour)}, "", false, 200, nil)
	a.Wake()
	require.True(t, a.TestSignals().Active.WaitOrTimeout(), "the first runner takes the lease")
	require.True(t, a.Active())
	b := runner(t, db, conn, exchange, nil, nil, short) // the standby
	var before int64
	select {
	case before = <-stolen:
	case <-time.After(30 * time.Second):
		t.Fatal("the first runner did not reach 50 published")
	}
	require.False(t, a.TestSignals().Active.WaitOrTimeout(), "the runner steps down")
	require.False(t, a.Active())
	require.False(t, b.Active())

	seen := map[string]int{}
	count := func(ms []amqp.Delivery) {
		for _, m := range ms {
			require.Equal(t, id.String(), m.Headers[HeaderReplay])
			seen[m.MessageId]++
		}
	}
	count(collectCopies(t, copies, int(before)))
	require.Len(t, seen, int(before), "copies published after the runner knew its lease lost")
	select {
	case m := <-copies:
		t.Fatalf("event %s published while another held the lease", m.MessageId)
	case <-time.After(3 * ttl):
	}
	rec, err := Get(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, before, rec.Published, "progress recorded while another held the lease")
	require.False(t, a.Active())
	require.False(t, b.Active())

	// The other holder's lease ends: a runner resumes and finishes.
	_, err = db.Exec(ctx, `UPDATE platform.lease SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, LeaseName)
	require.NoError(t, err)
	rec = waitState(t, db, id, StateDone)
	require.Equal(t, int64(n), rec.Published)
	count(collectCopies(t, copies, n-int(before)))
	require.Len(t, seen, n)
	for mid, c := range seen {
		require.Equal(t, 1, c, "event %s published twice", mid)
	}
}
