package lease_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// newDB returns a pool on a scratch database with the platform migrations
// and a work_log table (one row per unit of work, by the database's clock).
func newDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	sets, err := migrate.Sets(consumer.NewRegistry(), nil)
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 6})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = db.Exec(ctx, `CREATE TABLE work_log (id bigserial PRIMARY KEY, holder text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	return db
}

// elector is one contender: a Lease whose statements fail once it is cut
// off (a partition, or a process killed: it can say nothing more), and a
// context of its own.
type elector struct {
	l      *lease.Lease
	cut    atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

const ttl = 600 * time.Millisecond

func startElector(t *testing.T, db *pgxpool.Pool, holder string, work func(ctx context.Context, l *lease.Lease)) *elector {
	t.Helper()
	e := &elector{done: make(chan struct{})}
	var err error
	e.l, err = lease.New(lease.Config{Name: "test", Holder: holder, TTL: ttl, RetryEvery: 20 * time.Millisecond,
		DoFunc: func(ctx context.Context, fn func(context.Context, query.Querier) error) error {
			if e.cut.Load() {
				return errors.New("cut off")
			}
			return fn(ctx, db)
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		e.l.Run(ctx, func(ctx context.Context) { work(ctx, e.l) })
	}()
	t.Cleanup(e.stop)
	return e
}

func (e *elector) stop() { e.cancel(); <-e.done }

// unitsOfWork logs a unit every 10ms, each only after checking that the
// lease is held, as the relay's passes and the purge's chunks do; the
// unit's own statement runs on the pool, not through the lease, so a
// holder cut off from renewing keeps working unless it checks.
func unitsOfWork(db *pgxpool.Pool, holder string) func(ctx context.Context, l *lease.Lease) {
	return func(ctx context.Context, l *lease.Lease) {
		for ctx.Err() == nil {
			if !l.Held() {
				return
			}
			_, _ = db.Exec(context.WithoutCancel(ctx), `INSERT INTO work_log (holder) VALUES ($1)`, holder)
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// holders returns the holders of the logged units in order, runs of one
// holder collapsed: "a", "b" is one take-over; "a", "b", "a" means two
// holders worked at once (or the lease went back, which this test never
// lets happen).
func holders(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT holder FROM work_log ORDER BY at, id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var h string
		require.NoError(t, rows.Scan(&h))
		if len(out) == 0 || out[len(out)-1] != h {
			out = append(out, h)
		}
	}
	require.NoError(t, rows.Err())
	return out
}

func waitHeld(t *testing.T, e *elector, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	require.Eventually(t, e.l.Held, within, 5*time.Millisecond)
	return time.Since(start)
}

// TestLeaseOneHolderAtATime: two electors on one database; one works. The
// holder is cut off from the database (it can no longer renew) while its
// work, on another path, could go on: it must stop by itself before the
// lease expires, and the other takes over after the expiry, never
// overlapping. Without the check before each unit (or the local deadline
// that stops the work), the cut-off holder's units interleave with the
// newcomer's and the test fails.
func TestLeaseOneHolderAtATime(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := startElector(t, db, "a", unitsOfWork(db, "a"))
	waitHeld(t, a, 5*time.Second)
	b := startElector(t, db, "b", unitsOfWork(db, "b"))
	time.Sleep(2 * ttl) //nolint:forbidigo // b must stay standby for a while: the property is that nothing happens
	require.False(t, b.l.Held(), "b took a lease a renews")
	require.Equal(t, []string{"a"}, holders(t, db))

	a.cut.Store(true) // renewals fail from now on
	took := waitHeld(t, b, 3*ttl)
	require.GreaterOrEqual(t, took, ttl-ttl/3-50*time.Millisecond, "b took over before a's lease could have expired")
	require.False(t, a.l.Held())
	require.Eventually(t, func() bool { return len(holders(t, db)) > 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(ttl) //nolint:forbidigo // a, cut off, must stay stopped while b works: nothing may happen
	b.stop()
	a.stop()
	require.Equal(t, []string{"a", "b"}, holders(t, db), "two holders worked at once")
}

// TestLeaseTakeoverAfterKill: the holder dies without releasing (its
// context ends and it can say nothing more, like SIGKILL); the standby
// holds the lease within the TTL plus a retry.
func TestLeaseTakeoverAfterKill(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	a := startElector(t, db, "a", unitsOfWork(db, "a"))
	waitHeld(t, a, 5*time.Second)
	// a's first unit is logged after it holds the lease: wait for it
	// before killing a, or the log may show b alone.
	require.Eventually(t, func() bool { return len(holders(t, db)) == 1 }, 5*time.Second, 10*time.Millisecond)
	b := startElector(t, db, "b", unitsOfWork(db, "b"))
	a.cut.Store(true)
	a.stop()
	waitHeld(t, b, ttl+500*time.Millisecond)
	// b's first unit is logged after it holds the lease: wait for it
	// before stopping b.
	require.Eventually(t, func() bool { return len(holders(t, db)) > 1 }, 5*time.Second, 10*time.Millisecond)
	b.stop()
	require.Equal(t, []string{"a", "b"}, holders(t, db))
}

// newLease returns holder's Lease of name, its statements run on db.
func newLease(t *testing.T, db *pgxpool.Pool, name, holder string, life time.Duration) *lease.Lease {
	t.Helper()
	l, err := lease.New(lease.Config{Name: name, Holder: holder, TTL: life, DB: db})
	require.NoError(t, err)
	return l
}

// TestLeaseReleaseHandsOver: a holder that stops releases; the standby
// takes the lease at its next try, well before the TTL; a renewal of a
// lease another holds fails.
func TestLeaseReleaseHandsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := newLease(t, db, "x", "a", time.Minute), newLease(t, db, "x", "b", time.Minute)
	ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.TryAcquire(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	ok, err = b.Renew(ctx)
	require.NoError(t, err)
	require.False(t, ok, "renewed a lease another holds")
	require.NoError(t, a.Release(ctx))
	ok, err = b.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = a.Renew(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	require.False(t, a.Held())
	require.True(t, b.Held())

}

// TestLeaseCurrent: another holder, refused, can tell who has the lease and
// how long it lasts unless renewed; nobody once it is released.
func TestLeaseCurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := newLease(t, db, "x", "a", time.Minute), newLease(t, db, "x", "b", time.Minute)
	_, ok, err := b.Current(ctx)
	require.NoError(t, err)
	require.False(t, ok, "a lease nobody took has no holder")

	ok, err = a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	h, ok, err := b.Current(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "a", h.Holder)
	require.Greater(t, h.ExpiresIn, 50*time.Second)
	require.LessOrEqual(t, h.ExpiresIn, time.Minute)

	require.NoError(t, a.Release(ctx))
	_, ok, err = b.Current(ctx)
	require.NoError(t, err)
	require.False(t, ok, "a released lease has no holder")

	// An expired lease has none either, though its row is still there.
	short := newLease(t, db, "y", "a", 100*time.Millisecond)
	ok, err = short.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		_, ok, err := short.Current(ctx)
		return err == nil && !ok
	}, 5*time.Second, 20*time.Millisecond, "an expired lease still has a holder")
}

// TestLeaseFence: a true Fence keeps the lease its holder's until the
// fencing transaction ends, even past its expiry: a take-over waits for
// the transaction; after it, the old holder's Fence is false. Without the
// row lock, b would take the lease while a's transaction still writes
// under it.
func TestLeaseFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := newLease(t, db, "fence", "a", 300*time.Millisecond), newLease(t, db, "fence", "b", time.Minute)
	ok, err := a.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ok, err = a.Fence(ctx, tx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Eventually(t, func() bool {
		var expired bool
		require.NoError(t, db.QueryRow(ctx, `SELECT expires_at < clock_timestamp() FROM platform.lease WHERE name = 'fence'`).Scan(&expired))
		return expired
	}, 5*time.Second, 10*time.Millisecond, "a's lease expired in the database")
	took := make(chan bool, 1)
	go func() {
		ok, err := b.TryAcquire(ctx)
		if err != nil {
			t.Error(err)
		}
		took <- ok
	}()
	// b's take-over waits on the row a's transaction locked.
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '/* platformd:lease.acquire */ %'`).Scan(&waiting))
		return waiting == 1
	}, 5*time.Second, 10*time.Millisecond, "b waits for a's fencing transaction")
	require.Empty(t, took)
	require.NoError(t, tx.Commit(ctx))
	require.True(t, <-took, "b takes the expired lease once a's transaction ended")

	tx, err = db.Begin(ctx)
	require.NoError(t, err)
	ok, err = a.Fence(ctx, tx)
	require.NoError(t, err)
	require.False(t, ok, "a's fence after the take-over")
	require.NoError(t, tx.Rollback(ctx))
}
