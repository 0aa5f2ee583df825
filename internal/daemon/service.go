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
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/replay"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/session"
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
	// sessionWait bounds how long a service's start waits for its control
	// session before it starts its pools anyway.
	sessionWait = 5 * time.Second
	// bringUpBackoffMin is the first wait before migrating again a
	// service whose database cannot be reached (a migration takes
	// longer than a dial, and logs more).
	bringUpBackoffMin = 200 * time.Millisecond
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
	conf atomic.Pointer[serviceConf]
	d    *Daemon
	// db is the service's database pool, which every part of the service
	// uses through the handle: a reload that changes database_pool
	// replaces the pool under it (resize.go) and nothing restarts.
	db      *dbpool.Handle
	horizon *horizonCache
	// ctl is the service's control session: one connection for its
	// notifications, health pings, pause-state reads and leases (see
	// package session).
	ctl *session.Session
	// migrate is false when the service's migrations ran already (at the
	// daemon's start, or before a reload applied) or `run -no-migrate`.
	migrate bool

	mu    sync.RWMutex
	pools []*servicePool // in config order
	relay *outbox.Relay
	sched *scheduler.Scheduler
	// replayer runs the service's replays (archive on), nil otherwise.
	replayer *replay.Runner
	// retrier sends the retries of the service's failure store.
	retrier *failure.Runner
	// member is this start's name among the daemons running the service's
	// pools (their rate is shared out by member); set once, by memberName.
	member     string
	memberOnce sync.Once

	// dbMu guards unregisterDB, the budget registration of the database
	// pool in force, and serialises resizes of it.
	dbMu         sync.Mutex
	unregisterDB func()

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
	consume *broker.Conn
}

// newService builds a service (not started) over its own database pool;
// reg holds every handler its pools name.
func (d *Daemon) newService(ctx context.Context, sc config.ServiceConfig, reg *consumer.Registry, migrate bool) (*service, error) {
	pool, err := d.connectService(ctx, sc)
	if err != nil {
		return nil, err
	}
	db := dbpool.New(pool)
	s := &service{name: sc.Name, d: d, db: db, migrate: migrate}
	s.setConfig(sc, reg)
	poll := HorizonRefreshDefault
	if sc.Pooler() {
		// No LISTEN through a pooler: pauses and horizons are polled.
		poll = session.PollNoListenDefault
	}
	s.ctl = session.New(session.Config{DB: db, NoListen: sc.Pooler(), Poll: poll, Logger: d.log.With(slog.String("service", sc.Name))})
	s.horizon = newHorizonCache(db, sc.Name, sc.Horizon, sc.MinHorizon, d.log)
	s.horizon.gauge = d.metrics.Horizon.Horizon.WithLabelValues(sc.Name)
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

// dbPoolSize is the size of a service's database pool under sc: the
// pool follows the work, up to the pools' concurrency (plus spare for a
// relay pass, a purge, an admin call), nothing kept while idle
// (config.DatabasePoolConfig). The control session (session.go) comes on
// top.
func dbPoolSize(sc config.ServiceConfig) dedup.ConnectConfig {
	dp := sc.DatabasePool
	if dp.MaxConns == 0 { // a config built in Go, without the defaults
		dp.MaxConns = config.DatabasePoolSpareConns
		for _, p := range sc.Pools {
			dp.MaxConns += p.Concurrency
		}
	}
	return dedup.ConnectConfig{
		MaxConns: int32(max(dp.MaxConns, 2)), MinConns: int32(dp.MinConns), MaxConnIdleTime: dp.MaxIdle, //nolint:gosec // validated: at most 1000
		Pooler: sc.Pooler(),
	}
}

// connectService builds a database pool for the service configured as sc
// (no connection is opened before one is needed).
func (d *Daemon) connectService(ctx context.Context, sc config.ServiceConfig) (*pgxpool.Pool, error) {
	pc := dbPoolSize(sc)
	pc.Budget = d.budget
	pool, err := dedup.Connect(ctx, sc.Database, pc)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", sc.Name, err)
	}
	return pool, nil
}

