package dbutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// setup returns a pool on a scratch database with a table t(id int pk).
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := testdb.New(t, t.Name())
	ctx := t.Context()
	db, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = db.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`)
	require.NoError(t, err)
	return db
}

func ids(t *testing.T, db *pgxpool.Pool) []int {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id FROM t ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return out
}

func insert(id int) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id)
		return err
	}
}

func TestWithTx(t *testing.T) {
	t.Parallel()

	t.Run("commits when the function succeeds", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		require.NoError(t, dbutil.WithTx(ctx, db, dbutil.ReadCommitted, insert(1)))
		require.Equal(t, []int{1}, ids(t, db))
	})

	t.Run("rolls back and returns the function's error as it is", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		boom := errors.New("boom")
		err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, insert(1)(ctx, tx))
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Empty(t, ids(t, db))
	})

	t.Run("a swallowed statement error fails the commit instead of committing nothing silently", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, insert(1)(ctx, tx))
			_ = insert(1)(ctx, tx) // unique violation: the transaction is aborted (25P02 from here on)
			return nil
		})
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
		require.Empty(t, ids(t, db))
	})

	t.Run("rolls back when the caller's context ended mid-transaction", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		cctx, cancel := context.WithCancel(ctx)
		err := dbutil.WithTx(cctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, insert(1)(ctx, tx))
			cancel()
			return ctx.Err()
		})
		require.ErrorIs(t, err, context.Canceled)
		// The row lock is gone: another transaction inserts the same id at
		// once instead of waiting for a transaction nobody ends.
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		require.NoError(t, dbutil.WithTx(wctx, db, dbutil.ReadCommitted, insert(1)))
		require.Equal(t, []int{1}, ids(t, db))
	})

	t.Run("returns the function's value only on commit", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		v, err := dbutil.WithTxV(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (int, error) {
			var n int
			return n, tx.QueryRow(ctx, `INSERT INTO t VALUES (7) RETURNING id`).Scan(&n)
		})
		require.NoError(t, err)
		require.Equal(t, 7, v)
		v, err = dbutil.WithTxV(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (int, error) {
			return 8, insert(7)(ctx, tx)
		})
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23505", pgErr.Code)
		require.Zero(t, v)
	})

	t.Run("begin errors are wrapped", func(t *testing.T) {
		t.Parallel()
		db := setup(t)
		ctx := context.Background()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := dbutil.WithTx(cctx, db, dbutil.ReadCommitted, insert(1))
		require.ErrorContains(t, err, "begin: ")
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestWithSavepoint(t *testing.T) {
	t.Parallel()
	db := setup(t)
	ctx := context.Background()
	boom := errors.New("boom")
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, dbutil.WithSavepoint(ctx, tx, insert(1)))
		// A failing statement inside a savepoint undoes the savepoint alone
		// and leaves the transaction usable.
		err := dbutil.WithSavepoint(ctx, tx, func(ctx context.Context, sp pgx.Tx) error {
			require.NoError(t, insert(2)(ctx, sp))
			return insert(1)(ctx, sp)
		})
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23505", pgErr.Code)
		require.ErrorIs(t, dbutil.WithSavepoint(ctx, tx, func(ctx context.Context, sp pgx.Tx) error {
			require.NoError(t, insert(3)(ctx, sp))
			return boom
		}), boom)
		return insert(4)(ctx, tx)
	})
	require.NoError(t, err)
	require.Equal(t, []int{1, 4}, ids(t, db))
}
