package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/replay"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/workers"
)

// Defaults of a service's bring-up and health.
const (
	// HealthCheckEveryDefault is how often a service's database is pinged
	// for its health (platformd_service_up, grpc.health.v1).
	HealthCheckEveryDefault = 2 * time.Second
	// healthCheckTimeout bounds one ping.
	healthCheckTimeout = 2 * time.Second
	// bringUpBackoffMax bounds the wait between two tries to migrate a
	// service whose database cannot be reached.
	bringUpBackoffMax = 5 * time.Second
)

// service is one hosted service and everything that runs for it: its
// database pool, its worker pools (each on a consuming connection of its
// own), its outbox relay, its purge scheduler and its watchers. Services
// are independent of each other: one whose database is away, or whose
// handlers hang, never stops another.
//
// It follows the startstop contract. Start returns at once: the service
// then brings itself up in the background (migrations, SQL statements
// prepared, then pools, relay, scheduler and watchers started), trying
// again with backoff while its database cannot be reached; meanwhile its
// pools report connecting with the error. Stop stops what runs, in order:
// the scheduler (no purge while pools drain), the pools (they drain and
// settle), the relay, the watchers, and closes the database pool.
type service struct {
	startstop.Base
	// name is the service's name, which no reload changes (a service
	// renamed is another service).
	name string
	// conf is the service's config and handlers, replaced as one by a
	// reload that changes its pools (setConfig) while admin calls, the
	// bring-up and the health loop read them (config, registry).
	conf    atomic.Pointer[serviceConf]
	d       *Daemon
	db      *pgxpool.Pool
	horizon *horizonCache
	// migrate is false when the service's migrations ran already (at the
	// daemon's start, or before a reload applied) or `run -no-migrate`.
	migrate bool

	mu    sync.RWMutex
	pools []*servicePool // in config order
	relay *outbox.Relay
	sched *scheduler.Scheduler
	// replayer runs the service's replays (archive on), nil otherwise.
	replayer *replay.Runner

	up      atomic.Bool           // brought up: its pools, relay and scheduler run
	downErr atomic.Pointer[error] // why it is not up, or its database's last error
}

// serviceConf is a service's config and the registry of its handlers.
type serviceConf struct {
	cfg config.ServiceConfig
	reg *consumer.Registry
}

// config returns the service's config in force.
func (s *service) config() config.ServiceConfig { return s.conf.Load().cfg }

// registry returns the registry of the handlers its pools run.
func (s *service) registry() *consumer.Registry { return s.conf.Load().reg }

// storedHorizon reads the service's horizon from its database (as set
// through the admin API, else the config's).
func (s *service) storedHorizon(ctx context.Context) (state.Horizon, error) {
	c := s.config()
	return state.GetHorizon(ctx, s.db, s.name, c.Horizon, c.MinHorizon)
}

// setConfig replaces the service's config and registry (a reload).
func (s *service) setConfig(sc config.ServiceConfig, reg *consumer.Registry) {
	s.conf.Store(&serviceConf{cfg: sc, reg: reg})
}

// servicePool is one pool of a service and its consuming connection.
type servicePool struct {
	cfg     config.PoolConfig
	pool    *workers.Pool
	consume *workers.Conn
}

// newService builds a service (not started) over its own database pool;
// reg holds every handler its pools name.
func (d *Daemon) newService(ctx context.Context, sc config.ServiceConfig, reg *consumer.Registry, migrate bool) (*service, error) {
	conns := int32(3) // LISTEN watcher, scheduler lock, health ping
	for _, p := range sc.Pools {
		conns += int32(p.Concurrency)
	}
	db, err := dedup.Connect(ctx, sc.Database, dedup.PoolConfig{MaxConns: conns + 4})
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", sc.Name, err)
	}
	s := &service{name: sc.Name, d: d, db: db, migrate: migrate}
	s.setConfig(sc, reg)
	s.horizon = &horizonCache{db: db, service: sc.Name, def: sc.Horizon, min: sc.MinHorizon, log: d.log}
	for _, pc := range sc.Pools {
		sp, err := s.newPool(pc)
		if err != nil {
			db.Close()
			return nil, err
		}
		s.pools = append(s.pools, sp)
	}
	notYet := errors.New("starting")
	s.downErr.Store(&notYet)
	return s, nil
}

