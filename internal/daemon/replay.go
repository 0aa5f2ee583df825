package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/replay"
	"github.com/platformd/platformd/internal/state"
)

// startReplayer starts the service's replay runner when its outbox is
// archived.
func (s *service) startReplayer(ctx context.Context) error {
	if s.config().Outbox.Archive <= 0 {
		return nil
	}
	d := s.d
	r, err := replay.NewRunner(replay.RunnerConfig{
		Service: s.name, DB: s.db, Broker: d.outboxConn, Exchange: d.cfg.Broker.Exchange, Archive: s.config().Outbox.Archive,
		TargetsFunc: d.replayTargets, MaxBodyBytes: d.cfg.Broker.MaxBodyBytes, ControlFunc: s.control,
		Published: d.metrics.Outbox.ReplayPublished, Logger: d.log,
	})
	if err != nil {
		return err
	}
	return startKept(ctx, s, &s.replayer, r)
}

// target returns a pool of s as a replay target.
func (s *service) target(sp *servicePool) replay.Target {
	c := s.config()
	return replay.Target{
		Pool: sp.cfg.Name, Service: s.name, Queue: sp.cfg.Queue, Bindings: sp.cfg.Bindings, DB: s.db,
		Horizon: s.horizon.get(), Quarantine: c.BeyondHorizon == config.BeyondHorizonQuarantine,
	}
}

// allTargets returns every hosted pool as a replay target; with pool set,
// that pool only (ErrNotFound naming target_pool when unknown).
func (d *Daemon) allTargets(pool string) ([]replay.Target, error) {
	var out []replay.Target
	for _, s := range d.serviceList() {
		s.mu.RLock()
		for _, sp := range s.pools {
			if pool == "" || sp.cfg.Name == pool {
				out = append(out, s.target(sp))
			}
		}
		s.mu.RUnlock()
	}
	if pool != "" && len(out) == 0 {
		return nil, fmt.Errorf("%w: target_pool: unknown pool %q", admin.ErrNotFound, pool)
	}
	return out, nil
}

// replayTargets is the runners' TargetsFunc: the replay's pools as they
// are now (horizon in force, queue).
func (d *Daemon) replayTargets(r replay.Record) ([]replay.Target, error) {
	all, err := d.allTargets(r.TargetPool)
	if err != nil {
		return nil, err
	}
	var out []replay.Target
	for _, t := range all {
		for _, p := range r.Pools {
			if p.Pool == t.Pool {
				out = append(out, t)
				break
			}
		}
	}
	return out, nil
}

// producer returns the service whose archive a replay reads.
func (b *backend) producer(name string) (*service, error) {
	s, err := b.service(name)
	if err != nil {
		return nil, err
	}
	if s.config().Outbox.Archive <= 0 {
		return nil, fmt.Errorf("%w: service %q keeps no archive (set services[].outbox.archive)", admin.ErrFailedPrecondition, name)
	}
	return s, nil
}

// ReplayEvents counts what a replay would do per target pool and, unless
// a dry run, stores it for the service's runner.
func (b *backend) ReplayEvents(ctx context.Context, req admin.ReplayRequest, actor string) (admin.ReplayInfo, error) {
	s, err := b.producer(req.Service)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	sel := replay.Selection{EventNames: req.EventNames, From: req.From, To: req.To, EventIDs: req.EventIDs}
	if err := sel.Check(); err != nil {
		return admin.ReplayInfo{}, fmt.Errorf("%w: %w", admin.ErrInvalidArgument, err)
	}
	all, err := b.d.allTargets(req.TargetPool)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	items, perName, err := replay.Select(ctx, s.db, sel, s.config().Outbox.Archive)
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	for i, n := range perName {
		if n == 0 {
			return admin.ReplayInfo{}, fmt.Errorf("%w: event_names[%d]: no archived event of the selection matches %q",
				admin.ErrNotFound, i, req.EventNames[i])
		}
	}
	targeted := req.TargetPool != ""
	targets := all
	if !targeted {
		targets = replay.Targets(items, all)
	}
	counts, err := replay.DryRun(ctx, items, targets, targeted, time.Now())
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	rec := replay.Record{
		State: replay.StateDryRun, Selection: sel, TargetPool: req.TargetPool, IncludeBeyondHorizon: req.IncludeBeyondHorizon,
		Rate: req.Rate, Matched: int64(len(items)), Pools: counts, CreatedBy: actor,
	}
	if req.DryRun {
		return replayInfo(s.name, rec), nil
	}
	if len(items) == 0 {
		return admin.ReplayInfo{}, fmt.Errorf("%w: the selection matched no archived event: nothing to replay", admin.ErrFailedPrecondition)
	}
	if rec.ID, err = uuid.NewV7(); err != nil {
		return admin.ReplayInfo{}, fmt.Errorf("replay id: %w", err)
	}
	detail := map[string]any{
		"replay": rec.ID.String(), "matched": rec.Matched, "target_pool": req.TargetPool, "rate": req.Rate,
		"event_names": anyStrings(req.EventNames), "event_ids_count": len(req.EventIDs),
		"include_beyond_horizon": req.IncludeBeyondHorizon,
	}
	if !req.From.IsZero() {
		detail["from"] = req.From.UTC().Format(time.RFC3339Nano)
	}
	if !req.To.IsZero() {
		detail["to"] = req.To.UTC().Format(time.RFC3339Nano)
	}
	err = dbutil.WithTx(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if err := replay.Create(ctx, tx, rec); err != nil {
			return err
		}
		return state.AppendAudit(ctx, tx, actor, state.AuditReplayStart, s.name, detail)
	})
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	if r := s.runner(); r != nil {
		r.Wake()
	}
	stored, err := replay.Get(ctx, s.db, rec.ID)
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	return replayInfo(s.name, stored), nil
}

