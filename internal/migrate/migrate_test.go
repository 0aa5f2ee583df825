package migrate_test

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Several daemons starting at once against a fresh database: every Apply
// succeeds and the schema is there once.
func TestApplyConcurrently(t *testing.T) {
	t.Parallel()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve, shop.HandlerShippingTrack, shop.HandlerStockReserve})
	require.NoError(t, err)
	require.Len(t, sets, 3)
	dsn := testdb.New(t, t.Name())
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrate.Apply(context.Background(), dsn, sets, logger) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Applying again is a no-op.
	require.NoError(t, migrate.Apply(context.Background(), dsn, sets, logger))

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, table := range []string{"public.processed_event", "public.reservation", "public.order_status",
		"platform.service_horizon", "platform.horizon_audit", "platform.pool_state", "platform.purge_run", "platform.outbox"} {
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok))
		require.True(t, ok, table)
	}
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM platform.goose_platform WHERE version_id > 0`).Scan(&n))
	files, err := fs.Glob(migrations.Platform(), "*.sql")
	require.NoError(t, err)
	require.Equal(t, len(files), n, "every platform migration applied once")
}

func TestSetsUnknownHandler(t *testing.T) {
	t.Parallel()
	_, err := migrate.Sets(consumer.NewRegistry(), []string{"nope"})
	require.ErrorIs(t, err, consumer.ErrUnknownHandler)
}
