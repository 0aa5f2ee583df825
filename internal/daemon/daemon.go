// Package daemon wires platformd together from a validated configuration:
// service databases and their migrations, worker pools, the purge
// scheduler, the admin gRPC server and the metrics endpoint. It owns the
// order of start and of graceful shutdown.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/console"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/workers"
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
// hold the config's SQL handlers (WithSQLHandlers).
func Migrate(ctx context.Context, cfg *config.Config, reg *consumer.Registry, createDB bool, logger *slog.Logger) error {
	for _, s := range cfg.Services {
		if createDB {
			if err := CreateDatabase(ctx, s.Database, logger); err != nil {
				return fmt.Errorf("service %s: %w", s.Name, err)
			}
		}
		sets, err := migrate.Sets(reg, serviceHandlers(s))
		if err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
		sets = withServiceSet(s, sets)
		if err := migrate.Apply(ctx, s.Database, sets, logger.With(slog.String("service", s.Name))); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
		if err := prepareSQLHandlers(ctx, s, reg, logger); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	return nil
}

// CreateDatabase creates the database named in dsn if it does not exist,
// connecting to the same server's "postgres" database.
func CreateDatabase(ctx context.Context, dsn string, logger *slog.Logger) error {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	name := cc.Database
	cc.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		var again bool
		if conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&again) == nil && again {
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
}

// service is one running consumer service.
type service struct {
	cfg     config.ServiceConfig
	db      *pgxpool.Pool
	pools   []*workers.Pool
	horizon *horizonCache
}

// Daemon is a running platformd.
type Daemon struct {
	cfg      *config.Config
	reg      *consumer.Registry
	log      *slog.Logger
	metrics  *metrics.Metrics
	services []*service
	pools    map[string]*workers.Pool
	poolSvc  map[string]*service
	publish  *workers.Conn
	consumes []*workers.Conn
	loops    []*startstop.Loop
	sched    *scheduler.Scheduler
	admin    *admin.Server
	console  *console.Server // nil when off; see console.go
	httpSrv  *metricsServer
	amqpURL  string
	tracing  *tracing.Provider
	stopOnce sync.Once
	outbox   *relays
}

// Run starts platformd and blocks until ctx ends, then shuts down
// gracefully: the admin API reports NOT_SERVING and stops, the scheduler
// stops, pools stop consuming and settle their in-flight batches.
func Run(ctx context.Context, cfg *config.Config, reg *consumer.Registry, opts Options, logger *slog.Logger) error {
	if !opts.NoMigrate || opts.CreateDB {
		if err := migrateWithRetry(ctx, cfg, reg, opts.CreateDB, logger); err != nil {
			return err
		}
	} else if err := checkSQLHandlers(ctx, cfg, reg, logger); err != nil {
		return err
	}
	d, err := start(ctx, cfg, reg, logger)
	if err != nil {
		return err
	}
	<-ctx.Done()
	logger.Info("daemon: shutting down")
	d.Stop() //nolint:contextcheck // shutdown starts because ctx is done; it must not use it
	logger.Info("daemon: stopped")
	return nil
}

// migrateWithRetry migrates, retrying while a database is unreachable (a
// daemon may start before PostgreSQL) until ctx ends.
func migrateWithRetry(ctx context.Context, cfg *config.Config, reg *consumer.Registry, createDB bool, logger *slog.Logger) error {
	backoff := 200 * time.Millisecond
	for {
		err := Migrate(ctx, cfg, reg, createDB, logger)
		if err == nil || ctx.Err() != nil {
			return err
		}
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) {
			return err // the server answered: a real migration error
		}
		logger.WarnContext(ctx, "daemon: migrate failed, retrying", slog.Any("error", err), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func start(ctx context.Context, cfg *config.Config, reg *consumer.Registry, logger *slog.Logger) (*Daemon, error) {
	d := &Daemon{cfg: cfg, reg: reg, log: logger, metrics: metrics.New(), pools: map[string]*workers.Pool{},
		poolSvc: map[string]*service{}, amqpURL: cfg.Broker.URL}
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
	d.publish = workers.NewConn(cfg.Broker.URL, "platformd-publish", logger)
	for _, sc := range cfg.Services {
		if err := d.addService(ctx, sc); err != nil {
			return nil, err
		}
	}
	if err := d.startMetrics(ctx); err != nil {
		return nil, err
	}
	d.declareTopology(ctx)
	for _, svc := range d.services {
		for _, p := range svc.pools {
			if err := p.Start(ctx); err != nil {
				return nil, err
			}
		}
		d.loops = append(d.loops,
			startstop.NewLoop(func(ctx context.Context) { d.watch(ctx, svc) }),
			startstop.NewLoop(func(ctx context.Context) { svc.horizon.refreshEvery(ctx, HorizonRefreshDefault) }))
	}
	for _, l := range d.loops {
		if err := l.Start(ctx); err != nil {
			return nil, err
		}
	}
	if err := d.startOutbox(ctx); err != nil {
		return nil, err
	}
	var schedSvcs []scheduler.ServiceConfig
	for _, svc := range d.services {
		schedSvcs = append(schedSvcs, scheduler.ServiceConfig{
			Name: svc.cfg.Name, DB: svc.db, DefaultHorizon: svc.cfg.Horizon, MinHorizon: svc.cfg.MinHorizon,
			Every: svc.cfg.Purge.Every, BatchSize: svc.cfg.Purge.BatchSize,
		})
	}
	sched, err := scheduler.New(scheduler.Config{Services: schedSvcs, Logger: logger, Metrics: d.metrics})
	if err != nil {
		return nil, err
	}
	d.sched = sched
	if err := sched.Start(ctx); err != nil {
		return nil, err
	}
	if err := d.startAdmin(ctx); err != nil {
		return nil, err
	}
	if d.console, err = d.startConsole(ctx); err != nil {
		return nil, err
	}
	ok = true
	logger.Info("daemon: running", slog.Int("services", len(d.services)), slog.Int("pools", len(d.pools)),
		slog.String("admin", cfg.Admin.Listen), slog.String("metrics", cfg.Metrics.Listen))
	return d, nil
}

// addService connects to a service's database and builds its pools (not
// started).
func (d *Daemon) addService(ctx context.Context, sc config.ServiceConfig) error {
	conns := int32(2) // LISTEN watcher, scheduler lock
	for _, p := range sc.Pools {
		conns += int32(p.Concurrency)
	}
	db, err := dedup.Connect(ctx, sc.Database, dedup.PoolConfig{MaxConns: conns + 4})
	if err != nil {
		return fmt.Errorf("service %s: %w", sc.Name, err)
	}
	svc := &service{cfg: sc, db: db}
	svc.horizon = &horizonCache{db: db, service: sc.Name, def: sc.Horizon, min: sc.MinHorizon, log: d.log}
	svc.horizon.refresh(ctx)
	d.services = append(d.services, svc)
	for _, pc := range sc.Pools {
		routes, err := dedup.RoutesFor(d.reg, pc.Handlers)
		if err != nil {
			return fmt.Errorf("pool %s: %w", pc.Name, err)
		}
		consume := workers.NewConn(d.cfg.Broker.URL, "platformd-"+pc.Name, d.log)
		d.consumes = append(d.consumes, consume)
		pool, err := workers.NewPool(workers.PoolConfig{
			Name: pc.Name, Service: sc.Name,
			Topology: workers.Topology{
				Exchange: d.cfg.Broker.Exchange, Queue: pc.Queue, QueueType: pc.QueueType,
				Bindings: pc.Bindings, RetryDelays: pc.Retry.Delays,
			},
			Concurrency: pc.Concurrency, Prefetch: pc.Prefetch,
			BatchSize: pc.Batch.Size, BatchWait: pc.Batch.Wait,
			PartitionKey:  pc.PartitionKey,
			MaxBodyBytes:  d.cfg.Broker.MaxBodyBytes,
			BeyondHorizon: sc.BeyondHorizon,
			HorizonFunc:   svc.horizon.get,
		}, workers.Deps{
			Processor: dedup.NewProcessor(db, dedup.ProcessorConfig{
				Routes: routes, Observer: workers.NewConflictObserver(d.metrics, sc.Name, pc.Name, d.log),
				Tracer: d.tracer(), TraceAttributes: batchTraceAttributes(sc.Name, pc.Name),
			}),
			DB: db, Consume: consume, Publish: d.publish, Metrics: d.metrics, Logger: d.log, Tracer: d.tracer(),
		})
		if err != nil {
			return err
		}
		svc.pools = append(svc.pools, pool)
		d.pools[pc.Name] = pool
		d.poolSvc[pc.Name] = svc
	}
	return nil
}

// declareTopology declares every pool's topology once before the pools
// start, so that producers may publish as soon as the daemon reports
// running. A broker that is down is not fatal: the workers declare again
// whenever they connect.
func (d *Daemon) declareTopology(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, svc := range d.services {
		for _, p := range svc.pools {
			if err := p.DeclareTopology(cctx); err != nil {
				d.log.WarnContext(ctx, "daemon: declare topology at start failed; workers will retry",
					slog.String("pool", p.Name()), slog.Any("error", err))
			}
		}
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
}

// Start listens and serves /metrics in the background.
func (m *metricsServer) Start(ctx context.Context) error {
	return m.StartFunc(func() (func(), error) {
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", m.listen)
		if err != nil {
			return nil, fmt.Errorf("metrics: listen %s: %w", m.listen, err)
		}
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
	return srv.Start(ctx)
}

// watch applies pause and horizon changes announced by any daemon sharing
// the service database.
func (d *Daemon) watch(ctx context.Context, svc *service) {
	state.Watch(ctx, svc.db, []string{state.ChannelPool, state.ChannelHorizon}, func(channel, payload string) {
		switch channel {
		case state.ChannelHorizon:
			svc.horizon.refresh(ctx)
		case state.ChannelPool:
			for _, p := range svc.pools {
				if payload == "" || payload == p.Name() {
					if err := p.Refresh(ctx); err != nil && ctx.Err() == nil {
						d.log.WarnContext(ctx, "daemon: refresh pool state", slog.String("pool", p.Name()), slog.Any("error", err))
					}
				}
			}
		}
	}, d.log)
}

// Stop shuts the daemon down in the order of stopStages; it is safe to call
// twice, and after a start that failed half-way.
func (d *Daemon) Stop() {
	d.stopOnce.Do(func() { startstop.Stages(d.stopStages()...) })
}

// stopStages is the daemon's shutdown order, one stage after the other
// (the members of a stage stop in parallel):
//  1. the admin API and the console: health turns NOT_SERVING and calls
//     end, so no pause, purge or retry starts mid-shutdown;
//  2. the purge scheduler: no purge runs while the pools drain;
//  3. the pools: they stop consuming, finish and settle their batches;
//  4. the daemon's loops (pause and horizon watchers, refreshers);
//  5. the metrics endpoint, scrapable until the drain is done;
//  6. the broker connections and the database pools, which all of the
//     above used;
//  7. the tracer provider, which flushes the spans of everything above.
func (d *Daemon) stopStages() [][]startstop.Stopper {
	var pools, loops, resources []startstop.Stopper
	for _, svc := range d.services {
		for _, p := range svc.pools {
			pools = append(pools, p)
		}
		resources = append(resources, startstop.StopFunc(svc.db.Close))
	}
	for _, l := range d.loops {
		loops = append(loops, l)
	}
	for _, c := range append(d.consumes, d.publish) {
		if c != nil {
			resources = append(resources, startstop.StopFunc(c.Close))
		}
	}
	return [][]startstop.Stopper{
		{d.admin, d.console},
		{d.sched},
		pools,
		d.outbox.stoppers(),
		loops,
		{d.httpSrv},
		append(resources, d.outbox.resources()...),
		{d.tracing},
	}
}

// horizonCache holds a service's horizon in force for the hot path.
type horizonCache struct {
	db       *pgxpool.Pool
	service  string
	def, min time.Duration
	log      *slog.Logger

	mu sync.RWMutex
	h  time.Duration
}

// HorizonRefreshDefault is how often the cached horizon is re-read when no
// notification arrives.
const HorizonRefreshDefault = 30 * time.Second

func (c *horizonCache) refresh(ctx context.Context) {
	h, err := state.GetHorizon(ctx, c.db, c.service, c.def, c.min)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.h == 0 {
			c.h = c.def
		}
		c.log.WarnContext(ctx, "daemon: read horizon", slog.String("service", c.service), slog.Any("error", err))
		return
	}
	c.h = h.Horizon
}

func (c *horizonCache) get() time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.h
}

// refreshEvery re-reads the horizon periodically, a safety net under
// NOTIFY, until ctx ends.
func (c *horizonCache) refreshEvery(ctx context.Context, every time.Duration) {
	startstop.Tick(ctx, every, c.refresh)
}
