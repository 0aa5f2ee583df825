package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/internal/workers"
)

// writeStock writes a config of one service, stock, with settings (its
// own keys, each line indented as they are) and pools (poolYAML's).
func (e *reloadEnv) writeStock(t testing.TB, settings, pools string) {
	t.Helper()
	cfg := fmt.Sprintf(`admin:
  listen: %s
  tokens: [{name: ops, role: admin, token: "admin-token-0123456789"}]
metrics: {listen: "-"}
broker: {url: %q, exchange: reload.%s}
services:
  - name: stock
    database: %q
%s    pools:
%s`, e.admin, e.broker, e.suffix, e.dsn, settings, pools)
	require.NoError(t, os.WriteFile(e.path, []byte(cfg), 0o600))
}

// startCounting is start with every pool's ConsumerStarted initialised as
// it is built: a consumer cancelled and started again shows there.
func (e *reloadEnv) startCounting(t *testing.T) *Daemon {
	t.Helper()
	cfg, full, cat := loadShop(t, e.path)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	sigs := e.signals(t)
	built := sigs.PoolBuiltFunc
	sigs.PoolBuiltFunc = func(p *workers.Pool) {
		p.TestSignals().ConsumerStarted.Init(t)
		built(p)
	}
	d, err := start(ctx, cfg, full, Options{ConfigPath: e.path, Catalog: cat, testSignals: sigs}, map[string]bool{"stock": true}, logger)
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	return d
}

// stockService returns d's service stock once it is up.
func stockService(t *testing.T, d *Daemon) *service {
	t.Helper()
	var s *service
	require.Eventually(t, func() bool {
		for _, x := range d.serviceList() {
			if x.name == "stock" && x.up.Load() {
				s = x
			}
		}
		return s != nil
	}, 30*time.Second, 10*time.Millisecond)
	return s
}

// poolNamed returns s's pool called name.
func poolNamed(t *testing.T, s *service, name string) *workers.Pool {
	t.Helper()
	p, ok := s.pool(name)
	require.True(t, ok, "pool %s", name)
	return p
}

// consumersOf returns the consumers of queue (one channel per call: a
// passive declare of a missing queue closes it), -1 on an error.
func consumersOf(conn *amqp.Connection, queue string) int {
	ch, err := conn.Channel()
	if err != nil {
		return -1
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		return -1
	}
	return q.Consumers
}

// waitConsumers waits until p has started n consumers (its
// ConsumerStarted values), each drained.
func waitConsumers(p *workers.Pool, n int) {
	for range n {
		p.TestSignals().ConsumerStarted.WaitOrTimeout()
	}
}

