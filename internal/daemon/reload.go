package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
)

// Reload reads the config file again, validates it exactly as `platformd
// check` does, and applies the difference (one reload at a time):
//
//   - a config that does not validate, or a SQL statement that does not
//     prepare against its service's database (after that service's new
//     migrations), changes nothing: *admin.ConfigError, every problem with
//     its key path;
//   - a change that a running daemon cannot apply (the admin or metrics
//     listener, tokens, TLS files, the broker, the console, tracing, the
//     log settings) changes nothing either: admin.ErrNeedsRestart, naming
//     the keys;
//   - otherwise new services start (their migrations first), removed ones
//     drain and stop, services whose own settings changed (database,
//     database_mode, horizons, purge, outbox, migrations) restart on a new
//     database pool, and within the others new pools start, removed ones
//     drain and stop and changed ones (their settings, or the SQL of a
//     handler they run) restart alone; unchanged pools are not touched: no
//     reconnect, no lost or repeated work;
//   - two changes apply in place, restarting nothing (resize.go): a
//     service's database_pool (a pool of the new size is swapped in under
//     the service, the old one closed once its connections come back),
//     and a pool's concurrency or limits block (applied to the running
//     pool as SetPoolLimits applies them; a limit an operator stored with
//     SetPoolLimits stays in force over the config's). A concurrency
//     change that would change each worker's prefetch (an explicit
//     prefetch, or one capped by max_unacked_bytes), or a partitioned
//     pool's total prefetch (its reader's channel keeps it), restarts
//     that pool alone instead.
//
// The reload is logged, counted (platformd_config_reloads_total{result})
// and audited in the database of every service it leaves running. actor
// names who asked (a token's name, or "signal:SIGHUP").
func (d *Daemon) Reload(ctx context.Context, actor string) (admin.ReloadResult, error) {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.stopping {
		return admin.ReloadResult{}, fmt.Errorf("%w: the daemon is stopping", admin.ErrUnavailable)
	}
	start := time.Now()
	res, err := d.reload(ctx)
	result := metrics.ReloadApplied
	var cfgErr *admin.ConfigError
	switch {
	case errors.As(err, &cfgErr):
		result = metrics.ReloadInvalid
	case errors.Is(err, admin.ErrNeedsRestart):
		result = metrics.ReloadRefused
	case err != nil:
		result = metrics.ReloadFailed
	}
	d.metrics.ConfigReloads.WithLabelValues(result).Inc()
	if errors.Is(err, admin.ErrReloadFailed) { // applied, but for what did not start
		d.log.ErrorContext(ctx, "daemon: config reload applied in part", slog.String("actor", actor),
			slog.String("result", result), slog.Any("error", err))
		d.auditReload(ctx, actor, res)
		d.testSignals.ReloadFailed.Signal(err)
		return res, err
	}
	if err != nil {
		d.log.WarnContext(ctx, "daemon: config reload refused; nothing changed", slog.String("actor", actor),
			slog.String("result", result), slog.Any("error", err))
		d.testSignals.ReloadFailed.Signal(err)
		return admin.ReloadResult{}, err
	}
	d.log.InfoContext(ctx, "daemon: config reloaded", slog.String("actor", actor), slog.Duration("took", time.Since(start)),
		slog.Any("services_added", res.ServicesAdded), slog.Any("services_removed", res.ServicesRemoved),
		slog.Any("services_restarted", res.ServicesRestarted), slog.Any("services_resized", res.ServicesResized),
		slog.Any("pools_added", res.PoolsAdded), slog.Any("pools_removed", res.PoolsRemoved),
		slog.Any("pools_restarted", res.PoolsRestarted), slog.Any("pools_resized", res.PoolsResized),
		slog.Int("pools_unchanged", len(res.PoolsUnchanged)))
	d.auditReload(ctx, actor, res)
	d.testSignals.ReloadApplied.Signal(res)
	return res, nil
}