// runner returns the service's replay runner, nil when none runs.
func (s *service) runner() *replay.Runner {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.replayer
}

func anyStrings(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// GetReplay reads one replay of a producer.
func (b *backend) GetReplay(ctx context.Context, service string, id uuid.UUID) (admin.ReplayInfo, error) {
	s, err := b.producer(service)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	r, err := replay.Get(ctx, s.db, id)
	if errors.Is(err, replay.ErrNotFound) {
		return admin.ReplayInfo{}, fmt.Errorf("%w: replay %s of service %q", admin.ErrNotFound, id, service)
	}
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	return replayInfo(service, r), nil
}

// ListReplays lists a producer's newest replays.
func (b *backend) ListReplays(ctx context.Context, service string, limit int) ([]admin.ReplayInfo, error) {
	s, err := b.producer(service)
	if err != nil {
		return nil, err
	}
	list, err := replay.List(ctx, s.db, limit)
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]admin.ReplayInfo, 0, len(list))
	for _, r := range list {
		out = append(out, replayInfo(service, r))
	}
	return out, nil
}

// CancelReplay cancels a running replay (its runner stops after the chunk
// in flight) and audits it.
func (b *backend) CancelReplay(ctx context.Context, service string, id uuid.UUID, actor string) (admin.ReplayInfo, error) {
	s, err := b.producer(service)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	err = dbutil.WithTx(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		r, err := replay.Get(ctx, tx, id)
		if err != nil {
			return err
		}
		was, err := replay.Cancel(ctx, tx, id, actor)
		if err != nil || !was {
			return err
		}
		return state.AppendAudit(ctx, tx, actor, state.AuditReplayCancel, s.name,
			map[string]any{"replay": id.String(), "published": r.Published, "was_running": was})
	})
	if errors.Is(err, replay.ErrNotFound) {
		return admin.ReplayInfo{}, fmt.Errorf("%w: replay %s of service %q", admin.ErrNotFound, id, service)
	}
	if err != nil {
		return admin.ReplayInfo{}, unavailable(err)
	}
	return b.GetReplay(ctx, service, id)
}

// replayInfo converts a record for the admin API.
func replayInfo(service string, r replay.Record) admin.ReplayInfo {
	info := admin.ReplayInfo{
		State: r.State, Service: service, Matched: r.Matched, Published: r.Published, TargetPool: r.TargetPool,
		Rate: r.Rate, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, CreatedBy: r.CreatedBy, Error: r.Error,
		EventNames: r.Selection.EventNames, From: r.Selection.From, To: r.Selection.To,
		EventIDsCount: len(r.Selection.EventIDs), IncludeBeyondHorizon: r.IncludeBeyondHorizon,
	}
	if r.ID != uuid.Nil {
		info.ID = r.ID.String()
	}
	for _, p := range r.Pools {
		info.Pools = append(info.Pools, admin.ReplayPoolInfo{
			Pool: p.Pool, Service: p.Service, WouldApply: p.WouldApply, AlreadyProcessed: p.AlreadyProcessed,
			BeyondHorizon: p.BeyondHorizon, PublishedCopies: p.Published,
		})
	}
	return info
}
