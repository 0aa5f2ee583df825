package connbudget_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testBundle is a scratch database and a budget over it.
type testBundle struct {
	dsn    string
	budget *connbudget.Budget
}

func setup(t *testing.T, maxConns int) *testBundle {
	t.Helper()
	b := &testBundle{dsn: testdb.New(t, "connbudget"), budget: connbudget.New(connbudget.Config{MaxConns: maxConns})}
	require.NoError(t, b.budget.Start(context.Background()))
	t.Cleanup(b.budget.Stop)
	return b
}

// connect opens one connection under the budget.
func (b *testBundle) connect(ctx context.Context) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(b.dsn)
	if err != nil {
		return nil, err
	}
	cc.DialFunc = b.budget.Wrap(cc.DialFunc)
	return pgx.ConnectConfig(ctx, cc)
}

// pool opens a pool of maxConns under the budget, registered for reclaim,
// whose connections stay idle for an hour (so that only a reclaim closes
// them within a test).
func (b *testBundle) pool(t *testing.T, maxConns, minConns int32) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(b.dsn)
	require.NoError(t, err)
	pc.MaxConns, pc.MinConns, pc.MaxConnIdleTime = maxConns, minConns, time.Hour
	pc.ConnConfig.DialFunc = b.budget.Wrap(pc.ConnConfig.DialFunc)
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	unregister := b.budget.Register(p)
	t.Cleanup(func() {
		unregister()
		p.Close()
	})
	return p
}

// eventually waits, bounded, until cond holds.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, msg)
}