// reload validates, prepares and applies a reload (see Reload).
func (d *Daemon) reload(ctx context.Context) (admin.ReloadResult, error) {
	if d.opts.ConfigPath == "" {
		return admin.ReloadResult{}, fmt.Errorf("%w: the daemon was started without a config file to read again", admin.ErrNeedsRestart)
	}
	cfg, err := config.Load(d.opts.ConfigPath, d.opts.Catalog)
	if err != nil {
		var cerr *config.Error
		if errors.As(err, &cerr) {
			return admin.ReloadResult{}, &admin.ConfigError{Problems: cerr.Problems}
		}
		return admin.ReloadResult{}, fmt.Errorf("%w: %w", admin.ErrInvalidArgument, err)
	}
	old := d.config()
	if keys := needsRestart(old, cfg); len(keys) > 0 {
		return admin.ReloadResult{}, fmt.Errorf("%w: %s cannot change while the daemon runs (restart it to apply)",
			admin.ErrNeedsRestart, strings.Join(keys, ", "))
	}
	reg, err := WithSQLHandlers(cfg, d.opts.Catalog.Registry)
	if err != nil {
		return admin.ReloadResult{}, fmt.Errorf("%w: %w", admin.ErrInvalidArgument, err)
	}
	plan := d.planReload(old, cfg)
	migrated, err := d.prepareReload(ctx, cfg, reg, plan)
	if err != nil {
		return admin.ReloadResult{}, err
	}
	return d.applyReload(ctx, cfg, reg, plan, migrated)
}

// needsRestart returns the keys whose change a running daemon cannot apply.
// Values are never returned: tokens are secrets.
func needsRestart(old, cfg *config.Config) []string {
	var keys []string
	for _, k := range []struct {
		key      string
		old, new any
	}{
		{"log", old.Log, cfg.Log},
		{"admin.listen", old.Admin.Listen, cfg.Admin.Listen},
		{"admin.tokens", old.Admin.Tokens, cfg.Admin.Tokens},
		{"admin.tls", old.Admin.TLS, cfg.Admin.TLS},
		{"metrics", old.Metrics, cfg.Metrics},
		{"broker", old.Broker, cfg.Broker},
		{"console", old.Console, cfg.Console},
		{"tracing", old.Tracing, cfg.Tracing},
		{"database_budget", old.DatabaseBudget, cfg.DatabaseBudget},
	} {
		if !reflect.DeepEqual(k.old, k.new) {
			keys = append(keys, k.key)
		}
	}
	return keys
}

// reloadPlan is what a reload changes.
type reloadPlan struct {
	add     []config.ServiceConfig // services to start
	remove  []*service             // services to stop
	restart []*service             // services to stop and start again
	// pools of the services that stay, by service name.
	pools map[string]*poolPlan
}

// poolPlan is what a reload changes in the pools of a service that stays.
type poolPlan struct {
	add     []config.PoolConfig
	remove  []string
	restart []config.PoolConfig
	// resize are the running pools whose concurrency or limits change,
	// applied in place.
	resize    []config.PoolConfig
	unchanged []string
	// resizeDB is true when the service's database pool changes size.
	resizeDB bool
}

// changed reports whether the plan changes any pool.
func (p *poolPlan) changed() bool { return len(p.add)+len(p.remove)+len(p.restart) > 0 }

// planReload compares the running services (of old, the config in force)
// with cfg's.
func (d *Daemon) planReload(old, cfg *config.Config) *reloadPlan {
	plan := &reloadPlan{pools: map[string]*poolPlan{}}
	running := map[string]*service{}
	for _, s := range d.serviceList() {
		running[s.name] = s
		if _, ok := cfg.Service(s.name); !ok {
			plan.remove = append(plan.remove, s)
		}
	}
	for _, sc := range cfg.Services {
		s, ok := running[sc.Name]
		switch {
		case !ok:
			plan.add = append(plan.add, sc)
		case !reflect.DeepEqual(serviceSettings(s.config()), serviceSettings(sc)):
			plan.restart = append(plan.restart, s)
		default:
			p := planPools(old, s, cfg, sc)
			p.resizeDB = s.dbPoolChanged(sc)
			plan.pools[sc.Name] = p
		}
	}
	return plan
}

// serviceSettings is a service's config without its pools, SQL handlers
// and database_pool: what, changed, restarts the whole service. The
// database pool is resized in place (resizeDB), whether its max_conns is
// set or derived from the pools' concurrency.
func serviceSettings(sc config.ServiceConfig) config.ServiceConfig {
	sc.Pools, sc.SQLHandlers = nil, nil
	sc.DatabasePool = config.DatabasePoolConfig{}
	return sc
}

