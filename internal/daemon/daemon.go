// Package daemon wires platformd together from a validated configuration:
// service databases and their migrations, worker pools, the purge
// scheduler, the admin gRPC server and the metrics endpoint. It owns the
// order of start and of graceful shutdown.
//
// The public package daemon (with daemontest) is its one importer: thin
// wrappers over Main and Run that add the embedding API's lifecycle (a
// Daemon run once, Ready, Stop from another goroutine) and keep this
// package's types out of the public API, so that they may change.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/console"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/tracing"
)

// Catalog adapts a consumer.Registry to config.HandlerCatalog; it also
// checks SQL handler statements (config.SQLChecker, in sqlhandlers.go).
type Catalog struct{ Registry *consumer.Registry }

// HandlerEvents returns the events of a registered handler.
func (c Catalog) HandlerEvents(name string) ([]string, bool) {
	r, err := c.Registry.Lookup(name)
	if err != nil {
		return nil, false
	}
	return r.Events, true
}

// serviceHandlers returns the handler names used by a service's pools.
func serviceHandlers(s config.ServiceConfig) []string {
	var names []string
	for _, p := range s.Pools {
		names = append(names, p.Handlers...)
	}
	return names
}

// Migrate applies the platform's, the service's own and the handlers'
// migrations to every service database, then prepares its SQL handlers'
// statements; with createDB it first creates missing databases. reg must
// hold the config's SQL handlers (WithSQLHandlers). It opens one or two
// connections at a time, one service after the other: database_budget,
// a daemon's cap, does not apply to it.
func Migrate(ctx context.Context, cfg *config.Config, reg *consumer.Registry, createDB bool, logger *slog.Logger) error {
	for _, s := range cfg.Services {
		if err := migrateService(ctx, s, reg, createDB, nil, logger); err != nil {
			return err
		}
	}
	return nil
}

// migrateSets returns the migration sets of a service: the platform's, the
// service's own, then its handlers'.
func migrateSets(s config.ServiceConfig, reg *consumer.Registry) ([]migrate.Set, error) {
	sets, err := migrate.Sets(reg, serviceHandlers(s))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", s.Name, err)
	}
	return withServiceSet(s, sets), nil
}

