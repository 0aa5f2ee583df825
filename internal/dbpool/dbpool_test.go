package dbpool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newPool opens a pool of maxConns on dsn, tagged app (its connections'
// application_name, to count them in pg_stat_activity).
func newPool(t *testing.T, dsn, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	pc.MaxConns = maxConns
	pc.ConnConfig.RuntimeParams["application_name"] = app
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	return p
}

// backends counts the server connections tagged app.
func backends(t *testing.T, admin *pgx.Conn, app string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n))
	return n
}

// A transaction begun before Replace commits on the old pool; calls from
// then on run on the new one, at its size; the old pool's connections
// close once that transaction is done, not before; Close leaves none.
func TestReplaceKeepsTransactionsAndClosesTheOldPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testdb.New(t, "dbpool")
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `CREATE TABLE t (id int primary key)`)
	require.NoError(t, err)
	suffix := fmt.Sprint(time.Now().UnixNano())
	oldApp, newApp := "dbpool-old-"+suffix, "dbpool-new-"+suffix

	h := dbpool.New(newPool(t, dsn, oldApp, 2))
	defer h.Close()
	tx, err := h.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	// The old pool is full: a second connection waits.
	c2, err := h.Acquire(ctx)
	require.NoError(t, err)
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = h.Acquire(actx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "max_conns 2 in force")

	old := h.Replace(newPool(t, dsn, newApp, 4))
	require.NotNil(t, old)
	require.EqualValues(t, 4, h.Pool().Config().MaxConns)
	held := make([]*pgxpool.Conn, 0, 4)
	for range 4 {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := h.Acquire(actx)
		cancel()
		require.NoError(t, err, "the new pool's size is in force")
		held = append(held, c)
	}
	require.Equal(t, 4, backends(t, admin, newApp))
	require.Equal(t, 2, backends(t, admin, oldApp), "the old pool waits for its connections")

	require.NoError(t, tx.Commit(ctx), "a transaction begun before the switch commits on its connection")
	c2.Release()
	require.Eventually(t, func() bool { return backends(t, admin, oldApp) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the old pool closed once its connections came back")
	for _, c := range held {
		c.Release()
	}
	var n int
	require.NoError(t, h.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Equal(t, 1, n)
	h.Close()
	require.Eventually(t, func() bool { return backends(t, admin, newApp) == 0 }, 10*time.Second, 10*time.Millisecond)
	require.Nil(t, h.Replace(newPool(t, dsn, newApp, 1)), "nothing is put in force after Close")
}

// Calls racing with Replace never run on a closed pool: every one of them
// succeeds, whichever pool it lands on.
func TestReplaceUnderConcurrentCalls(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := testdb.New(t, "dbpool_race")
	app := "dbpool-race-" + fmt.Sprint(time.Now().UnixNano())
	h := dbpool.New(newPool(t, dsn, app, 2))
	defer h.Close()
	done := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			var err error
			defer func() { errs <- err }()
			for {
				select {
				case <-done:
					return
				default:
				}
				var one int
				if err = h.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
					return
				}
				tx, err2 := h.BeginTx(ctx, pgx.TxOptions{})
				if err = err2; err != nil {
					return
				}
				if _, err = tx.Exec(ctx, `SELECT 1`); err != nil {
					return
				}
				if err = tx.Commit(ctx); err != nil {
					return
				}
			}
		}()
	}
	for i := range 20 {
		h.Replace(newPool(t, dsn, app, int32(2+i%3)))
	}
	close(done)
	for range 8 {
		require.NoError(t, <-errs)
	}
}
