package daemon

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/faultproxy"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// The audit of every service lists the reachable services' entries when
// one database is away, and names the one away; the audit of that one
// service alone is Unavailable. An operator reading the audit during an
// incident sees the rest of it.
func TestListAuditWithADatabaseAway(t *testing.T) {
	t.Parallel()
	stockDSN := testdb.New(t, "audit_stock")
	shipDSN := testdb.New(t, "audit_shipping")
	cc, err := pgx.ParseConfig(shipDSN)
	require.NoError(t, err)
	px, err := faultproxy.New("127.0.0.1:5432", faultproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(px.Close)
	e := newReloadEnv(t, stockDSN)
	e.write(t, "", serviceYAML("shipping", fmt.Sprintf("postgres://postgres@%s/%s?connect_timeout=2&sslmode=disable", px.Addr(), cc.Database),
		e.poolYAML("shipping-status", "status", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, "")))
	d := e.start(t)
	defer d.Stop()
	b := &backend{d: d}
	ctx := context.Background()
	e.sigs.ServiceUp.WaitUntil("shipping's database ready", func() bool {
		_, err := b.ListAudit(ctx, "shipping", 10)
		return err == nil
	})
	_, err = b.PausePool(ctx, "stock-events", "incident 7", "ops")
	require.NoError(t, err)
	_, err = b.PausePool(ctx, "shipping-status", "incident 7", "ops")
	require.NoError(t, err)
	all, err := b.ListAudit(ctx, "", 10)
	require.NoError(t, err)
	require.Len(t, all.Entries, 2)
	require.Empty(t, all.Unavailable)

	px.Off()
	all, err = b.ListAudit(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, all.Unavailable)
	require.Len(t, all.Entries, 1)
	require.Equal(t, "stock", all.Entries[0].Service)
	require.Equal(t, "pool.pause", all.Entries[0].Action)
	_, err = b.ListAudit(ctx, "shipping", 10)
	require.ErrorIs(t, err, admin.ErrUnavailable)
}