// applyMigrations applies sets to the service's database, its connections
// under budget (nil: none).
func applyMigrations(ctx context.Context, s config.ServiceConfig, sets []migrate.Set, budget *connbudget.Budget, logger *slog.Logger) error {
	if err := migrate.ApplyWith(ctx, s.Database, sets, logger.With(slog.String("service", s.Name)), migrate.Options{Budget: budget}); err != nil {
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	return nil
}

// createDatabaseUnder creates the database named in dsn if it does not
// exist, connecting to the same server's "postgres" database, under budget
// (nil: none): the maintenance database is on the services' server.
func createDatabaseUnder(ctx context.Context, dsn string, budget *connbudget.Budget, logger *slog.Logger) error {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	name := cc.Database
	cc.Database = "postgres"
	cc.DialFunc = budget.Wrap(cc.DialFunc)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	exists, err := databaseExists.One(ctx, conn, databaseParams{Name: name})
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := createDatabase.Run(ctx, conn, databaseParams{Name: name}); err != nil {
		if again, aerr := databaseExists.One(ctx, conn, databaseParams{Name: name}); aerr == nil && again {
			return nil // created concurrently by another daemon
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	logger.InfoContext(ctx, "daemon: database created", slog.String("database", name))
	return nil
}

// Options tunes Run.
type Options struct {
	// NoMigrate skips the migrations at start.
	NoMigrate bool
	// CreateDB creates missing service databases at start.
	CreateDB bool
	// ConfigPath is the config file a reload reads again; "" turns
	// reloading off.
	ConfigPath string
	// Catalog validates a reloaded config (the Go handlers, as at start).
	Catalog Catalog
	// Reload, when it delivers, reloads the config (SIGHUP).
	Reload <-chan os.Signal
	// StartedFunc, when set, is called once with the daemon when every
	// service has started and the admin API, the metrics endpoint and the
	// console listen (an embedder's readiness); Run then blocks as usual.
	StartedFunc func(*Daemon)

	// testSignals, set by this package's tests only, are the daemon's
	// test signals (nil: a set of its own that nobody initialises).
	testSignals *TestSignals
	// queueDepthEvery, set by this package's tests only, is how often the
	// queue depth gauges are refreshed (0: QueueDepthRefreshDefault).
	queueDepthEvery time.Duration
	// budget, set by Run, is the connection budget its migrations ran
	// under (nil: start makes the config's).
	budget *connbudget.Budget
}

// Daemon is a running platformd. Its services come and go with reloads;
// mu guards them, and the config in force.
type Daemon struct {
	log        *slog.Logger
	metrics    *metrics.Metrics
	opts       Options
	publish    *broker.Conn // retry and failure copies of every pool
	outboxConn *broker.Conn // every relay's publishing connection
	killHook   func([]uuid.UUID)
	// newPoolErrFunc, set by tests only, fails the building of a pool.
	newPoolErrFunc func(config.PoolConfig) error
	// testSignals is opts.testSignals, or a set nobody initialises.
	testSignals *TestSignals
	admin       *admin.Server
	console     *console.Server // nil when off; see console.go
	httpSrv     *metricsServer
	stopOnce    sync.Once
	reloadMu    sync.Mutex // one reload at a time
	// stopping, under reloadMu, is set once Stop has taken the services
	// to stop: a reload waiting behind it must not start others then.
	stopping bool
	tracing  *tracing.Provider
	// budget caps the connections to every service's databases
	// (database_budget; nil: no cap). A reload never changes it.
	budget *connbudget.Budget

	mu       sync.RWMutex
	cfg      *config.Config
	services []*service // in config order
}

// Run starts platformd and blocks until ctx ends, then shuts down
// gracefully: the admin API reports NOT_SERVING and stops, then every
// service stops (its scheduler, then its pools drain and settle, then its
// relay and watchers). Each service's migrations are tried at start: a
// database that refuses a migration or a SQL statement stops the start (a
// mistake to fix first); one that cannot be reached does not (its service
// waits for it in the background while the others run). opts.Reload
// reloads the config.
func Run(ctx context.Context, cfg *config.Config, reg *consumer.Registry, opts Options, logger *slog.Logger) error {
	// The budget holds from the first connection: the migrations' too.
	opts.budget = newBudget(cfg, logger)
	migrated := make(map[string]bool, len(cfg.Services))
	for _, s := range cfg.Services {
		var err error
		if !opts.NoMigrate || opts.CreateDB {
			err = migrateService(ctx, s, reg, opts.CreateDB, opts.budget, logger)
		} else {
			err = prepareSQLHandlers(ctx, s, reg, opts.budget, logger)
		}
		switch {
		case err == nil:
			migrated[s.Name] = true
		case ctx.Err() != nil:
			return ctx.Err()
		case !unreachable(err):
			return err
		default:
			logger.WarnContext(ctx, "daemon: service database not reachable at start; the service waits for it",
				slog.String("service", s.Name), slog.Any("error", err))
		}
	}
	d, err := start(ctx, cfg, reg, opts, migrated, logger)
	if err != nil {
		return err
	}
	if opts.StartedFunc != nil {
		opts.StartedFunc(d)
	}
	for {
		select {
		case <-ctx.Done():
			logger.Info("daemon: shutting down")
			d.Stop() //nolint:contextcheck // shutdown starts because ctx is done; it must not use it
			logger.Info("daemon: stopped")
			return nil
		case <-opts.Reload:
			if _, err := d.Reload(ctx, "signal:SIGHUP"); err != nil {
				logger.ErrorContext(ctx, "daemon: reload refused; the config in force is unchanged", slog.Any("error", err))
			}
		}
	}
}

// start starts the daemon's shared parts and every service; migrated names
// the services whose migrations already ran (the others run theirs in the
// background first).
func start(ctx context.Context, cfg *config.Config, reg *consumer.Registry, opts Options, migrated map[string]bool, logger *slog.Logger) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: logger, metrics: metrics.New(), opts: opts, testSignals: opts.testSignals, budget: opts.budget}
	if d.testSignals == nil {
		d.testSignals = &TestSignals{}
	}
	if d.budget == nil {
		d.budget = newBudget(cfg, logger)
	}
	ok := false
	defer func() { //nolint:contextcheck // cleanup of a failed start must run whatever ctx says
		if !ok {
			d.Stop()
		}
	}()
	if dedup.SkipsDedupInsert() {
		logger.Warn("daemon: built with tag platformd_nodedup: the dedup insert is OFF; duplicates WILL be applied. Benchmarks only.")
	}
	if err := d.startTracing(ctx); err != nil {
		return nil, err
	}
	if err := d.startBudget(ctx); err != nil {
		return nil, err
	}
	d.publish = broker.NewConn(cfg.Broker.Addresses(), "platformd-publish", d.metrics, logger)
	d.outboxConn = broker.NewConn(cfg.Broker.Addresses(), "platformd-outbox", d.metrics, logger)
	d.killHook = killAfterConfirm(logger)
	if err := d.startMetrics(ctx); err != nil {
		return nil, err
	}
	// The admin API first, so that health and listings answer while the
	// services come up.
	if err := d.startAdmin(ctx); err != nil {
		return nil, err
	}
	for _, sc := range cfg.Services {
		s, err := d.newService(ctx, sc, reg, !migrated[sc.Name])
		if err != nil {
			return nil, err
		}
		// The admin API already serves: its listings read d.services.
		d.mu.Lock()
		d.services = append(d.services, s)
		d.mu.Unlock()
		if err := s.Start(ctx); err != nil {
			return nil, err
		}
	}
	var err error
	if d.console, err = d.startConsole(ctx); err != nil {
		return nil, err
	}
	ok = true
	logger.Info("daemon: running", slog.Int("services", len(cfg.Services)),
		slog.String("admin", cfg.Admin.Listen), slog.String("metrics", cfg.Metrics.Listen))
	return d, nil
}

// config returns the config in force.
func (d *Daemon) config() *config.Config {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.cfg
}

// serviceList returns the services, in config order.
func (d *Daemon) serviceList() []*service {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Clone(d.services)
}

// setServiceHealth reports service name's health through the admin API
// (grpc.health.v1) and platformd_service_up.
func (d *Daemon) setServiceHealth(name string, up bool) {
	v := 0.0
	if up {
		v = 1
	}
	d.metrics.ServiceUp.WithLabelValues(name).Set(v)
	if d.admin != nil {
		d.admin.SetServiceHealth(name, up, false)
	}
}

func (d *Daemon) startMetrics(ctx context.Context) error {
	if d.cfg.Metrics.Listen == config.MetricsDisabled {
		return nil
	}
	d.httpSrv = &metricsServer{listen: d.cfg.Metrics.Listen, handler: d.metrics.Handler()}
	return d.httpSrv.Start(ctx)
}

// metricsServer serves the Prometheus endpoint.
type metricsServer struct {
	startstop.Base
	listen  string
	handler http.Handler
	addr    atomic.Pointer[net.Addr] // where it listens, once started
}

// Addrs returns where the daemon listens: the admin API, the metrics
// endpoint and the console, each nil when off or not started (a listen
// port of 0 in the config picks a free one: this says which). Safe for
// concurrent use.
func (d *Daemon) Addrs() (adminAddr, metricsAddr, consoleAddr net.Addr) {
	if d.admin != nil {
		adminAddr = d.admin.Addr()
	}
	if d.httpSrv != nil {
		if a := d.httpSrv.addr.Load(); a != nil {
			metricsAddr = *a
		}
	}
	if d.console != nil {
		consoleAddr = d.console.Addr()
	}
	return adminAddr, metricsAddr, consoleAddr
}

// Start listens and serves /metrics in the background.
func (m *metricsServer) Start(ctx context.Context) error {
	return m.StartFunc(func() (func(), error) {
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", m.listen)
		if err != nil {
			return nil, fmt.Errorf("metrics: listen %s: %w", m.listen, err)
		}
		addr := lis.Addr()
		m.addr.Store(&addr)
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.handler)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(lis) }()
		return func() { //nolint:contextcheck // Stop runs after ctx is done; it must not use it
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
			<-done
		}, nil
	})
}

