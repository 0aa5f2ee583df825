package daemon

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// A reload that changes a service's database_pool or database_mode
// restarts that service alone, on a database pool built from the new
// settings; the other service keeps its pool, untouched. A change of a
// pool's concurrency under a derived max_conns restarts that pool alone.
func TestReloadResizesAServiceDatabasePool(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_dbpool"))
	shipDSN := testdb.New(t, "reload_dbpool_shipping")
	shipping := func(settings, poolExtra string) string {
		return fmt.Sprintf("  - name: shipping\n    database: %q\n%s    pools:\n%s", shipDSN, settings,
			e.poolYAML("shipping-own", "own", shop.EventStockReserved, shop.HandlerShippingParcel, poolExtra))
	}
	e.write(t, "", shipping("    database_pool: {max_conns: 5}\n", ""))
	d := e.start(t)
	defer d.Stop()
	svc := func(name string) *service {
		for _, s := range d.serviceList() {
			if s.name == name {
				return s
			}
		}
		t.Fatalf("no service %s", name)
		return nil
	}
	stock, ship := svc("stock"), svc("shipping")
	require.EqualValues(t, 5, ship.db.Config().MaxConns)

	e.write(t, "", shipping("    database_pool: {max_conns: 9}\n", ""))
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, res.ServicesRestarted)
	require.NotSame(t, ship, svc("shipping"))
	require.EqualValues(t, 9, svc("shipping").db.Config().MaxConns, "the reload resized the pool")
	require.Same(t, stock, svc("stock"), "the other service is not touched")
	require.Same(t, stock.db, svc("stock").db)

	// max_conns removed: derived again (the pool's concurrency + 3), a
	// new pool.
	e.write(t, "", shipping("", ""))
	res, err = d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, res.ServicesRestarted)
	derived := svc("shipping").config().DatabasePool
	require.False(t, derived.MaxConnsSet)
	require.EqualValues(t, derived.MaxConns, svc("shipping").db.Config().MaxConns)

	// A derived max_conns that follows a pool's concurrency: the pool
	// restarts alone, the service keeps its database pool.
	ship = svc("shipping")
	e.write(t, "", shipping("", "        concurrency: 3\n"))
	res, err = d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Empty(t, res.ServicesRestarted)
	require.Equal(t, []string{"shipping-own"}, res.PoolsRestarted)
	require.Same(t, ship, svc("shipping"))

	// database_mode: a pool in the pooler's query mode.
	e.write(t, "", shipping("    database_mode: pooler\n", "        concurrency: 3\n"))
	res, err = d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, res.ServicesRestarted)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, svc("shipping").db.Config().ConnConfig.DefaultQueryExecMode)
	require.Same(t, stock, svc("stock"))
}
