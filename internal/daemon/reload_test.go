package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/faultproxy"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/internal/testsignal"
	"github.com/platformd/platformd/internal/workers"
)

// reloadEnv is a daemon of one service, stock, started in-process on a
// config file the test rewrites, against the real broker and database.
type reloadEnv struct {
	path, admin, broker, dsn, suffix string
	// sigs are the daemon's test signals: ServiceUp is initialised, and
	// every pool's BatchSettled (see settled).
	sigs  *TestSignals
	pools sync.Map // pool name -> the last *workers.Pool built under it
}

func newReloadEnv(t testing.TB, dsn string) *reloadEnv {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return &reloadEnv{path: filepath.Join(t.TempDir(), "platformd.yaml"), admin: addr,
		broker: "amqp://guest:guest@127.0.0.1:5672/", dsn: dsn, suffix: fmt.Sprint(time.Now().UnixNano())}
}

// write writes the config: stock's pool, then extraPools under stock and
// extraServices after it.
func (e *reloadEnv) write(t testing.TB, extraPools, extraServices string) {
	t.Helper()
	cfg := fmt.Sprintf(`admin:
  listen: %s
  tokens: [{name: ops, role: admin, token: "admin-token-0123456789"}]
metrics: {listen: "-"}
broker: {url: %q, exchange: reload.%s}
services:
%s%s`, e.admin, e.broker, e.suffix,
		serviceYAML("stock", e.dsn, e.poolYAML("stock-events", "stock", shop.EventOrderPlaced, shop.HandlerStockReserve, "")+extraPools),
		extraServices)
	require.NoError(t, os.WriteFile(e.path, []byte(cfg), 0o600))
}

// serviceYAML is a service entry of a reload test's config: name on dsn,
// with pools (poolYAML's).
func serviceYAML(name, dsn, pools string) string {
	return fmt.Sprintf("  - name: %s\n    database: %q\n    pools:\n%s", name, dsn, pools)
}

// poolYAML is a pool entry: name on the classic queue reload.<queue>.<suffix>,
// bound to event, running handler; extra holds more of its keys, each
// line indented as they are.
func (e *reloadEnv) poolYAML(name, queue, event, handler, extra string) string {
	return fmt.Sprintf(`      - name: %s
        queue: reload.%s.%s
        queue_type: classic
%s        bindings: [%s]
        handlers: [%s]
`, name, queue, e.suffix, extra, event, handler)
}

// statusPool is a pool whose handler (shipping.track_status) needs
// migrations stock's own do not have.
func (e *reloadEnv) statusPool() string {
	return e.poolYAML("stock-status", "status", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, "")
}

// loadShop loads the config at path against the shop's handlers: the
// config, the registry with its SQL handlers added, and the catalog it was
// checked with.
func loadShop(t testing.TB, path string) (*config.Config, *consumer.Registry, Catalog) {
	t.Helper()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	cat := Catalog{Registry: reg}
	cfg, err := config.Load(path, cat)
	require.NoError(t, err)
	full, err := WithSQLHandlers(cfg, reg)
	require.NoError(t, err)
	return cfg, full, cat
}

func (e *reloadEnv) start(t testing.TB) *Daemon {
	t.Helper()
	cfg, full, cat := loadShop(t, e.path)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	d, err := start(ctx, cfg, full, Options{ConfigPath: e.path, Catalog: cat, testSignals: e.signals(t)}, map[string]bool{"stock": true}, logger)
	require.NoError(t, err)
	e.sigs.ServiceUp.WaitUntil("stock up", func() bool {
		for _, s := range d.serviceList() {
			if s.name == "stock" && s.up.Load() {
				return true
			}
		}
		return false
	})
	return d
}

// signals returns the env's test signals for a daemon about to start:
// ServiceUp initialised, and every pool's BatchSettled as it is built.
func (e *reloadEnv) signals(t testing.TB) *TestSignals {
	e.sigs = &TestSignals{PoolBuiltFunc: func(p *workers.Pool) {
		p.TestSignals().BatchSettled.Init(t)
		e.pools.Store(p.Name(), p)
	}}
	e.sigs.ServiceUp.Init(t)
	return e.sigs
}

// settled is the BatchSettled signal of pool, as last built.
func (e *reloadEnv) settled(t testing.TB, pool string) *testsignal.Signal[int] {
	t.Helper()
	p, ok := e.pools.Load(pool)
	require.True(t, ok, "pool %s built", pool)
	return &p.(*workers.Pool).TestSignals().BatchSettled
}

// A reload that changes a service's pools while admin calls read it: the
// race detector finds nothing (the service's config is replaced whole).
func TestReloadWhileAdminCallsRead(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_race"))
	e.write(t, "", "")
	d := e.start(t)
	defer d.Stop()
	b := &backend{d: d}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	reads := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = b.ListAudit(context.Background(), "", 5)
			_, _ = b.DescribeService(context.Background(), "stock")
			reads++
		}
	})
	e.write(t, e.statusPool(), "")
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-status"}, res.PoolsAdded)
	close(stop)
	wg.Wait()
	require.Positive(t, reads)
}

// Once Stop has taken the services to stop, a reload (one that waited
// behind it) is refused as unavailable and starts nothing: its service
// would outlive the daemon.
func TestReloadAfterStopStartsNothing(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_stop"))
	e.write(t, "", "")
	d := e.start(t)
	d.Stop()
	e.write(t, "", serviceYAML("extra", testdb.New(t, "reload_stop_extra"),
		e.poolYAML("extra-events", "extra", shop.EventOrderPlaced, shop.HandlerStockReserve, "")))
	_, err := d.Reload(context.Background(), "test")
	require.ErrorIs(t, err, admin.ErrUnavailable)
	for _, s := range d.serviceList() {
		require.NotEqual(t, "extra", s.name, "no service added after Stop")
	}
}

