package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/workers"
)

// backend implements admin.Backend over the running daemon.
type backend struct{ d *Daemon }

var _ admin.Backend = (*backend)(nil)

func (b *backend) service(name string) (*service, error) {
	for _, s := range b.d.serviceList() {
		if s.name == name {
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: service %q", admin.ErrNotFound, name)
}

// services returns the service named name, or every service when name is
// "": the admin calls that take an optional service filter.
func (b *backend) services(name string) ([]*service, error) {
	if name == "" {
		return b.d.serviceList(), nil
	}
	s, err := b.service(name)
	if err != nil {
		return nil, err
	}
	return []*service{s}, nil
}

func (b *backend) pool(name string) (*workers.Pool, *service, error) {
	for _, s := range b.d.serviceList() {
		if p, ok := s.pool(name); ok {
			return p, s, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: pool %q", admin.ErrNotFound, name)
}

// unavailable marks database errors as Unavailable for the client.
func unavailable(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", admin.ErrUnavailable, err)
}

func (b *backend) ListServices(ctx context.Context) ([]admin.ServiceInfo, error) {
	svcs := b.d.serviceList()
	out := make([]admin.ServiceInfo, 0, len(svcs))
	for _, s := range svcs {
		info, err := serviceInfo(ctx, s)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// One service's database being away does not hide the others:
			// it is listed with its config's figures and the error.
			c := s.config()
			info = admin.ServiceInfo{Name: s.name, Horizon: c.Horizon, MinHorizon: c.MinHorizon,
				BeyondHorizon: c.BeyondHorizon, Error: err.Error()}
		}
		if info.Error == "" && !s.up.Load() {
			// Read, yet not up: why it is not (a migration refused, a
			// database that refused its connections a moment ago).
			if derr := s.downError(); derr != nil {
				info.Error = "not up: " + derr.Error()
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// serviceInfo reads a service's figures from its database.
func serviceInfo(ctx context.Context, s *service) (admin.ServiceInfo, error) {
	h, err := s.storedHorizon(ctx)
	if err != nil {
		return admin.ServiceInfo{}, err
	}
	c := s.config()
	info := admin.ServiceInfo{Name: s.name, Horizon: h.Horizon, MinHorizon: c.MinHorizon, BeyondHorizon: c.BeyondHorizon}
	last, ok, err := state.LastPurge(ctx, s.db, s.name)
	if err != nil {
		return admin.ServiceInfo{}, err
	}
	if ok {
		info.LastPurge = last.FinishedAt
	}
	if info.OutboxPending, info.OutboxOldest, err = outbox.Stats(ctx, s.db); err != nil {
		return admin.ServiceInfo{}, err
	}
	return info, nil
}

func poolInfo(i workers.Info) admin.PoolInfo {
	return admin.PoolInfo{
		Name: i.Name, Service: i.Service, Queue: i.Queue, State: i.State, PausedReason: i.PausedReason,
		Concurrency: i.Concurrency, InFlight: i.InFlight,
		Processed: i.Processed, Duplicates: i.Duplicates, Retried: i.Retried, Failed: i.Failed, Error: i.Error,
		BrokerNode: i.Node, RateLimit: i.RateLimit, RateShare: i.RateShare, Daemons: i.Members,
		DuplicatesBySource: admin.DuplicateCounts{
			Redelivery: i.DuplicatesBySource.Redelivery, Replay: i.DuplicatesBySource.Replay, Republish: i.DuplicatesBySource.Republish,
		},
	}
}

func (b *backend) ListPools(_ context.Context, serviceName string) ([]admin.PoolInfo, error) {
	svcs, err := b.services(serviceName)
	if err != nil {
		return nil, err
	}
	var out []admin.PoolInfo
	for _, s := range svcs {
		// A service not brought up yet (its migrations wait for its
		// database) has not started its pools: they are connecting, with
		// the service's error.
		why := s.downError()
		waiting := !s.up.Load() && why != nil
		for _, p := range s.workerPools() {
			info := poolInfo(p.Info())
			if waiting {
				info.State, info.Error = admin.PoolStateConnecting, why.Error()
			}
			out = append(out, info)
		}
	}
	return out, nil
}

func (b *backend) PausePool(ctx context.Context, name, reason, actor string) (admin.PoolInfo, error) {
	p, _, err := b.pool(name)
	if err != nil {
		return admin.PoolInfo{}, err
	}
	// Wait a bounded time for in-flight batches; the pause holds anyway.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := p.Pause(wctx, reason, actor)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return poolInfo(info), unavailable(err)
	}
	return poolInfo(p.Info()), nil
}

func (b *backend) ResumePool(ctx context.Context, name, actor string) (admin.PoolInfo, error) {
	p, _, err := b.pool(name)
	if err != nil {
		return admin.PoolInfo{}, err
	}
	info, err := p.Resume(ctx, actor)
	return poolInfo(info), unavailable(err)
}

func (b *backend) LookupEvent(ctx context.Context, id uuid.UUID, serviceName string) ([]admin.LookupResult, error) {
	svcs, err := b.services(serviceName)
	if err != nil {
		return nil, err
	}
	out := make([]admin.LookupResult, 0, len(svcs))
	for _, s := range svcs {
		r := admin.LookupResult{Service: s.name}
		at, err := dedup.Lookup(ctx, s.db, id)
		switch {
		case errors.Is(err, dedup.ErrNotFound):
		case err != nil:
			return nil, unavailable(err)
		default:
			h, err := s.storedHorizon(ctx)
			if err != nil {
				return nil, unavailable(err)
			}
			r.Processed, r.ProcessedAt, r.PurgeableAt = true, at, purgeableAt(ctx, s.db, id, at, h.Horizon)
		}
		out = append(out, r)
	}
	return out, nil
}

func horizonInfo(h state.Horizon) admin.HorizonInfo {
	return admin.HorizonInfo{Service: h.Service, Horizon: h.Horizon, MinHorizon: h.MinHorizon, UpdatedAt: h.UpdatedAt, UpdatedBy: h.UpdatedBy}
}

func (b *backend) GetHorizon(ctx context.Context, name string) (admin.HorizonInfo, error) {
	s, err := b.service(name)
	if err != nil {
		return admin.HorizonInfo{}, err
	}
	h, err := s.storedHorizon(ctx)
	return processedEventHorizon(ctx, s.db, horizonInfo(h)), unavailable(err)
}

func (b *backend) SetHorizon(ctx context.Context, name string, horizon time.Duration, force bool, actor string) (admin.HorizonInfo, error) {
	s, err := b.service(name)
	if err != nil {
		return admin.HorizonInfo{}, err
	}
	c := s.config()
	// A horizon shorter than a retry span would let a retried copy outlive
	// its processed_event row: refuse it even with force.
	for _, p := range c.Pools {
		if span := p.RetrySpan(); horizon <= span {
			return admin.HorizonInfo{}, fmt.Errorf("%w: horizon %s is not longer than pool %s's retry span %s",
				admin.ErrBelowMinHorizon, horizon, p.Name, span)
		}
	}
	detail, err := s.checkDuplicateAge(ctx, horizon, force)
	if err != nil {
		return admin.HorizonInfo{}, err
	}
	h, err := state.SetHorizonAudited(ctx, s.db, s.name, horizon, c.MinHorizon, force, actor, detail)
	switch {
	case errors.Is(err, state.ErrBelowMinHorizon):
		return admin.HorizonInfo{}, fmt.Errorf("%w: %s is under %s's min_horizon %s; use force to go lower",
			admin.ErrBelowMinHorizon, horizon, name, c.MinHorizon)
	case errors.Is(err, state.ErrInvalidHorizon):
		return admin.HorizonInfo{}, fmt.Errorf("%w: %w", admin.ErrInvalidArgument, err)
	case err != nil:
		return admin.HorizonInfo{}, unavailable(err)
	}
	s.horizon.refresh(ctx)
	return horizonInfo(h), nil
}

func purgeRun(r state.PurgeRun) admin.PurgeRun {
	return admin.PurgeRun{Service: r.Service, Cutoff: r.Cutoff, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		Deleted: r.Deleted, DryRun: r.DryRun, Trigger: r.Trigger, Error: r.Error}
}

func (b *backend) RunPurge(ctx context.Context, name string, dryRun bool, actor string) (admin.PurgeRun, error) {
	s, err := b.service(name)
	if err != nil {
		return admin.PurgeRun{}, err
	}
	sched := s.scheduler()
	if sched == nil {
		return admin.PurgeRun{}, fmt.Errorf("%w: service %s is not up yet: %w", admin.ErrUnavailable, name, s.downError())
	}
	r, err := sched.RunNow(ctx, name, dryRun, actor) // the service's own scheduler: it knows name
	b.auditPurge(ctx, s, dryRun, actor, r, err)
	var held *scheduler.PurgeInProgressError
	switch {
	case errors.As(err, &held):
		return admin.PurgeRun{}, fmt.Errorf("%w: %s", admin.ErrUnavailable, held.Reason())
	case err != nil:
		return purgeRun(r), unavailable(err)
	}
	return purgeRun(r), nil
}

func (b *backend) ListPurgeRuns(ctx context.Context, name string, limit int) ([]admin.PurgeRun, error) {
	s, err := b.service(name)
	if err != nil {
		return nil, err
	}
	runs, err := state.ListPurgeRuns(ctx, s.db, name, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]admin.PurgeRun, len(runs))
	for i, r := range runs {
		out[i] = purgeRun(r)
	}
	return out, nil
}

// ReloadConfig reloads the daemon's config (see Daemon.Reload).
func (b *backend) ReloadConfig(ctx context.Context, actor string) (admin.ReloadResult, error) {
	return b.d.Reload(ctx, actor)
}