func (d *Daemon) startAdmin(ctx context.Context) error {
	sc := admin.ServerConfig{Listen: d.cfg.Admin.Listen, TLS: admin.TLSConfig{
		CertFile: d.cfg.Admin.TLS.CertFile, KeyFile: d.cfg.Admin.TLS.KeyFile, ClientCAFile: d.cfg.Admin.TLS.ClientCAFile,
	}}
	for _, t := range d.cfg.Admin.Tokens {
		sc.Tokens = append(sc.Tokens, admin.Token{Name: t.Name, Role: t.Role, Value: t.Token})
	}
	srv, err := admin.NewServer(sc, &backend{d: d}, d.log)
	if err != nil {
		return err
	}
	d.admin = srv
	for _, s := range d.cfg.Services {
		srv.SetServiceHealth(s.Name, false, false) // NOT_SERVING until it is up
	}
	return srv.Start(ctx)
}

// Stop shuts the daemon down in the order of stopStages; it is safe to call
// twice, and after a start that failed half-way.
func (d *Daemon) Stop() {
	d.stopOnce.Do(func() { startstop.Stages(d.stopStages()...) })
}

// stopStages is the daemon's shutdown order, one stage after the other
// (the members of a stage stop in parallel):
//  1. the admin API and the console: health turns NOT_SERVING and calls
//     end, so no pause, purge, retry or reload starts mid-shutdown;
//  2. the services, each in its own order (service.Start): its scheduler,
//     then its pools drain and settle, then its relay and watchers, then
//     its database pool closes;
//  3. the metrics endpoint, scrapable until the drain is done, and the
//     connection budget's reclaim, which the services' pools used;
//  4. the shared broker connections, which the services used;
//  5. the tracer provider, which flushes the spans of everything above.
func (d *Daemon) stopStages() [][]startstop.Stopper {
	d.reloadMu.Lock() // a reload in progress finishes first
	defer d.reloadMu.Unlock()
	d.stopping = true // and none after it: the list below is final
	var services []startstop.Stopper
	for _, s := range d.serviceList() {
		services = append(services, s)
	}
	var conns []startstop.Stopper
	for _, c := range []*broker.Conn{d.publish, d.outboxConn} {
		if c != nil {
			conns = append(conns, startstop.StopFunc(c.Close))
		}
	}
	return [][]startstop.Stopper{
		{d.admin, d.console},
		services,
		{d.httpSrv, d.budget},
		conns,
		{d.tracing},
	}
}