// serverConns counts the service's connections to its database, the
// control session's included.
func serverConns(t *testing.T, db *pgxpool.Pool) int {
	return count(t, db, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'platformd'`)
}

// requireExactlyOnce waits until every event of ids is processed, and
// requires each applied once: one processed_event row and one reservation
// each (every event has one line).
func (e *limitsEnv) requireExactlyOnce(t *testing.T, ids int) {
	t.Helper()
	require.Eventually(t, func() bool { return e.processed(t) >= ids }, 60*time.Second, 20*time.Millisecond, "every event processed")
	require.Equal(t, ids, e.processed(t))
	require.Equal(t, ids, count(t, e.db, `SELECT count(*) FROM reservation`), "each event's effect applied once")
	require.Equal(t, ids, count(t, e.db, `SELECT count(DISTINCT order_id) FROM reservation`))
}

// A reload that changes a service's database_pool resizes its pool in
// place while events flow: the service, its pools and their consumers
// stay (no consumer cancelled or started), every event is applied once,
// and the new size is in force (the pool's own config, and as many
// server connections as it allows); the pool it replaced closes. Before,
// such a reload restarted the whole service on a new pool.
func TestReloadResizesADatabasePoolInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "reload_dbpool")
	// A rate that keeps stock-events busy through the reload.
	pools := e.poolYAML("stock-events", "stock", shop.EventOrderPlaced, shop.HandlerStockReserve, "        concurrency: 2\n        limits: {rate: 400}\n") +
		e.poolYAML("stock-status", "status", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, "        concurrency: 2\n")
	e.writeStock(t, "    database_pool: {max_conns: 2}\n", pools)
	d := e.startCounting(t)
	s := stockService(t, d)
	events, status := poolNamed(t, s, "stock-events"), poolNamed(t, s, "stock-status")
	waitConsumers(events, 2)
	waitConsumers(status, 2)
	require.EqualValues(t, 2, s.db.Pool().Config().MaxConns)
	// Two connections at most: a third waits.
	held := make([]*pgxpool.Conn, 0, 6)
	t.Cleanup(func() { // before d.Stop, which waits for them
		for _, c := range held {
			c.Release()
		}
	})
	for range 2 {
		c, err := s.db.Acquire(ctx)
		require.NoError(t, err)
		held = append(held, c)
	}
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := s.db.Acquire(actx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	for _, c := range held {
		c.Release()
	}
	held = held[:0]
	old := s.db.Pool()

	// 5 s of work at 400/s: the reload lands while it flows even on a
	// loaded machine (a third of that ran out before a reload returned
	// under a load average of 36).
	e.publish(t, 2000)
	require.Eventually(t, func() bool { return e.processed(t) > 0 }, 10*time.Second, 5*time.Millisecond, "events flow before the reload")
	e.writeStock(t, "    database_pool: {max_conns: 6, min_conns: 1}\n", pools)
	res, err := d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Less(t, e.processed(t), 2000, "and still flow after it")
	e.publish(t, 200)

	require.Equal(t, []string{"stock"}, res.ServicesResized)
	require.Empty(t, res.ServicesRestarted)
	require.Empty(t, res.PoolsRestarted)
	require.Equal(t, []string{"stock-events", "stock-status"}, res.PoolsUnchanged)
	require.Same(t, s, stockService(t, d), "the service did not restart")
	require.Same(t, events, poolNamed(t, s, "stock-events"))
	require.Same(t, status, poolNamed(t, s, "stock-status"))
	e.requireExactlyOnce(t, 2200)
	events.TestSignals().ConsumerStarted.RequireEmpty()
	status.TestSignals().ConsumerStarted.RequireEmpty()

	// The new size is in force: six connections at once, and the server
	// sees them.
	cfg := s.db.Pool().Config()
	require.EqualValues(t, 6, cfg.MaxConns)
	require.EqualValues(t, 1, cfg.MinConns)
	for range 6 {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := s.db.Acquire(actx)
		cancel()
		require.NoError(t, err)
		held = append(held, c)
	}
	require.GreaterOrEqual(t, serverConns(t, e.db), 6)
	for _, c := range held {
		c.Release()
	}
	held = held[:0]
	require.Eventually(t, func() bool { return old.Stat().TotalConns() == 0 }, 10*time.Second, 10*time.Millisecond,
		"the replaced pool closed")

	// Smaller again: the surplus connections close with the old pool.
	e.writeStock(t, "    database_pool: {max_conns: 2}\n", pools)
	res, err = d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock"}, res.ServicesResized)
	require.EqualValues(t, 2, s.db.Pool().Config().MaxConns)
	require.Eventually(t, func() bool { return serverConns(t, e.db) <= 3 }, 10*time.Second, 20*time.Millisecond,
		"two pooled connections and the control session at most")
	e.publish(t, 50)
	e.requireExactlyOnce(t, 2250)
	events.TestSignals().ConsumerStarted.RequireEmpty()
	status.TestSignals().ConsumerStarted.RequireEmpty()
}

// A reload that changes only a pool's concurrency applies it to the
// running pool within a second: new workers start consuming, or the
// newest stop, and nothing restarts (its other workers' consumers, the
// service's other pool, the service). The derived max_conns follows, in
// place. A concurrency an operator set with SetPoolLimits stays in force
// over the config's. A change that alters each worker's prefetch restarts
// the pool alone.
func TestReloadChangesConcurrencyInPlace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "reload_conc")
	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	defer conn.Close()
	queue := "reload.stock." + e.suffix
	status := e.poolYAML("stock-status", "status", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, "        concurrency: 2\n")
	// batch.size 10: a derived prefetch of 20 per worker, under the
	// max_unacked_bytes cap (with batch.size 1000 the cap binds, and more
	// workers restart the pool).
	write := func(extra string) {
		e.writeStock(t, "", e.poolYAML("stock-events", "stock", shop.EventOrderPlaced, shop.HandlerStockReserve, "        batch: {size: 10}\n"+extra)+status)
	}
	write("        concurrency: 2\n")
	d := e.startCounting(t)
	s := stockService(t, d)
	events, other := poolNamed(t, s, "stock-events"), poolNamed(t, s, "stock-status")
	waitConsumers(events, 2)
	waitConsumers(other, 2)
	require.EqualValues(t, 2+2+config.DatabasePoolSpareConns, s.db.Pool().Config().MaxConns)

	e.publish(t, 300)
	write("        concurrency: 5\n")
	start := time.Now()
	res, err := d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-events"}, res.PoolsResized)
	require.Empty(t, res.PoolsRestarted)
	require.Equal(t, []string{"stock-status"}, res.PoolsUnchanged)
	require.Equal(t, []string{"stock"}, res.ServicesResized, "the derived max_conns follows")
	require.Empty(t, res.ServicesRestarted)
	require.Eventually(t, func() bool { return consumersOf(conn, queue) == 5 }, time.Second, 5*time.Millisecond,
		"five consumers within a second")
	t.Logf("five consumers %s after the reload began", time.Since(start).Round(time.Millisecond))
	waitConsumers(events, 3) // the new workers' only
	events.TestSignals().ConsumerStarted.RequireEmpty()
	other.TestSignals().ConsumerStarted.RequireEmpty()
	require.Same(t, events, poolNamed(t, s, "stock-events"))
	require.Same(t, other, poolNamed(t, s, "stock-status"))
	require.Equal(t, 5, events.Info().Concurrency)
	require.EqualValues(t, 5+2+config.DatabasePoolSpareConns, s.db.Pool().Config().MaxConns)
	e.publish(t, 300)

	write("        concurrency: 1\n")
	res, err = d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-events"}, res.PoolsResized)
	require.Eventually(t, func() bool { return consumersOf(conn, queue) == 1 }, time.Second, 5*time.Millisecond,
		"the newest four stopped within a second")
	e.requireExactlyOnce(t, 600)
	events.TestSignals().ConsumerStarted.RequireEmpty()

	// An operator's concurrency stays in force over a reload's.
	_, err = (&backend{d: d}).SetPoolLimits(ctx, admin.PoolLimitsRequest{Pool: "stock-events", Concurrency: 2, Reason: "incident"}, "ops")
	require.NoError(t, err)
	waitConsumers(events, 1)
	write("        concurrency: 4\n")
	res, err = d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-events"}, res.PoolsResized)
	require.Equal(t, 2, events.Info().Concurrency, "SetPoolLimits' concurrency stays in force")
	events.TestSignals().ConsumerStarted.RequireEmpty()

	// An explicit prefetch shared by more workers: each worker's would
	// change, so the pool restarts (alone).
	write("        concurrency: 4\n        prefetch: 40\n")
	_, err = d.Reload(ctx, "test")
	require.NoError(t, err)
	write("        concurrency: 5\n        prefetch: 40\n")
	res, err = d.Reload(ctx, "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-events"}, res.PoolsRestarted)
	require.Empty(t, res.PoolsResized)
	require.Same(t, s, stockService(t, d))
	require.Same(t, other, poolNamed(t, s, "stock-status"))
	other.TestSignals().ConsumerStarted.RequireEmpty()
}

// What a reload can change in a running pool, and what restarts it.
func TestResizable(t *testing.T) {
	t.Parallel()
	const maxBody = 1 << 10
	// Uncapped: batch.size 100, 1 KiB bodies, 1 GiB of unacked bytes.
	base := config.PoolConfig{Name: "p", Queue: "q", Concurrency: 2, Prefetch: config.DerivedPrefetch(2, 100),
		MaxUnackedBytes: config.MaxUnackedBytesDefault, Batch: config.BatchConfig{Size: 100}}
	// Capped by max_unacked_bytes: 100 bodies at most, 50 per worker.
	capped := base
	capped.MaxUnackedBytes = 100 * maxBody
	with := func(was config.PoolConfig, f func(*config.PoolConfig)) config.PoolConfig {
		pc := was
		f(&pc)
		return pc
	}
	derived := func(n int) func(*config.PoolConfig) {
		return func(pc *config.PoolConfig) { pc.Concurrency, pc.Prefetch = n, config.DerivedPrefetch(n, pc.Batch.Size) }
	}
	for _, tc := range []struct {
		name string
		was  config.PoolConfig
		pc   config.PoolConfig
		want bool
	}{
		{"derived prefetch, more workers", base, with(base, derived(6)), true},
		{"derived prefetch, fewer workers", base, with(base, derived(1)), true},
		{"limits only", base, with(base, func(pc *config.PoolConfig) { pc.Limits.Rate, pc.Limits.Burst = 100, 10 }), true},
		{"explicit prefetch, more workers", base, with(base, func(pc *config.PoolConfig) { pc.Concurrency = 4 }), false},
		{"explicit prefetch, fewer workers", base, with(base, func(pc *config.PoolConfig) { pc.Concurrency = 1 }), true},
		{"prefetch only", base, with(base, func(pc *config.PoolConfig) { pc.Prefetch = 50 }), false},
		{"batch size", base, with(base, func(pc *config.PoolConfig) { pc.Batch.Size = 10 }), false},
		{"capped, more workers", capped, with(capped, derived(4)), false},
		{"capped, fewer workers", capped, with(capped, derived(1)), true},
		{"partitioned, more workers", with(base, func(pc *config.PoolConfig) { pc.PartitionKey = "/order_id" }),
			with(base, func(pc *config.PoolConfig) { derived(4)(pc); pc.PartitionKey = "/order_id" }), false},
		{"partitioned, explicit prefetch, more workers", with(base, func(pc *config.PoolConfig) { pc.PartitionKey = "/order_id" }),
			with(base, func(pc *config.PoolConfig) { pc.Concurrency = 4; pc.PartitionKey = "/order_id" }), true},
		{"partitioned, explicit prefetch, fewer workers", with(base, func(pc *config.PoolConfig) { pc.PartitionKey = "/order_id" }),
			with(base, func(pc *config.PoolConfig) { pc.Concurrency = 1; pc.PartitionKey = "/order_id" }), true},
	} {
		require.Equal(t, tc.want, resizable(tc.was, tc.pc, workerPrefetch(tc.was, maxBody), maxBody), tc.name)
	}
}

// A reload that changes a service's database_mode still restarts that
// service alone, on a pool in the pooler's query mode; the other service
// keeps its pool.
func TestReloadRestartsAServiceOnANewDatabaseMode(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_dbmode"))
	shipDSN := testdb.New(t, "reload_dbmode_shipping")
	shipping := func(settings string) string {
		return fmt.Sprintf("  - name: shipping\n    database: %q\n%s    pools:\n%s", shipDSN, settings,
			e.poolYAML("shipping-own", "own", shop.EventStockReserved, shop.HandlerShippingParcel, ""))
	}
	e.write(t, "", shipping(""))
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
	stock := svc("stock")
	e.write(t, "", shipping("    database_mode: pooler\n"))
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, res.ServicesRestarted)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, svc("shipping").db.Pool().Config().ConnConfig.DefaultQueryExecMode)
	require.Same(t, stock, svc("stock"))
	require.Same(t, stock.db, svc("stock").db)
}