// planPools compares the pools of s in the config in force, old, and in
// cfg (sc, s's). A pool changes when its settings do or when a SQL handler
// it runs does; one whose only change is its concurrency or limits is
// resized in place when resizable.
func planPools(old *config.Config, s *service, cfg *config.Config, sc config.ServiceConfig) *poolPlan {
	was := s.config()
	perWorker := func(name string) int {
		if wp, ok := s.pool(name); ok {
			return wp.WorkerPrefetch()
		}
		return 0
	}
	p := &poolPlan{}
	for _, pc := range was.Pools {
		if !slices.ContainsFunc(sc.Pools, func(n config.PoolConfig) bool { return n.Name == pc.Name }) {
			p.remove = append(p.remove, pc.Name)
		}
	}
	for _, pc := range sc.Pools {
		i := slices.IndexFunc(was.Pools, func(o config.PoolConfig) bool { return o.Name == pc.Name })
		switch {
		case i < 0:
			p.add = append(p.add, pc)
		case !reflect.DeepEqual(sqlHandlersOf(old, was.Pools[i]), sqlHandlersOf(cfg, pc)):
			p.restart = append(p.restart, pc)
		case reflect.DeepEqual(was.Pools[i], pc):
			p.unchanged = append(p.unchanged, pc.Name)
		case resizable(was.Pools[i], pc, perWorker(pc.Name), old.Broker.MaxBodyBytes):
			p.resize = append(p.resize, pc)
		default:
			p.restart = append(p.restart, pc)
		}
	}
	return p
}

// sqlHandlersOf returns the SQL handlers of cfg that pool pc runs, key
// paths left out (they move when the config is edited around them).
func sqlHandlersOf(cfg *config.Config, pc config.PoolConfig) []sqlHandlerDef {
	var out []sqlHandlerDef
	for _, s := range cfg.Services {
		for _, h := range s.SQLHandlers {
			if slices.Contains(pc.Handlers, h.Name) {
				out = append(out, sqlHandlerDef{Name: h.Name, Events: h.Events, SQL: h.Statements()})
			}
		}
	}
	return out
}

// sqlHandlerDef is what makes a SQL handler itself.
type sqlHandlerDef struct {
	Name   string
	Events []string
	SQL    []string
}

// prepareReload migrates, before anything changes, every service the plan
// starts or changes, and prepares its SQL handlers: a statement that does
// not prepare refuses the reload, with its key path. A database that
// cannot be reached is not a refusal: its service waits for it, as at
// start. It returns the services migrated.
func (d *Daemon) prepareReload(ctx context.Context, cfg *config.Config, reg *consumer.Registry, plan *reloadPlan) (map[string]bool, error) {
	var todo []config.ServiceConfig
	todo = append(todo, plan.add...)
	for _, s := range plan.restart {
		sc, _ := cfg.Service(s.name)
		todo = append(todo, sc)
	}
	// kept are the running services whose pools change: nothing brings
	// them up again, so their new pools need the migrations now.
	kept := map[string]bool{}
	for name, p := range plan.pools {
		if p.changed() {
			sc, _ := cfg.Service(name)
			todo = append(todo, sc)
			kept[name] = true
		}
	}
	migrated := map[string]bool{}
	var problems []admin.ConfigProblem
	for _, sc := range todo {
		err := migrateService(ctx, sc, reg, false, d.budget, d.log)
		var kp *keyPathError
		switch {
		case err == nil:
			migrated[sc.Name] = true
		case errors.As(err, &kp):
			problems = append(problems, admin.ConfigProblem{Path: kp.path, Message: kp.err.Error()})
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case unreachable(err) && kept[sc.Name]:
			return nil, fmt.Errorf("%w: service %s: its database is not reachable, and the pools this reload adds or changes need its migrations first: %w",
				admin.ErrUnavailable, sc.Name, err)
		case unreachable(err):
			d.log.WarnContext(ctx, "daemon: reload: service database not reachable; the service waits for it",
				slog.String("service", sc.Name), slog.Any("error", err))
		default:
			// The database refused a migration: the operator learns why
			// at the service's key path, not as an internal error.
			problems = append(problems, admin.ConfigProblem{Path: cfg.ServicePath(sc.Name), Message: "migrations: " + err.Error()})
		}
	}
	if len(problems) > 0 {
		return nil, &admin.ConfigError{Problems: problems}
	}
	return migrated, nil
}