// A reload that adds a pool to a running service whose database is away
// is refused as unavailable (its new handler's migrations cannot run, and
// nothing would run them later); once the database is back the same
// reload applies, migrations first.
func TestReloadAddingAPoolWhileItsDatabaseIsAway(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t, "reload_away")
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	px, err := faultproxy.New("127.0.0.1:5432", faultproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(px.Close)
	e := newReloadEnv(t, fmt.Sprintf("postgres://postgres@%s/%s?connect_timeout=2&sslmode=disable", px.Addr(), cc.Database))
	e.write(t, "", "")
	d := e.start(t)
	defer d.Stop()

	px.Off()
	e.write(t, e.statusPool(), "")
	_, err = d.Reload(context.Background(), "test")
	require.ErrorIs(t, err, admin.ErrUnavailable)
	require.ErrorContains(t, err, "service stock: its database is not reachable")
	pools, err := (&backend{d: d}).ListPools(context.Background(), "")
	require.NoError(t, err)
	require.Len(t, pools, 1, "no pool added")

	require.NoError(t, px.On())
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-status"}, res.PoolsAdded)
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var table *string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT to_regclass('order_status')::text`).Scan(&table))
	require.NotNil(t, table, "the new handler's migrations ran")
}

// A pool moved from one service to another, here to one earlier in the
// config, is never consumed by both at once: every pool that goes stops,
// in every service, before any starts. (The overlap the old order allowed
// lasted a few milliseconds: this poll saw it in none of six runs, so the
// test guards the order rather than proving the race.)
func TestReloadMovesAPoolWithoutTwoConsumers(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_move"))
	movedPool := e.poolYAML("moved", "moved", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, "        concurrency: 2\n")
	shipDSN := testdb.New(t, "reload_move_shipping")
	shipping := func(pools string) string {
		return serviceYAML("shipping", shipDSN, e.poolYAML("shipping-own", "own", shop.EventStockReserved, shop.HandlerShippingParcel, "")+pools)
	}
	shippingWith, shippingWithout := shipping(movedPool), shipping("")
	e.write(t, "", shippingWith)
	d := e.start(t)
	defer d.Stop()

	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	defer conn.Close()
	// The queue's consumers, or -1 before the pool declared it (a passive
	// declare of a missing queue closes its channel: one per call).
	consumers := func() int {
		ch, err := conn.Channel()
		if err != nil {
			return -1
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive("reload.moved."+e.suffix, false, false, false, false, nil)
		if err != nil {
			return -1
		}
		return q.Consumers
	}
	require.Eventually(t, func() bool { return consumers() == 2 }, 30*time.Second, 20*time.Millisecond, "moved consumed under shipping")

	e.write(t, movedPool, shippingWithout)
	done := make(chan struct{})
	most := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			most = max(most, consumers())
			select {
			case <-done:
				return
			default:
			}
		}
	})
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return consumers() == 2 }, 30*time.Second, 5*time.Millisecond, "moved consumed under stock")
	close(done)
	wg.Wait()
	require.Equal(t, []string{"moved"}, res.PoolsAdded)
	require.Equal(t, []string{"moved"}, res.PoolsRemoved)
	require.LessOrEqual(t, most, 2, "two services consumed the moved pool's queue at once")
	for _, p := range mustPools(t, d) {
		if p.Name == "moved" {
			require.Equal(t, "stock", p.Service)
		}
	}
}

func mustPools(t *testing.T, d *Daemon) []admin.PoolInfo {
	t.Helper()
	pools, err := (&backend{d: d}).ListPools(context.Background(), "")
	require.NoError(t, err)
	return pools
}

// A pool that cannot be built during a reload fails the reload: the metric
// counts it `failed` and ReloadConfig answers INTERNAL naming the pool,
// not `applied` and OK.
func TestReloadWithAPoolNotBuiltFails(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_fail"))
	e.write(t, "", "")
	d := e.start(t)
	defer d.Stop()
	d.reloadMu.Lock()
	d.newPoolErrFunc = func(pc config.PoolConfig) error {
		if pc.Name == "stock-status" {
			return errors.New("no room for it")
		}
		return nil
	}
	d.reloadMu.Unlock()

	e.write(t, e.statusPool(), "")
	conn, err := grpc.NewClient(e.admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer admin-token-0123456789")
	_, err = adminv1.NewAdminServiceClient(conn).ReloadConfig(ctx, &adminv1.ReloadConfigRequest{})
	require.Equal(t, codes.Internal, status.Code(err), "%v", err)
	require.ErrorContains(t, err, "pool stock-status not started: no room for it")
	require.InDelta(t, 1, testutil.ToFloat64(d.metrics.ConfigReloads.WithLabelValues(metrics.ReloadFailed)), 0)
	require.InDelta(t, 0, testutil.ToFloat64(d.metrics.ConfigReloads.WithLabelValues(metrics.ReloadApplied)), 0)

	// What did not start is not in force: the next reload tries it again.
	d.reloadMu.Lock()
	d.newPoolErrFunc = nil
	d.reloadMu.Unlock()
	res, err := d.Reload(context.Background(), "test")
	require.NoError(t, err)
	require.Equal(t, []string{"stock-status"}, res.PoolsAdded)
	require.Len(t, mustPools(t, d), 2)
}
