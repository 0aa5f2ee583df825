package dedup_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

// A service database given as several hosts (a primary and its standbys,
// target_session_attrs=read-write) works for migrations and the dedup
// step: a host that is down is skipped for the next one.
func TestMultiHostDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadAddr := dead.Addr().String()
	require.NoError(t, dead.Close()) // nothing listens there now: connection refused

	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = deadAddr + "," + u.Host
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	multi := u.String()

	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, multi, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, multi, dedup.ConnectConfig{MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	routes, err := dedup.RoutesFor(reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	p := dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: routes})
	ev := orderEvent(t, 2)
	for _, want := range []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeDuplicate} {
		rs, err := p.Process(ctx, []consumer.Event{ev})
		require.NoError(t, err)
		require.Equal(t, want, rs[0].Outcome)
	}
	var n int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM reservation`).Scan(&n))
	require.Equal(t, 2, n)
}