// newPool builds one pool of s (not started).
func (s *service) newPool(pc config.PoolConfig) (*servicePool, error) {
	d := s.d
	if d.newPoolErrFunc != nil { // tests: a pool that cannot be built
		if err := d.newPoolErrFunc(pc); err != nil {
			return nil, err
		}
	}
	routes, err := dedup.RoutesFor(s.registry(), pc.Handlers)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", pc.Name, err)
	}
	prefetch, capped := pc.PrefetchFor(d.cfg.Broker.MaxBodyBytes)
	if capped {
		d.log.Info("daemon: pool prefetch capped by its max_unacked_bytes",
			slog.String("pool", pc.Name), slog.String("service", s.name),
			slog.Int("prefetch", prefetch), slog.Int("prefetch_wanted", pc.Prefetch),
			slog.Int("max_unacked_bytes", pc.MaxUnackedBytes), slog.Int("max_body_bytes", d.cfg.Broker.MaxBodyBytes))
	}
	instrumentRemoteHandlers(s.registry(), pc.Handlers, d.metrics, d.tracer())
	consume := broker.NewConn(d.cfg.Broker.Addresses(), "platformd-"+pc.Name, d.metrics, d.log)
	pool, err := workers.NewPool(workers.Config{
		Name: pc.Name, Service: s.name,
		Topology: broker.Topology{
			Exchange: d.cfg.Broker.Exchange, Queue: pc.Queue, QueueType: pc.QueueType,
			Bindings: pc.Bindings, RetryDelays: pc.Retry.Delays,
		},
		Concurrency: pc.Concurrency, Prefetch: prefetch,
		BatchSize: pc.Batch.Size, BatchWait: pc.Batch.Wait,
		PartitionKey:    pc.PartitionKey,
		OrderedFailures: pc.Failures.Ordered,
		MaxBodyBytes:    d.cfg.Broker.MaxBodyBytes,
		BeyondHorizon:   s.config().BeyondHorizon,
		HorizonFunc:     s.horizon.get,
	}, workers.Deps{
		Processor: dedup.NewProcessor(s.db, dedup.ProcessorConfig{
			Routes: routes, Observer: workers.NewConflictObserver(d.metrics, s.name, pc.Name, d.log),
			Tracer: d.tracer(), TraceAttributes: batchTraceAttributes(s.name, pc.Name), ResolvedBy: pc.Name,
		}),
		DB: s.db, ReadStateFunc: s.readPoolState, Consume: consume, Publish: d.publish, Metrics: d.metrics, Logger: d.log, Tracer: d.tracer(),
	})
	if err != nil {
		consume.Close()
		return nil, err
	}
	// The config's rate until the stored limits are read (limits.go).
	pool.SetLimits(pc.Limits.Rate, pc.Limits.Burst)
	if f := d.testSignals.PoolBuiltFunc; f != nil {
		f(pool)
	}
	return &servicePool{cfg: pc, pool: pool, consume: consume}, nil
}

