package state_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// newStateDB returns a pool on a scratch database with the platform
// migrations applied, closed and dropped when t ends.
func newStateDB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	sets, err := migrate.Sets(consumer.NewRegistry(), nil)
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}
