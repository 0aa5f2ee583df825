package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/workers"
)

// Live limits (docs/operations.md, "Limits"): the kill switch and a pool's
// limits, stored in the service database, announced by NOTIFY and applied by every
// daemon running the service; a pool's rate is shared out by the daemons
// whose heartbeat on the pool is recent.

// LimitsHeartbeatDefault is how often a daemon records that it runs each
// of a service's pools and recounts the daemons running them (a pool's
// share of the rate follows within state.MemberTTL of a daemon leaving
// without a word).
const LimitsHeartbeatDefault = time.Second

// limitsReadEvery is how many heartbeats pass between two reads of the
// stored limits without a notification (a safety net under NOTIFY).
const limitsReadEvery = 5

// watchLimits runs the service's pool membership heartbeat, and re-reads
// the stored limits now and then, until ctx ends; then leaves every pool.
func (s *service) watchLimits(ctx context.Context) {
	member := s.memberName()
	n := 0
	startstop.Tick(ctx, LimitsHeartbeatDefault, func(ctx context.Context) {
		if !s.up.Load() {
			return
		}
		n++
		_ = s.ctl.Do(ctx, func(ctx context.Context, q query.Querier) error {
			if err := s.heartbeatPools(ctx, q); err != nil {
				return err
			}
			if n%limitsReadEvery == 0 {
				s.refreshLimitsOn(ctx, q, "")
			}
			return nil
		})
	})
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, p := range s.workerPools() {
		_ = state.LeavePool(lctx, s.db, p.Name(), member)
	}
}

// memberName is this start's membership of the service's pools, unique to
// it (the random part of lease.DefaultHolder).
func (s *service) memberName() string {
	s.memberOnce.Do(func() { s.member = lease.DefaultHolder() })
	return s.member
}

// heartbeatPools records that this daemon runs each of the service's
// pools and gives each its count of members (its share of the rate).
func (s *service) heartbeatPools(ctx context.Context, q query.Querier) error {
	member := s.memberName()
	for _, p := range s.workerPools() {
		members, err := state.HeartbeatPoolMember(ctx, q, p.Name(), member)
		if err != nil {
			return err
		}
		p.SetMembers(members)
	}
	return nil
}

// refreshLimitsOn reads the stored limits of pool (every pool when "")
// and applies them, the config's where none are stored.
func (s *service) refreshLimitsOn(ctx context.Context, q query.Querier, pool string) {
	for _, p := range s.workerPools() {
		if pool != "" && pool != p.Name() {
			continue
		}
		l, err := s.limitsOf(ctx, q, p)
		if err != nil {
			if ctx.Err() == nil {
				s.d.log.WarnContext(ctx, "daemon: read pool limits", slog.String("pool", p.Name()), slog.Any("error", err))
			}
			continue
		}
		applyLimits(p, l) //nolint:contextcheck // new workers run under the pool's own context, not this call's
	}
}

// applyLimits sets p's rate, burst and concurrency to l.
func applyLimits(p *workers.Pool, l admin.PoolLimitsInfo) {
	p.SetLimits(l.Rate, l.Burst)
	p.SetConcurrency(l.Concurrency)
}

// limitsOf returns p's limits in force: stored, else its config's.
func (s *service) limitsOf(ctx context.Context, q query.Querier, p *workers.Pool) (admin.PoolLimitsInfo, error) {
	pc, _ := s.poolConfig(p.Name())
	pc.Name = p.Name()
	return limitsIn(ctx, q, pc)
}

// limitsIn returns the limits in force of the pool configured as pc.
func limitsIn(ctx context.Context, q query.Querier, pc config.PoolConfig) (admin.PoolLimitsInfo, error) {
	out := admin.PoolLimitsInfo{Pool: pc.Name, Rate: pc.Limits.Rate, Burst: pc.Limits.Burst, Concurrency: pc.Concurrency}
	st, found, err := state.GetPoolLimits(ctx, q, pc.Name)
	if err != nil {
		return out, err
	}
	if found {
		out.Rate, out.Burst, out.Reason, out.UpdatedAt, out.UpdatedBy = st.Rate, st.Burst, st.Reason, st.UpdatedAt, st.UpdatedBy
		if st.Concurrency > 0 {
			out.Concurrency = st.Concurrency
		}
	}
	return out, nil
}

// limitsReadTimeout bounds reading a pool's stored limits as a reload
// starts it (the service's lock is held meanwhile).
const limitsReadTimeout = 2 * time.Second