// horizonCache holds a service's horizon in force for the hot path. get
// never waits for the database: a refresh reads the horizon outside any
// lock the hot path takes, and only stores its answer. Refreshes run one
// at a time, each bounded by its context.
type horizonCache struct {
	db       dbpool.DB
	service  string
	def, min time.Duration
	log      *slog.Logger

	refreshing chan struct{} // one refresh at a time: a late answer never overwrites a newer one
	h          atomic.Int64  // the horizon in force, a time.Duration; 0 until the first refresh
	// gauge, when set, shows the horizon in force (platformd_horizon_seconds).
	gauge interface{ Set(float64) }
}

// newHorizonCache returns the horizon cache of service on db, holding no
// horizon until its first refresh.
func newHorizonCache(db dbpool.DB, service string, def, min time.Duration, log *slog.Logger) *horizonCache {
	return &horizonCache{db: db, service: service, def: def, min: min, log: log, refreshing: make(chan struct{}, 1)}
}

// HorizonRefreshDefault is how often the cached horizon (and the pools'
// pause state) is re-read when no notification arrives: the period of the
// service's control session's poll.
const HorizonRefreshDefault = 30 * time.Second

func (c *horizonCache) refresh(ctx context.Context) { c.refreshOn(ctx, c.db) }

// refreshOn re-reads the horizon through q (the pool, or the service's
// control session), one refresh at a time: a late answer never overwrites
// a newer one, and get never waits for a refresh.
func (c *horizonCache) refreshOn(ctx context.Context, q query.Querier) {
	select {
	case c.refreshing <- struct{}{}:
		defer func() { <-c.refreshing }()
	case <-ctx.Done():
		return
	}
	h, err := state.GetHorizon(ctx, q, c.service, c.def, c.min)
	if err != nil {
		c.h.CompareAndSwap(0, int64(c.def))
		c.log.WarnContext(ctx, "daemon: read horizon", slog.String("service", c.service), slog.Any("error", err))
		return
	}
	inForce := horizonInForce(ctx, q, h.Horizon) // rounded up to whole partitions when partitioned
	c.h.Store(int64(inForce))
	if c.gauge != nil {
		c.gauge.Set(inForce.Seconds())
	}
}

func (c *horizonCache) get() time.Duration {
	return time.Duration(c.h.Load())
}

// WaitServing blocks until each service the daemon runs now has been
// brought up and each of its pools has served (every worker on a live
// channel, its topology declared, its database answering), or until ctx
// ends. It waits on the services' and pools' Started channels, not on a
// poll: an event published once it returns reaches every pool.
func (d *Daemon) WaitServing(ctx context.Context) error {
	for _, s := range d.serviceList() {
		select {
		case <-s.Started():
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.RLock()
		pools := slices.Clone(s.pools)
		s.mu.RUnlock()
		for _, sp := range pools {
			select {
			case <-sp.pool.Started():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