// Start brings the service up in the background (see service).
func (s *service) Start(ctx context.Context) error {
	return s.StartFunc(func() (func(), error) {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		// Its idle connections may go to another service's waiting dial
		// (the pool in force: resizeDB registers its replacement).
		s.registerDB(s.db.Pool())
		health := startstop.NewLoop(s.watchHealth)
		lims := startstop.NewLoop(s.watchLimits)        // limits.go
		depths := startstop.NewLoop(s.watchQueueDepths) // queuedepth.go
		s.subscribe()
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
			// The control session first: the horizon, the pools' pause
			// state, the relay's lease and the scheduler's estimate then
			// run on it rather than on pooled connections (a hundred
			// services starting together would otherwise hold two or
			// three connections each for their first max_idle).
			_ = s.ctl.Start(runCtx)
			select {
			case <-s.ctl.Held():
			case <-time.After(sessionWait):
			case <-runCtx.Done():
				return
			}
			_ = s.ctl.Do(runCtx, func(ctx context.Context, q query.Querier) error {
				s.horizon.refreshOn(ctx, q)
				s.refreshLimitsOn(ctx, q, "") // before the pools consume
				// Counted among the pools' members before consuming: a
				// daemon that joined would take the whole rate until its
				// first heartbeat. A failed count is made again by the
				// heartbeat a second later.
				_ = s.heartbeatPools(ctx, q)
				return nil
			})
			// Under the lock, so that a reload adding pools meanwhile
			// either finds the service up and starts them, or leaves them
			// here to be started.
			s.mu.Lock()
			for _, sp := range s.pools {
				_ = sp.pool.Start(runCtx) // a pool waits for its database itself
				s.d.testSignals.PoolStarted.Signal(sp.cfg.Name)
			}
			s.up.Store(true)
			s.mu.Unlock()
			s.MarkStarted()
			s.d.testSignals.ServiceUp.Signal(s.name)
			if err := s.startRelay(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: outbox relay not started", slog.String("service", s.name), slog.Any("error", err))
			}
			if err := s.startReplayer(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: replay runner not started", slog.String("service", s.name), slog.Any("error", err))
			}
			if err := s.startRetrier(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: failure retry runner not started", slog.String("service", s.name), slog.Any("error", err))
			}
			if err := s.startScheduler(runCtx); err != nil {
				s.d.log.ErrorContext(runCtx, "daemon: purge scheduler not started", slog.String("service", s.name), slog.Any("error", err))
			}
			s.d.log.InfoContext(runCtx, "daemon: service running", slog.String("service", s.name), slog.Int("pools", len(s.pools)))
		}()
		_ = health.Start(runCtx)
		_ = lims.Start(runCtx)
		_ = depths.Start(runCtx)
		return func() {
			cancel()
			<-done
			s.mu.RLock()
			pools := make([]startstop.Stopper, 0, len(s.pools))
			for _, sp := range s.pools {
				pools = append(pools, sp.pool)
			}
			relay, sched, replayer, retrier := s.relay, s.sched, s.replayer, s.retrier
			s.mu.RUnlock()
			startstop.Stages(
				// lims first: a daemon leaving gives its share of the
				// pools' rates to the others at once.
				[]startstop.Stopper{sched, lims, depths},
				pools,
				[]startstop.Stopper{relay, replayer, retrier},
				[]startstop.Stopper{s.ctl, health},
			)
			s.mu.RLock()
			for _, sp := range s.pools {
				sp.consume.Close()
			}
			s.mu.RUnlock()
			closeRemoteHandlers(s.registry(), serviceHandlers(s.config()))
			s.registerDB(nil)
			s.db.Close()
			s.d.setServiceHealth(s.name, false)
			s.d.testSignals.ServiceDown.Signal(s.name)
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
	backoff := startstop.Backoff{Min: bringUpBackoffMin}
	for {
		c := s.conf.Load()
		err := migrateService(ctx, c.cfg, c.reg, false, s.d.budget, s.d.log)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.downErr.Store(&err)
		wait := backoff.Next()
		log.WarnContext(ctx, "daemon: service not up yet, its database cannot be migrated; trying again",
			slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return false
		}
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
		Services: []scheduler.Service{{
			Name: s.name, DB: s.db, DefaultHorizon: c.Horizon, MinHorizon: c.MinHorizon,
			Every: c.Purge.Every, BatchSize: c.Purge.BatchSize, Ahead: c.ProcessedEvent.Ahead,
			ControlFunc:      s.control,
			Archive:          c.Outbox.Archive,
			FailureRetention: c.Failures.Retention,
		}},
		Logger: s.d.log, Metrics: s.d.metrics,
	})
	if err != nil {
		return err
	}
	return startKept(ctx, s, &s.sched, sched)
}

// startKept starts c, one of the service's components (its relay, replay
// runner or scheduler), and once it runs stores it in *field under s.mu,
// where the admin API and Stop find it; a component that did not start is
// not stored.
func startKept[C startstop.Service](ctx context.Context, s *service, field *C, c C) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	*field = c
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
	// The first ping waits for the control session (bounded), so that it
	// does not open a pooled connection that would stay for max_idle.
	select {
	case <-s.ctl.Held():
	case <-time.After(sessionWait):
	case <-ctx.Done():
		return
	}
	var warned healthWarned // the database's refusal last logged
	check := func(ctx context.Context) {
		pctx, cancel := context.WithTimeout(ctx, healthCheckTimeout)
		err := s.ctl.Do(pctx, func(ctx context.Context, q query.Querier) error {
			_, err := ping.Run(ctx, q, query.NoParams{})
			return err
		})
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
		warned = s.reportHealth(ctx, err, warned)
		s.d.testSignals.Health.Signal(HealthSignal{Service: s.name, Up: up, Err: err})
	}
	check(ctx)
	startstop.Tick(ctx, HealthCheckEveryDefault, check)
}

// healthWarnEvery is how often a service whose database keeps failing its
// health check says so again at warn.
const healthWarnEvery = time.Minute

