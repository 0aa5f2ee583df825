package dbutil_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/testdb"
)

// Every SQLSTATE the dedup step, SQL handlers and the scheduler sort goes
// through Classify: the data's fault, a conflict, infrastructure, or
// anything else.
func TestClassify(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]dbutil.Fault{
		"22P02": dbutil.FaultData,     // invalid text representation
		"22021": dbutil.FaultData,     // NUL in text
		"23505": dbutil.FaultData,     // unique violation
		"23514": dbutil.FaultData,     // check violation (a partition bound too)
		"40P01": dbutil.FaultConflict, // deadlock
		"40001": dbutil.FaultConflict, // serialization failure
		"08006": dbutil.FaultInfra,    // connection failure
		"53300": dbutil.FaultInfra,    // too many connections
		"57P01": dbutil.FaultInfra,    // admin shutdown
		"58030": dbutil.FaultInfra,    // I/O error
		"57014": dbutil.FaultOther,    // statement past statement_timeout: the statement's, not the server's
		"42703": dbutil.FaultOther,    // undefined column
		"25P02": dbutil.FaultOther,    // in failed transaction
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code})
		require.Equal(t, want, dbutil.Classify(err), code)
		require.Equal(t, want == dbutil.FaultData, dbutil.DataError(err), code)
		got, ok := dbutil.ConflictCode(err)
		require.Equal(t, want == dbutil.FaultConflict, ok, code)
		if ok {
			require.Equal(t, code, got)
		}
	}
	require.Equal(t, dbutil.FaultOther, dbutil.Classify(nil))
	require.Equal(t, dbutil.FaultOther, dbutil.Classify(errors.New("not postgres")))
	require.True(t, dbutil.CheckViolation(&pgconn.PgError{Code: "23514"}))
	require.False(t, dbutil.CheckViolation(&pgconn.PgError{Code: "23505"}))
}

// The errors a real server returns sort as their codes say.
func TestClassifyRealErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.New(t, "sqlstate"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SELECT 'not a uuid'::uuid`)
	require.Equal(t, dbutil.FaultData, dbutil.Classify(err))
	_, err = conn.Exec(ctx, `CREATE TEMP TABLE t (id int PRIMARY KEY CHECK (id > 0))`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO t VALUES (1), (1)`)
	require.Equal(t, dbutil.FaultData, dbutil.Classify(err))
	_, err = conn.Exec(ctx, `INSERT INTO t VALUES (-1)`)
	require.True(t, dbutil.CheckViolation(err))
	_, err = conn.Exec(ctx, `SET statement_timeout = 10; SELECT pg_sleep(1)`)
	require.Equal(t, dbutil.FaultOther, dbutil.Classify(err), "57014 is the statement's fault")
	_, err = conn.Exec(ctx, `SELECT nope FROM t`)
	require.Equal(t, dbutil.FaultOther, dbutil.Classify(err))
	_, err = pgx.Connect(ctx, "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2")
	require.Equal(t, dbutil.FaultInfra, dbutil.Classify(err))
}