// newPool builds one pool of s (not started).
func (s *service) newPool(pc config.PoolConfig) (*servicePool, error) {
	d := s.d
	routes, err := dedup.RoutesFor(s.registry(), pc.Handlers)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pc.Name, err)
	}
	consume := workers.NewConn(d.cfg.Broker.Addresses(), "platformd-"+pc.Name, d.metrics, d.log)
	pool, err := workers.NewPool(workers.PoolConfig{
		Name: pc.Name, Service: s.name,
		Topology: workers.Topology{
			Exchange: d.cfg.Broker.Exchange, Queue: pc.Queue, QueueType: pc.QueueType,
			Bindings: pc.Bindings, RetryDelays: pc.Retry.Delays,
		},
		Concurrency: pc.Concurrency, Prefetch: pc.Prefetch,
		BatchSize: pc.Batch.Size, BatchWait: pc.Batch.Wait,
		PartitionKey:  pc.PartitionKey,
		MaxBodyBytes:  d.cfg.Broker.MaxBodyBytes,
		BeyondHorizon: s.config().BeyondHorizon,
		HorizonFunc:   s.horizon.get,
	}, workers.Deps{
		Processor: dedup.NewProcessor(s.db, dedup.ProcessorConfig{
			Routes: routes, Observer: workers.NewConflictObserver(d.metrics, s.name, pc.Name, d.log),
			Tracer: d.tracer(), TraceAttributes: batchTraceAttributes(s.name, pc.Name),
		}),
		DB: s.db, Consume: consume, Publish: d.publish, Metrics: d.metrics, Logger: d.log, Tracer: d.tracer(),
	})
	if err != nil {
		consume.Close()
		return nil, err
	}
	return &servicePool{cfg: pc, pool: pool, consume: consume}, nil
}

// Start brings the service up in the background (see service).
func (s *service) Start(ctx context.Context) error {
	return s.StartFunc(func() (func(), error) {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		health := startstop.NewLoop(s.watchHealth)
		watch := startstop.NewLoop(func(ctx context.Context) { s.watch(ctx) })
		refresh := startstop.NewLoop(func(ctx context.Context) { s.horizon.refreshEvery(ctx, HorizonRefreshDefault) })
		done := make(chan struct{})
		go func() {
			defer close(done)
			// The queues first, whatever the database: events published
			// while the service waits for it are kept for it, not dropped
			// as unroutable.
			s.declareTopology(runCtx)
			if !s.bringUp(runCtx) {
				return
			}
			s.horizon.refresh(runCtx)
			// Under the lock, so that a reload adding pools meanwhile
			// either finds the service up and starts them, or leaves them
			// here to be started.
			s.mu.Lock()
			for _, sp := range s.pools {
				_ = sp.pool.Start(runCtx) // a pool waits for its database itself
			}
			s.up.Store(true)
			s.mu.Unlock()
			for _, l := range []*startstop.Loop{watch, refresh} {
				_ = l.Start(runCtx)
			}
			if err := s.startRelay(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: outbox relay not started", slog.String("service", s.name), slog.Any("error", err))
			}
			if err := s.startReplayer(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: replay runner not started", slog.String("service", s.name), slog.Any("error", err))
			}
			if err := s.startScheduler(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: purge scheduler not started", slog.String("service", s.name), slog.Any("error", err))
			}
			s.d.log.InfoContext(runCtx, "daemon: service running", slog.String("service", s.name), slog.Int("pools", len(s.pools)))
		}()
		_ = health.Start(runCtx)
		return func() {
			cancel()
			<-done
			s.mu.RLock()
			pools := make([]startstop.Stopper, 0, len(s.pools))
			for _, sp := range s.pools {
				pools = append(pools, sp.pool)
			}
			relay, sched, replayer := s.relay, s.sched, s.replayer
			s.mu.RUnlock()
			startstop.Stages(
				[]startstop.Stopper{sched},
				pools,
				[]startstop.Stopper{relay, replayer},
				[]startstop.Stopper{watch, refresh, health},
			)
			s.mu.RLock()
			for _, sp := range s.pools {
				sp.consume.Close()
			}
			s.mu.RUnlock()
			s.db.Close()
			s.d.setServiceHealth(s.name, false)
		}, nil
	})
}

// bringUp migrates the service's database and prepares its SQL handlers,
// again and again with backoff while the database cannot be reached; false
// when ctx ended first. A migration or a statement the database refuses
// is logged and tried again, slowly: the daemon runs on, the service waits.
func (s *service) bringUp(ctx context.Context) bool {
	if !s.migrate {
		return true
	}
	log := s.d.log.With(slog.String("service", s.name))
	backoff := 200 * time.Millisecond
	for {
		c := s.conf.Load()
		err := migrateService(ctx, c.cfg, c.reg, false, s.d.log)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.downErr.Store(&err)
		log.WarnContext(ctx, "daemon: service not up yet, its database cannot be migrated; trying again",
			slog.Any("error", err), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, bringUpBackoffMax)
	}
}