func TestBudget(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		var none *connbudget.Budget
		require.Nil(t, connbudget.New(connbudget.Config{}), "max_conns 0: no budget")
		require.Nil(t, connbudget.New(connbudget.Config{MaxConns: -1}))
		var d net.Dialer
		require.Nil(t, none.Wrap(nil), "no budget wraps nothing")
		require.NotNil(t, none.Wrap(d.DialContext))
		require.Zero(t, none.MaxConns())
		require.Zero(t, none.Conns())
		require.Zero(t, none.Waits())
		none.Register(nil)()
		require.NoError(t, none.Start(ctx))
		none.Stop()
		b := connbudget.New(connbudget.Config{MaxConns: 3})
		require.Equal(t, 3, b.MaxConns())
		b.Stop() // before Start: safe
		b.Stop()
	})

	t.Run("a failed dial gives its token back", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		b := connbudget.New(connbudget.Config{MaxConns: 1})
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close()) // nobody listens there now
		var d net.Dialer
		dial := b.Wrap(d.DialContext)
		for range 3 { // a token kept would make the second dial wait forever
			_, err := dial(ctx, "tcp", addr)
			require.Error(t, err)
			require.Zero(t, b.Conns())
		}
		require.Zero(t, b.Waits())
	})

	t.Run("a connection gives its token back on Close, once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		ctx := context.Background()
		c, err := b.connect(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, b.budget.Conns())
		require.NoError(t, c.Close(ctx))
		require.Zero(t, b.budget.Conns())
		require.NoError(t, c.Close(ctx)) // closed again: nothing more given back
		require.Zero(t, b.budget.Conns())
		for range 2 { // both tokens are there
			c, err := b.connect(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close(ctx) })
		}
		require.Equal(t, 2, b.budget.Conns())
		require.Zero(t, b.budget.Waits())
	})

	t.Run("a token comes back once the server has let the connection go", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ctx := context.Background()
		watcher, err := pgx.Connect(ctx, b.dsn) // outside the budget
		require.NoError(t, err)
		t.Cleanup(func() { _ = watcher.Close(ctx) })
		for range 10 {
			c, err := b.connect(ctx)
			require.NoError(t, err)
			pid := c.PgConn().PID()
			require.NoError(t, c.Close(ctx))
			require.Zero(t, b.budget.Conns())
			var left int
			require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&left))
			require.Zero(t, left, "backend %d still on the server when its token came back", pid)
		}
	})

	t.Run("a hijacked connection keeps its token until it is closed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		ctx := context.Background()
		pc, err := pgxpool.ParseConfig(b.dsn)
		require.NoError(t, err)
		pc.ConnConfig.DialFunc = b.budget.Wrap(pc.ConnConfig.DialFunc)
		p, err := pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		pooled, err := p.Acquire(ctx)
		require.NoError(t, err)
		c := pooled.Hijack()
		p.Close() // the pool is gone; the hijacked connection lives on
		require.Equal(t, 1, b.budget.Conns())
		require.NoError(t, c.Ping(ctx))
		require.NoError(t, c.Close(ctx))
		require.Zero(t, b.budget.Conns())
	})

	t.Run("a dial waiting past its context fails with it and holds no token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ctx := context.Background()
		held, err := b.connect(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = b.connect(wctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "it waited")
		waits := b.budget.Waits() // pgconn dials again for sslmode=prefer's plain fallback: it fails at once
		require.GreaterOrEqual(t, waits, uint64(1))
		require.Equal(t, 1, b.budget.Conns(), "only the held connection")
		require.NoError(t, held.Close(ctx))
		require.Zero(t, b.budget.Conns())
		c, err := b.connect(ctx) // the token is free: no wait
		require.NoError(t, err)
		require.NoError(t, c.Close(ctx))
		require.Equal(t, waits, b.budget.Waits())
	})

	t.Run("a waiting dial is served when a closed connection gives its token back", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 1)
		ctx := context.Background()
		held, err := b.connect(ctx)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			c, err := b.connect(ctx)
			if err == nil {
				err = c.Close(ctx)
			}
			got <- err
		}()
		eventually(t, func() bool { return b.budget.Waits() >= 1 }, "the second dial waits")
		require.NoError(t, held.Close(ctx))
		require.NoError(t, <-got)
		require.Zero(t, b.budget.Conns())
	})

	t.Run("a waiting dial is served by another pool's idle connection reclaimed", func(t *testing.T) {
		t.Parallel()
		const n = 3
		b := setup(t, n)
		a, other := b.pool(t, n, 0), b.pool(t, n, 0)
		ctx := context.Background()
		fill(ctx, t, a, n)
		require.Equal(t, n, b.budget.Conns(), "the budget is full of a's idle connections")
		require.EqualValues(t, n, a.Stat().IdleConns())

		actx, cancel := context.WithTimeout(ctx, 5*time.Second) // far less than the hour they could stay idle
		defer cancel()
		start := time.Now()
		c, err := other.Acquire(actx)
		require.NoError(t, err)
		took := time.Since(start)
		require.NoError(t, c.Ping(ctx))
		c.Release()
		t.Logf("the other pool's acquire took %s", took)
		require.Less(t, took, 2*time.Second)
		require.GreaterOrEqual(t, b.budget.Waits(), uint64(1))
		eventually(t, func() bool { return a.Stat().TotalConns() == n-1 }, "a gave one connection, not all")
		require.LessOrEqual(t, b.budget.Conns(), n)
	})

	t.Run("a reclaim leaves a pool its min_conns", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 2)
		a := b.pool(t, 2, 2)
		eventually(t, func() bool { return a.Stat().IdleConns() == 2 }, "a opens its min_conns")
		other := b.pool(t, 2, 0)
		ctx := context.Background()
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // several reclaim passes
		defer cancel()
		_, err := other.Acquire(actx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualValues(t, 2, a.Stat().TotalConns(), "a keeps its min_conns")
	})
}

// fill opens n connections of p at once and releases them: p then holds n
// idle connections.
func fill(ctx context.Context, t *testing.T, p *pgxpool.Pool, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := p.Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// Errors a caller sees are the dial's own: the context's, wrapped.
func TestBudgetWaitErrorNamesTheKey(t *testing.T) {
	t.Parallel()
	b := connbudget.New(connbudget.Config{MaxConns: 1})
	var lc net.ListenConfig
	lis, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	var d net.Dialer
	dial := b.Wrap(d.DialContext)
	c, err := dial(context.Background(), "tcp", lis.Addr().String())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = dial(ctx, "tcp", lis.Addr().String())
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "database_budget.max_conns")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, c.Close())
	require.Zero(t, b.Conns())
	if s, ok := <-accepted; ok {
		_ = s.Close()
	}
}
