package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/workers"
)

// A reload resizes a running service in place (docs/configuration.md,
// "Reload"): a changed database_pool swaps a pool of the new size under
// the service's database handle (package dbpool), and a changed
// concurrency (or limits block) is applied to the running pool as a
// SetPoolLimits would; nothing restarts, no consumer is cancelled.

// registerDB registers pool (the service's database pool in force) for the
// connection budget's reclaim of idle connections, in place of the one
// registered before; nil only unregisters.
func (s *service) registerDB(pool *pgxpool.Pool) {
	s.dbMu.Lock()
	defer s.dbMu.Unlock()
	if s.unregisterDB != nil {
		s.unregisterDB()
		s.unregisterDB = nil
	}
	if pool != nil {
		s.unregisterDB = s.d.budget.Register(pool)
	}
}

// dbPoolChanged reports whether the service's database pool in force is
// not the size sc asks for (max_conns, min_conns, max_idle).
func (s *service) dbPoolChanged(sc config.ServiceConfig) bool {
	want, have := dbPoolSize(sc), s.db.Pool().Config()
	return want.MaxConns != have.MaxConns || want.MinConns != have.MinConns ||
		(want.MaxConnIdleTime > 0 && want.MaxConnIdleTime != have.MaxConnIdleTime)
}

// resizeDB puts a database pool sized by sc in force under the service's
// handle when the one in force is not that size: from then on every part
// of the service acquires from the new pool, and the old one closes as its
// last connections come back (their transactions end on them). It returns
// whether it resized.
func (s *service) resizeDB(ctx context.Context, sc config.ServiceConfig) (bool, error) {
	if !s.dbPoolChanged(sc) {
		return false, nil
	}
	pool, err := s.d.connectService(ctx, sc)
	if err != nil {
		return false, err
	}
	was := s.db.Pool().Config()
	if old := s.db.Replace(pool); old == nil {
		return false, fmt.Errorf("service %s: stopped while its database pool was resized", s.name)
	}
	s.dbMu.Lock()
	if s.unregisterDB != nil { // between the service's Start and Stop
		s.unregisterDB()
		s.unregisterDB = s.d.budget.Register(pool)
	}
	s.dbMu.Unlock()
	s.d.log.InfoContext(ctx, "daemon: service database pool resized in place", slog.String("service", s.name),
		slog.Int("max_conns_was", int(was.MaxConns)), slog.Int("max_conns", int(pool.Config().MaxConns)),
		slog.Int("min_conns", int(pool.Config().MinConns)), slog.Duration("max_idle", pool.Config().MaxConnIdleTime))
	return true, nil
}

// resizable reports whether a running pool configured as was, whose
// workers each consume with prefetch perWorker, can take the config pc in
// place: nothing differs but its concurrency (with the prefetch derived
// from it) and its limits block, and a concurrency change keeps the pool
// within its prefetch bound. A partitioned pool's one reader keeps the
// pool's prefetch (its channel's), so its concurrency changes in place
// when that prefetch stays the same (an explicit one). Running workers keep
// their prefetch (a consumer's cannot change without cancelling it) and
// new ones take the same, so the bound holds when each worker's prefetch
// is the new config's, or when concurrency x perWorker stays within the
// new config's prefetch (max_unacked_bytes: with the defaults, fewer
// workers in place, more through a restart of the pool). maxBody is
// broker.max_body_bytes.
func resizable(was, pc config.PoolConfig, perWorker, maxBody int) bool {
	a, b := was, pc
	a.Concurrency, a.Prefetch, a.Limits = 0, 0, config.PoolLimitsConfig{}
	b.Concurrency, b.Prefetch, b.Limits = 0, 0, config.PoolLimitsConfig{}
	if !reflect.DeepEqual(a, b) {
		return false
	}
	if was.Concurrency == pc.Concurrency {
		return was.Prefetch == pc.Prefetch
	}
	if pc.PartitionKey != "" {
		// One reader consumes for all the workers with the pool's whole
		// prefetch, which it keeps: in place when that stays as it is.
		wasTotal, _ := was.PrefetchFor(maxBody)
		total, _ := pc.PrefetchFor(maxBody)
		return wasTotal == total
	}
	total, _ := pc.PrefetchFor(maxBody)
	return perWorker > 0 && (perWorker == workerPrefetch(pc, maxBody) || perWorker*pc.Concurrency <= max(total, pc.Concurrency))
}

// workerPrefetch is the prefetch of each worker of a pool configured as
// pc (built from it).
func workerPrefetch(pc config.PoolConfig, maxBody int) int {
	prefetch, _ := pc.PrefetchFor(maxBody)
	return workers.WorkerPrefetch(prefetch, pc.Concurrency, pc.Batch.Size)
}

// resizePools applies, in place, the concurrency and limits of the
// running pools that p resizes: each pool's entry takes its new config,
// then its limits in force (stored by an operator, else the new config's)
// are read and applied, as SetPoolLimits applies them. A database that does
// not answer leaves the pool as it runs until the limits watcher's next
// read (within limitsReadEvery heartbeats). s.mu held.
func (s *service) resizePoolsLocked(ctx context.Context, p *poolPlan) []string {
	var resized []string
	for _, pc := range p.resize {
		i := slices.IndexFunc(s.pools, func(sp *servicePool) bool { return sp.cfg.Name == pc.Name })
		if i < 0 {
			continue
		}
		// A new entry rather than a write to the old one: readers that
		// took the old one under the read lock keep a consistent one.
		sp := &servicePool{cfg: pc, pool: s.pools[i].pool, consume: s.pools[i].consume}
		s.pools[i] = sp
		resized = append(resized, pc.Name)
		if !s.up.Load() {
			// Taken at its start, from the config and what is stored.
			sp.pool.SetLimits(pc.Limits.Rate, pc.Limits.Burst)
			sp.pool.SetConcurrency(pc.Concurrency) //nolint:contextcheck // not running: stored for its start
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, limitsReadTimeout)
		l, err := limitsIn(rctx, s.db, pc)
		cancel()
		if err != nil {
			s.d.log.WarnContext(ctx, "daemon: reload: pool limits not read; applied at the next read",
				slog.String("pool", pc.Name), slog.Any("error", err))
			continue
		}
		if l.Concurrency != pc.Concurrency {
			s.d.log.InfoContext(ctx, "daemon: reload: the pool's concurrency set by SetPoolLimits stays in force over the config's",
				slog.String("pool", pc.Name), slog.Int("concurrency", l.Concurrency), slog.Int("config_concurrency", pc.Concurrency))
		}
		applyLimits(sp.pool, l) //nolint:contextcheck // new workers run under the pool's own context
	}
	return resized
}