// applyReload applies plan: stops first (in parallel), then starts, then
// the config in force becomes cfg. A service or pool that does not start
// is left out of the result and named in the error, which wraps
// admin.ErrReloadFailed.
func (d *Daemon) applyReload(ctx context.Context, cfg *config.Config, reg *consumer.Registry, plan *reloadPlan, migrated map[string]bool) (admin.ReloadResult, error) {
	var res admin.ReloadResult
	var failed []error
	var stopping []startstop.Stopper
	for _, s := range plan.remove {
		stopping = append(stopping, s)
		res.ServicesRemoved = append(res.ServicesRemoved, s.name)
	}
	for _, s := range plan.restart {
		stopping = append(stopping, s)
		res.ServicesRestarted = append(res.ServicesRestarted, s.name)
	}
	startstop.StopAllParallel(stopping...)
	for _, s := range plan.remove {
		d.admin.SetServiceHealth(s.name, false, true)
		d.metrics.ServiceUp.DeleteLabelValues(s.name)
	}

	running := map[string]*service{}
	for _, s := range d.serviceList() {
		running[s.name] = s
	}
	// Every pool that goes away or changes stops, in every service that
	// stays, before any starts: a pool moved from one service to another
	// is never consumed by both at once (whatever their order in the
	// config), its old service's batches drained and acked first.
	// (plan.pools holds the services that stay as they are, but for
	// their pools.)
	for name, p := range plan.pools {
		running[name].detach(p)
	}
	var services []*service
	for _, sc := range cfg.Services {
		s, kept := running[sc.Name]
		if p, ok := plan.pools[sc.Name]; ok {
			if p.resizeDB {
				switch resized, err := s.resizeDB(ctx, sc); {
				case err != nil:
					// Validated already: only a DSN pgx cannot parse gets
					// here. The pool in force stays; the next reload finds
					// it the wrong size and tries again.
					d.log.ErrorContext(ctx, "daemon: reload: database pool not resized", slog.String("service", sc.Name), slog.Any("error", err))
					failed = append(failed, fmt.Errorf("service %s: database pool not resized: %w", sc.Name, err))
				case resized:
					res.ServicesResized = append(res.ServicesResized, sc.Name)
				}
			}
			notStarted, resized := s.attach(ctx, sc, reg, p)
			res.PoolsResized = append(res.PoolsResized, resized...)
			for _, err := range notStarted {
				failed = append(failed, err)
			}
			for _, pc := range p.add {
				if notStarted[pc.Name] == nil {
					res.PoolsAdded = append(res.PoolsAdded, pc.Name)
				}
			}
			for _, pc := range p.restart {
				if notStarted[pc.Name] == nil {
					res.PoolsRestarted = append(res.PoolsRestarted, pc.Name)
				}
			}
			res.PoolsRemoved = append(res.PoolsRemoved, p.remove...)
			res.PoolsUnchanged = append(res.PoolsUnchanged, p.unchanged...)
			services = append(services, s)
			continue
		}
		ns, err := d.newService(ctx, sc, reg, !migrated[sc.Name])
		if err == nil {
			err = ns.Start(ctx)
		}
		if err != nil {
			// Validated already: only a DSN pgx cannot parse gets here.
			d.log.ErrorContext(ctx, "daemon: reload: service not started", slog.String("service", sc.Name), slog.Any("error", err))
			failed = append(failed, fmt.Errorf("service %s not started: %w", sc.Name, err))
			continue
		}
		if !kept {
			res.ServicesAdded = append(res.ServicesAdded, sc.Name)
			for _, pc := range sc.Pools {
				res.PoolsAdded = append(res.PoolsAdded, pc.Name)
			}
		}
		services = append(services, ns)
	}
	if len(failed) > 0 {
		cfg = inForce(cfg, services)
	}
	d.mu.Lock()
	d.cfg, d.services = cfg, services
	d.mu.Unlock()
	for _, l := range [][]string{res.ServicesAdded, res.ServicesRemoved, res.ServicesRestarted,
		res.PoolsAdded, res.PoolsRemoved, res.PoolsRestarted, res.PoolsUnchanged, res.ServicesResized, res.PoolsResized} {
		slices.Sort(l)
	}
	if len(failed) > 0 {
		slices.SortFunc(failed, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return res, fmt.Errorf("%w: %w", admin.ErrReloadFailed, errors.Join(failed...))
	}
	return res, nil
}

// inForce is cfg as far as it was applied: only the services that run,
// each with the pools it runs (its config in force). A reload after a
// failed one then finds what did not start new, and tries it again.
func inForce(cfg *config.Config, services []*service) *config.Config {
	c := *cfg
	c.Services = nil
	for _, s := range services {
		c.Services = append(c.Services, s.config())
	}
	return &c
}

// detach is the first half of a reload's pool plan for a service that
// stays: the pools removed and changed drain and stop. The others are not
// touched.
func (s *service) detach(p *poolPlan) {
	s.mu.Lock()
	var stopping []*servicePool
	keep := s.pools[:0:0]
	for _, sp := range s.pools {
		if slices.Contains(p.remove, sp.cfg.Name) || slices.ContainsFunc(p.restart, func(pc config.PoolConfig) bool { return pc.Name == sp.cfg.Name }) {
			stopping = append(stopping, sp)
			continue
		}
		keep = append(keep, sp)
	}
	s.pools = keep
	s.mu.Unlock()
	var stoppers []startstop.Stopper
	for _, sp := range stopping {
		stoppers = append(stoppers, sp.pool)
	}
	startstop.StopAllParallel(stoppers...)
	for _, sp := range stopping {
		sp.consume.Close()
		s.d.testSignals.PoolStopped.Signal(sp.cfg.Name)
	}
}

// attach is the second half, once every service's detach is done: the
// pools resized in place take their new concurrency and limits, and the
// new and changed pools start (once the service is up; before, its bring-up
// starts them). It returns the pools that could not be built, by name, and
// the pools resized.
func (s *service) attach(ctx context.Context, sc config.ServiceConfig, reg *consumer.Registry, p *poolPlan) (map[string]error, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setConfig(sc, reg)
	resized := s.resizePoolsLocked(ctx, p) // resize.go
	var started []*servicePool
	notStarted := map[string]error{}
	for _, pc := range append(slices.Clone(p.add), p.restart...) {
		sp, err := s.newPool(pc)
		if err != nil {
			s.d.log.ErrorContext(ctx, "daemon: reload: pool not started", slog.String("pool", pc.Name), slog.Any("error", err))
			notStarted[pc.Name] = fmt.Errorf("pool %s not started: %w", pc.Name, err)
			continue
		}
		started = append(started, sp)
	}
	if len(notStarted) > 0 {
		// Not in force: the next reload finds them new and tries again.
		sc.Pools = slices.DeleteFunc(slices.Clone(sc.Pools), func(pc config.PoolConfig) bool { return notStarted[pc.Name] != nil })
		s.setConfig(sc, reg)
	}
	// Keep the config's order.
	all := append(s.pools, started...)
	order := make(map[string]int, len(sc.Pools))
	for i, pc := range sc.Pools {
		order[pc.Name] = i
	}
	slices.SortFunc(all, func(a, b *servicePool) int { return order[a.cfg.Name] - order[b.cfg.Name] })
	s.pools = all
	if !s.up.Load() {
		return notStarted, resized // the bring-up starts every pool of s.pools
	}
	for _, sp := range started {
		// Bounded as at start: s.mu is held, and admin calls wait on it.
		dctx, cancel := context.WithTimeout(ctx, declareTimeout)
		err := sp.pool.DeclareTopology(dctx)
		cancel()
		if err != nil {
			s.d.log.WarnContext(ctx, "daemon: declare topology failed; workers will retry", slog.String("pool", sp.cfg.Name), slog.Any("error", err))
		}
		s.applyStoredLimits(ctx, sp) // limits.go
		_ = sp.pool.Start(ctx)
		s.d.testSignals.PoolStarted.Signal(sp.cfg.Name)
	}
	return notStarted, resized
}

// auditReload records an applied reload in every service's database.
func (d *Daemon) auditReload(ctx context.Context, actor string, res admin.ReloadResult) {
	detail := map[string]any{
		"services_added": res.ServicesAdded, "services_removed": res.ServicesRemoved,
		"services_restarted": res.ServicesRestarted, "pools_added": res.PoolsAdded,
		"pools_removed": res.PoolsRemoved, "pools_restarted": res.PoolsRestarted,
		"services_resized": res.ServicesResized, "pools_resized": res.PoolsResized,
	}
	for _, s := range d.serviceList() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		err := state.AppendAudit(actx, s.db, actor, state.AuditConfigReload, s.name, detail)
		cancel()
		if err != nil {
			d.log.WarnContext(ctx, "daemon: reload not audited in the service's database", slog.String("service", s.name), slog.Any("error", err))
		}
	}
}