// declareTimeout bounds declaring pools' topology while the service's lock
// is held: a broker away must not hold up admin calls and shutdown.
const declareTimeout = 10 * time.Second

// declareTopology declares every pool's topology once before the pools
// start, so that producers may publish as soon as the service runs. A
// broker that is down is not fatal: the workers declare again whenever
// they connect.
func (s *service) declareTopology(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, declareTimeout)
	defer cancel()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sp := range s.pools {
		if err := sp.pool.DeclareTopology(cctx); err != nil {
			s.d.log.WarnContext(ctx, "daemon: declare topology failed; workers will retry",
				slog.String("pool", sp.cfg.Name), slog.Any("error", err))
		}
	}
}

// startScheduler starts the service's purge scheduler.
func (s *service) startScheduler(ctx context.Context) error {
	c := s.config()
	sched, err := scheduler.New(scheduler.Config{
		Services: []scheduler.ServiceConfig{{
			Name: s.name, DB: s.db, DefaultHorizon: c.Horizon, MinHorizon: c.MinHorizon,
			Every: c.Purge.Every, BatchSize: c.Purge.BatchSize, Ahead: c.ProcessedEvent.Ahead,
			Archive: c.Outbox.Archive,
		}},
		Logger: s.d.log, Metrics: s.d.metrics,
	})
	if err != nil {
		return err
	}
	if err := sched.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.sched = sched
	s.mu.Unlock()
	return nil
}

// scheduler returns the service's purge scheduler, nil until it runs.
func (s *service) scheduler() *scheduler.Scheduler {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sched
}

// watchHealth pings the service's database every HealthCheckEveryDefault
// and reports it: platformd_service_up{service}, the service's
// grpc.health.v1 status, and the error its pools show while it is down.
func (s *service) watchHealth(ctx context.Context) {
	check := func(ctx context.Context) {
		pctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
		err := s.db.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		up := err == nil && s.up.Load()
		if err != nil {
			s.downErr.Store(&err)
		} else if s.up.Load() {
			s.downErr.Store(nil)
		}
		s.d.setServiceHealth(s.name, up)
	}
	check(ctx)
	startstop.Tick(ctx, HealthCheckEveryDefault, check)
}

// downError is why the service is not up, or its database's last error
// (nil once it answered the last ping).
func (s *service) downError() error {
	if e := s.downErr.Load(); e != nil {
		return *e
	}
	return nil
}

// watch applies pause and horizon changes announced by any daemon sharing
// the service database.
func (s *service) watch(ctx context.Context) {
	state.Watch(ctx, s.db, []string{state.ChannelPool, state.ChannelHorizon}, func(channel, payload string) {
		switch channel {
		case state.ChannelHorizon:
			s.horizon.refresh(ctx)
		case state.ChannelPool:
			for _, p := range s.workerPools() {
				if payload == "" || payload == p.Name() {
					if err := p.Refresh(ctx); err != nil && ctx.Err() == nil {
						s.d.log.WarnContext(ctx, "daemon: refresh pool state", slog.String("pool", p.Name()), slog.Any("error", err))
					}
				}
			}
		}
	}, s.d.log)
}

// workerPools returns the service's pools, in config order.
func (s *service) workerPools() []*workers.Pool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*workers.Pool, len(s.pools))
	for i, sp := range s.pools {
		out[i] = sp.pool
	}
	return out
}

// pool returns the service's pool called name.
func (s *service) pool(name string) (*workers.Pool, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := slices.IndexFunc(s.pools, func(sp *servicePool) bool { return sp.cfg.Name == name })
	if i < 0 {
		return nil, false
	}
	return s.pools[i].pool, true
}

// migrateService applies the platform's, the service's own and the
// handlers' migrations to the service's database, then prepares its SQL
// handlers' statements; with createDB it first creates the database.
func migrateService(ctx context.Context, s config.ServiceConfig, reg *consumer.Registry, createDB bool, logger *slog.Logger) error {
	if createDB {
		if err := CreateDatabase(ctx, s.Database, logger); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	sets, err := migrateSets(s, reg)
	if err != nil {
		return err
	}
	if err := applyMigrations(ctx, s, sets, logger); err != nil {
		return err
	}
	if err := ensureProcessedEvent(ctx, s); err != nil { // processedevent.go
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	if err := prepareSQLHandlers(ctx, s, reg, logger); err != nil {
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	return nil
}

// unreachable reports whether err says the database could not be reached
// (no server answered, or it refused the connection itself: down, starting,
// not accepting connections, missing), rather than a migration or a
// statement it refused.
func unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !errors.Is(err, context.Canceled)
}