// healthWarned is the failed health check last logged: when, and why.
type healthWarned struct {
	at     time.Time // zero: not failing
	reason string
}

// reportHealth logs a failed health check at warn (why: refused, "too
// many clients", unreachable): the first time, whenever its reason
// changes (the session killed first, then the database refusing new ones:
// the second is what the operator must see), and every healthWarnEvery
// while it lasts; and its recovery at info. It returns what it last
// logged.
func (s *service) reportHealth(ctx context.Context, err error, warned healthWarned) healthWarned {
	switch {
	case err == nil && !warned.at.IsZero():
		s.d.log.InfoContext(ctx, "daemon: service database answers again", slog.String("service", s.name))
		return healthWarned{}
	case err == nil:
		return warned
	case warned.at.IsZero() || err.Error() != warned.reason || time.Since(warned.at) >= healthWarnEvery:
		s.d.log.WarnContext(ctx, "daemon: service database health check failed; its pools wait for it",
			slog.String("service", s.name), slog.Any("error", err))
		return healthWarned{at: time.Now(), reason: err.Error()}
	default:
		return warned
	}
}

// downError is why the service is not up, or its database's last error
// (nil once it answered the last ping).
func (s *service) downError() error {
	if e := s.downErr.Load(); e != nil {
		return *e
	}
	return nil
}

// subscribe applies pause and horizon changes announced by any daemon
// sharing the service database, on its control session; with no
// notification, the session's poll re-reads both now and then.
func (s *service) subscribe() {
	s.ctl.Subscribe(state.ChannelHorizon, func(ctx context.Context, q query.Querier, _ string) {
		s.horizon.refreshOn(ctx, q)
	})
	s.ctl.Subscribe(state.ChannelPool, func(ctx context.Context, _ query.Querier, payload string) {
		if !s.up.Load() {
			return // the pools read their state as they start
		}
		for _, p := range s.workerPools() {
			if payload == "" || payload == p.Name() {
				if err := p.Refresh(ctx); err != nil && ctx.Err() == nil {
					s.d.log.WarnContext(ctx, "daemon: refresh pool state", slog.String("pool", p.Name()), slog.Any("error", err))
				}
			}
		}
	})
	s.subscribeLimits()
	s.ctl.Subscribe(outbox.Channel, func(context.Context, query.Querier, string) {
		if r := s.outboxRelay(); r != nil {
			r.Wake()
		}
	})
}

// readPoolState reads a pool's pause state in force (its own, or its
// service's kill switch) on the control session.
func (s *service) readPoolState(ctx context.Context, pool string) (state.PoolState, error) {
	var st state.PoolState
	err := s.ctl.Do(ctx, func(ctx context.Context, q query.Querier) error {
		var err error
		st, err = state.GetEffectivePoolState(ctx, q, s.name, pool)
		return err
	})
	return st, err
}

// outboxRelay returns the service's relay, nil until it runs.
func (s *service) outboxRelay() *outbox.Relay {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.relay
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
func migrateService(ctx context.Context, s config.ServiceConfig, reg *consumer.Registry, createDB bool, budget *connbudget.Budget, logger *slog.Logger) error {
	if createDB {
		if err := createDatabaseUnder(ctx, s.Database, budget, logger); err != nil {
			return fmt.Errorf("service %s: %w", s.Name, err)
		}
	}
	sets, err := migrateSets(s, reg)
	if err != nil {
		return err
	}
	if err := applyMigrations(ctx, s, sets, budget, logger); err != nil {
		return err
	}
	if err := ensureProcessedEvent(ctx, s, budget); err != nil { // processedevent.go
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	if err := prepareSQLHandlers(ctx, s, reg, budget, logger); err != nil {
		return fmt.Errorf("service %s: %w", s.Name, err)
	}
	return nil
}

// unreachable reports whether err says the database could not be reached
// (no server answered, or it refused the connection itself: down, starting,
// not accepting connections, missing) or went away under the statement (a
// connection or operator-intervention SQLSTATE: a restart or
// pg_terminate_backend while a migration runs, which the soak's
// pg-terminate fault met at a daemon's start), rather than a migration or a
// statement it refused.
func unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) || dbutil.Classify(err) == dbutil.FaultInfra {
		return true
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !errors.Is(err, context.Canceled)
}