// applyStoredLimits applies the stored limits of sp before it starts (a
// reload), so that it starts with them rather than its config's until the
// next read; a database that does not answer leaves the config's.
func (s *service) applyStoredLimits(ctx context.Context, sp *servicePool) {
	rctx, cancel := context.WithTimeout(ctx, limitsReadTimeout)
	defer cancel()
	if l, err := limitsIn(rctx, s.db, sp.cfg); err == nil {
		applyLimits(sp.pool, l) //nolint:contextcheck // new workers run under the pool's own context
	}
}

// poolConfig returns the config of the service's pool called name.
func (s *service) poolConfig(name string) (config.PoolConfig, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sp := range s.pools {
		if sp.cfg.Name == name {
			return sp.cfg, true
		}
	}
	return config.PoolConfig{}, false
}

// subscribeLimits applies limits announced by any daemon sharing the
// service database.
func (s *service) subscribeLimits() {
	s.ctl.Subscribe(state.ChannelLimits, func(ctx context.Context, q query.Querier, payload string) {
		if !s.up.Load() {
			return
		}
		s.refreshLimitsOn(ctx, q, payload)
	})
}

// SetPoolLimits implements admin.Backend.
func (b *backend) SetPoolLimits(ctx context.Context, req admin.PoolLimitsRequest, actor string) (admin.PoolLimitsInfo, error) {
	p, s, err := b.pool(req.Pool)
	if err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	if _, err := state.SetPoolLimits(ctx, s.db, state.PoolLimits{
		Pool: req.Pool, Rate: req.Rate, Burst: req.Burst, Concurrency: req.Concurrency, Reason: req.Reason, UpdatedBy: actor,
	}); err != nil {
		return admin.PoolLimitsInfo{}, unavailable(err)
	}
	l, err := s.limitsOf(ctx, s.db, p)
	if err != nil {
		return l, unavailable(err)
	}
	applyLimits(p, l) //nolint:contextcheck // here at once, the others on the NOTIFY; new workers run under the pool's context
	return l, nil
}

// GetPoolLimits implements admin.Backend.
func (b *backend) GetPoolLimits(ctx context.Context, pool string) (admin.PoolLimitsInfo, error) {
	p, s, err := b.pool(pool)
	if err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	l, err := s.limitsOf(ctx, s.db, p)
	return l, unavailable(err)
}

// PauseAll implements admin.Backend.
func (b *backend) PauseAll(ctx context.Context, service, reason, actor string) ([]admin.ServicePause, error) {
	return b.turnKillSwitch(ctx, service, true, reason, actor)
}

// ResumeAll implements admin.Backend.
func (b *backend) ResumeAll(ctx context.Context, service, actor string) ([]admin.ServicePause, error) {
	return b.turnKillSwitch(ctx, service, false, "", actor)
}

// turnKillSwitch stores the kill switch of every service named (every one
// for ""), applies it to the service's pools here at once (the other
// daemons on the NOTIFY) and, for a pause, waits a bounded time for their
// in-flight work to settle. A service whose database is away does not stop
// the others: its error is returned once they are done.
func (b *backend) turnKillSwitch(ctx context.Context, name string, paused bool, reason, actor string) ([]admin.ServicePause, error) {
	svcs, err := b.services(name)
	if err != nil {
		return nil, err
	}
	var errs []error
	out := make([]admin.ServicePause, 0, len(svcs))
	for _, s := range svcs {
		sp, err := state.SetServicePaused(ctx, s.db, s.name, paused, reason, actor)
		if err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", s.name, err))
			continue
		}
		out = append(out, servicePause(sp))
		for _, p := range s.workerPools() {
			_ = p.Refresh(ctx)
		}
	}
	if paused {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, s := range svcs {
			for _, p := range s.workerPools() {
				_, _ = p.WaitQuiesced(wctx)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, unavailable(err)
	}
	return out, nil
}

// KillSwitches implements admin.Backend.
func (b *backend) KillSwitches(ctx context.Context) ([]admin.ServicePause, error) {
	var out []admin.ServicePause
	for _, s := range b.d.serviceList() {
		var sp state.ServicePause
		err := s.ctl.Do(ctx, func(ctx context.Context, q query.Querier) error {
			var err error
			sp, err = state.GetServicePause(ctx, q, s.name)
			return err
		})
		if err == nil && sp.Paused {
			out = append(out, servicePause(sp))
		}
	}
	return out, nil
}

func servicePause(sp state.ServicePause) admin.ServicePause {
	return admin.ServicePause{Service: sp.Service, Paused: sp.Paused, Reason: sp.Reason, UpdatedAt: sp.UpdatedAt, UpdatedBy: sp.UpdatedBy}
}
