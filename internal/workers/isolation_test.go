package workers

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// setConnections allows or forbids new connections to the bundle's
// database, terminating its sessions when forbidding (what an unreachable
// database looks like to platformd), from the server's maintenance
// database.
func (b *bundle) setConnections(allow bool) {
	b.t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(b.t, err)
	defer admin.Close(ctx)
	var name string
	require.NoError(b.t, admin.QueryRow(ctx, `SELECT $1::text`, dbName(b.dsn)).Scan(&name))
	_, err = admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS `+map[bool]string{true: "true", false: "false"}[allow])
	require.NoError(b.t, err)
	if !allow {
		_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
		require.NoError(b.t, err)
		return
	}
	b.check.Reset() // the test's own sessions were terminated too
}

func dbName(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.Database
}

// A pool whose service database is unreachable at start still starts: it
// reports StateConnecting with the database's error and consumes nothing;
// once connections are allowed again it reads its pause state, connects
// and applies what waited, once.
func TestPoolWaitsForItsDatabaseAtStart(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.setConnections(false)
	t.Cleanup(func() { b.setConnections(true) })
	p := b.startPool(false, shop.HandlerStockReserve)
	info := p.Info()
	require.Equal(t, StateConnecting, info.State)
	p.testSignals.DatabaseError.WaitUntil("the error is reported", func() bool { return p.Info().Error != "" })
	require.Contains(t, p.Info().Error, "not currently accepting connections")
	sent := b.publishMany(50, 0)
	b.waitFor("the events wait in the queue", func() bool { return b.queueDepth(b.queue) == sent })

	b.setConnections(true)
	b.waitSettled("drained", func() bool { return p.Info().Processed == uint64(sent) })
	require.Equal(t, StateRunning, p.Info().State)
	require.Empty(t, p.Info().Error)
	b.stop()
	require.Equal(t, sent, b.reservations())
}

// A database that goes away while a pool runs stalls that pool (connecting,
// with the error, its batches requeued with a growing backoff) and nothing
// is lost or applied twice once it returns.
func TestPoolStallsWhileItsDatabaseIsAwayAndRecovers(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	p := b.start(shop.HandlerStockReserve)
	first := b.publishMany(100, 0)
	b.waitFor("first wave applied", func() bool { return b.reservations() == first })
	b.setConnections(false)
	t.Cleanup(func() { b.setConnections(true) })
	second := b.publishMany(100, 0.1)
	p.testSignals.DatabaseError.WaitUntil("connecting with the error", func() bool { i := p.Info(); return i.State == StateConnecting && i.Error != "" })
	b.setConnections(true)
	b.waitFor("second wave applied", func() bool { return b.reservations() == first+second && b.queueDepth(b.queue) == 0 })
	p.testSignals.DatabaseError.WaitUntil("running again", func() bool { return p.Info().State == StateRunning })
	b.stop()
	require.Equal(t, first+second, b.reservations(), "applied exactly once")
	require.Equal(t, first+second, b.count(`SELECT count(*) FROM processed_event`))
}

// A handler that hangs (its statement runs into the service's
// statement_timeout) holds up only its own pool: another pool of the same
// process keeps consuming, and the hung events are retried, not lost.
func TestHangingHandlerHoldsUpOnlyItsPool(t *testing.T) {
	t.Parallel()
	hung := newBundle(t)
	hung.reg.MustRegister(consumer.Registration{Name: "test.hang", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, _ consumer.Event) error {
			_, err := tx.Exec(ctx, `SET LOCAL statement_timeout = '300ms'; SELECT pg_sleep(30)`)
			return err
		})})
	hung.cfg.Concurrency = 1
	hp := hung.start("test.hang")
	other := newBundle(t)
	op := other.start(shop.HandlerStockReserve)

	hung.publishMany(20, 0)
	sent := other.publishMany(300, 0)
	// Processed counts a delivery once it is settled (acked), after its
	// commit: wait for that, not for the rows, which come first.
	other.waitSettled("the other pool drains", func() bool { return op.Info().Processed == uint64(sent) })
	require.Equal(t, sent, other.reservations())
	hung.waitSettled("the hung events are retried", func() bool { return hp.Info().Retried > 0 })
	require.Zero(t, hp.Info().Processed)
	require.Zero(t, hung.count(`SELECT count(*) FROM processed_event`), "a timed-out event leaves no row")
}
