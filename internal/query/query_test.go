package query_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// The test's queries, declared as a product package declares its own.
var (
	divideByZero = query.NewExec("querytest.divide_by_zero", `SELECT 1 / $1::int`,
		func(p int) []any { return []any{p} })
	findNothing = query.NewRow[query.NoParams, int]("querytest.find_nothing", `SELECT 1 WHERE false`,
		nil, query.Column[int])
	sleep = query.NewExec("querytest.sleep", `SELECT pg_sleep($1)`,
		func(p float64) []any { return []any{p} })
	unnestIDs = query.NewRows("querytest.unnest_ids", `SELECT id, ord FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, ord) ORDER BY ord`,
		func(p unnestParams) []any { return []any{p.IDs} },
		func(r *idRow) []any { return []any{&r.ID, &r.Ord} })
	series = query.NewRows("querytest.series", `SELECT g FROM generate_series(1, $1::int) g`,
		func(n int) []any { return []any{n} }, query.Column[int64])
	createNamed = query.BuildExec("querytest.create_named", func(name string) string {
		return `CREATE TABLE ` + pgx.Identifier{name}.Sanitize() + ` (n int)`
	}, nil)
	countNamed = query.BuildRow("querytest.count_named", func(name string) string {
		return `SELECT count(*) + $1 FROM ` + pgx.Identifier{name}.Sanitize()
	}, func(string) []any { return []any{int64(0)} }, query.Column[int64])
)

type unnestParams struct{ IDs [][16]byte }

type idRow struct {
	ID  [16]byte
	Ord int64
}

func connect(t *testing.T, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.New(t, t.Name()))
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.MaxConns = 2
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func TestNames(t *testing.T) {
	t.Parallel()
	names := query.Names()
	require.Contains(t, names, "querytest.divide_by_zero")
	require.IsNonDecreasing(t, names)
	require.Equal(t, "querytest.sleep", sleep.Name())
	require.Equal(t, "/* platformd:querytest.sleep */ SELECT pg_sleep($1)", sleep.SQL(1))
	require.Equal(t, `/* platformd:querytest.create_named */ CREATE TABLE "a""b" (n int)`, createNamed.SQL(`a"b`))

	for _, bad := range []string{"", "nodot", "Upper.case", "a.b*/", "a.$1", "a..b", "a.b c", ".a"} {
		require.Panics(t, func() { query.NewExec[query.NoParams](bad, `SELECT 1`, nil) }, bad)
	}
	require.PanicsWithValue(t, `query: "querytest.sleep" declared twice`, func() {
		query.NewExec[query.NoParams]("querytest.sleep", `SELECT 1`, nil)
	})
	require.Panics(t, func() { query.NewExec[query.NoParams]("querytest.empty", " ", nil) })
}

// An error names the query that met it and keeps PostgreSQL's error
// reachable, for dbutil.Classify and errors.Is(err, pgx.ErrNoRows).
func TestErrorsNameTheQuery(t *testing.T) {
	t.Parallel()
	db := connect(t, pgx.QueryExecModeCacheStatement)
	ctx := t.Context()

	_, err := divideByZero.Run(ctx, db, 0)
	require.ErrorContains(t, err, "querytest.divide_by_zero: ")
	require.True(t, strings.HasPrefix(err.Error(), "querytest.divide_by_zero: "), err.Error())
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.DivisionByZero, pgErr.Code)
	require.Equal(t, dbutil.FaultData, dbutil.Classify(err))

	_, err = findNothing.One(ctx, db, query.NoParams{})
	require.ErrorIs(t, err, pgx.ErrNoRows)
	require.True(t, strings.HasPrefix(err.Error(), "querytest.find_nothing: "), err.Error())
	n, ok, err := findNothing.Find(ctx, db, query.NoParams{})
	require.NoError(t, err)
	require.False(t, ok)
	require.Zero(t, n)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = series.All(cctx, db, 3)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, strings.HasPrefix(err.Error(), "querytest.series: "), err.Error())

	stop := errors.New("stop")
	seen := 0
	err = series.Each(ctx, db, 10, func(int64) error {
		seen++
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, seen)
}

// The queries run in every exec mode a connection may be configured with,
// the simple protocol (a transaction-mode PgBouncer) included, on a pool,
// a connection and a transaction.
func TestExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			db := connect(t, mode)
			ctx := t.Context()
			got, err := series.All(ctx, db, 3)
			require.NoError(t, err)
			require.Equal(t, []int64{1, 2, 3}, got)
			// pgx encodes a [][16]byte only for a statement it has
			// described (the dedup insert's ids): not in exec and simple
			// protocol modes, which platformd does not use (a pooler gets
			// cache_describe, docs/tenants.md).
			if mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeSimpleProtocol {
				ids := [][16]byte{uuid.New(), uuid.New(), uuid.New()}
				rows, err := unnestIDs.All(ctx, db, unnestParams{IDs: ids})
				require.NoError(t, err)
				require.Equal(t, []idRow{{ids[0], 1}, {ids[1], 2}, {ids[2], 3}}, rows)
			}

			conn, err := db.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			_, err = createNamed.Run(ctx, conn.Conn(), "t "+mode.String())
			require.NoError(t, err)
			err = dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
				n, err := countNamed.One(ctx, tx, "t "+mode.String())
				require.Zero(t, n)
				return err
			})
			require.NoError(t, err)
		})
	}
}

// A running statement shows in pg_stat_activity with its query's name.
func TestCommentInPgStatActivity(t *testing.T) {
	t.Parallel()
	db := connect(t, pgx.QueryExecModeCacheStatement)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := sleep.Run(ctx, db, 60)
		done <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := db.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND state = 'active'
			AND query = '/* platformd:querytest.sleep */ SELECT pg_sleep($1)'`).Scan(&n)
		return err == nil && n == 1
	}, 20*time.Second, 20*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("the statement did not end after its context did")
	}
}

// Reading rows adds no allocation per row: the dedup insert, the hot path,
// reads one row per new event through Each.
func TestEachAllocatesNothingPerRow(t *testing.T) {
	db := connect(t, pgx.QueryExecModeCacheStatement)
	ctx := t.Context()
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	run := func(n int) float64 {
		var sum int64
		fn := func(v int64) error { sum += v; return nil }
		require.NoError(t, series.Each(ctx, conn, n, fn)) // warm the statement cache
		return testing.AllocsPerRun(50, func() {
			if err := series.Each(ctx, conn, n, fn); err != nil {
				t.Fatal(err)
			}
		})
	}
	// pgx's read buffer grows a few times for the longer result; one
	// allocation per row would be about 2,000 more.
	few, many := run(10), run(2010)
	require.Less(t, many-few, 20.0, "allocations for 10 rows: %v, for 2010: %v", few, many)
}
