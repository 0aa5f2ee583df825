package admintest

import (
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/replay"
)

// ReplayPools is the per-pool table every ReplayEvents of the fake
// answers: 10 matched events, 7 to apply in stock, 3 already processed.
var ReplayPools = []admin.ReplayPoolInfo{
	{Pool: "shipping-events", Service: "shipping", WouldApply: 0, AlreadyProcessed: 4, BeyondHorizon: 6},
	{Pool: "stock-events", Service: "stock", WouldApply: 7, AlreadyProcessed: 3},
}

// ReplayEvents implements admin.Backend: a dry run answers ReplayPools; a
// real replay is recorded (running, nothing published) and audited.
func (b *Backend) ReplayEvents(ctx context.Context, req admin.ReplayRequest, actor string) (admin.ReplayInfo, error) {
	if err := b.begin(ctx, Call{Method: "ReplayEvents", Actor: actor, Service: req.Service, Pool: req.TargetPool, IDs: req.EventIDs, DryRun: req.DryRun}); err != nil {
		return admin.ReplayInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.service(req.Service); err != nil {
		return admin.ReplayInfo{}, err
	}
	pools := slices.Clone(ReplayPools)
	if req.TargetPool != "" {
		if _, err := b.pool(req.TargetPool); err != nil {
			return admin.ReplayInfo{}, fmt.Errorf("target_pool: %w", err)
		}
		pools = slices.DeleteFunc(pools, func(p admin.ReplayPoolInfo) bool { return p.Pool != req.TargetPool })
	}
	info := admin.ReplayInfo{
		State: replay.StateDryRun, Service: req.Service, Matched: 10, Pools: pools, TargetPool: req.TargetPool,
		Rate: req.Rate, EventNames: req.EventNames, From: req.From, To: req.To, EventIDsCount: len(req.EventIDs),
		IncludeBeyondHorizon: req.IncludeBeyondHorizon,
	}
	if req.DryRun {
		return info, nil
	}
	info.ID = uuid.NewString()
	info.State = replay.StateRunning
	info.CreatedAt = Now
	info.CreatedBy = actor
	b.replays = append(b.replays, info)
	b.record(req.Service, actor, "replay.start", req.Service, map[string]any{"replay": info.ID, "matched": info.Matched})
	return info, nil
}

// replay returns the index of a stored replay; b.mu must be held.
func (b *Backend) replay(service string, id uuid.UUID) (int, error) {
	i := slices.IndexFunc(b.replays, func(r admin.ReplayInfo) bool { return r.Service == service && r.ID == id.String() })
	if i < 0 {
		return 0, fmt.Errorf("replay %s: %w", id, admin.ErrNotFound)
	}
	return i, nil
}

// GetReplay implements admin.Backend.
func (b *Backend) GetReplay(ctx context.Context, service string, id uuid.UUID) (admin.ReplayInfo, error) {
	if err := b.begin(ctx, Call{Method: "GetReplay", Service: service, ID: id}); err != nil {
		return admin.ReplayInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.replay(service, id)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	return b.replays[i], nil
}

// ListReplays implements admin.Backend, newest first.
func (b *Backend) ListReplays(ctx context.Context, service string, limit int) ([]admin.ReplayInfo, error) {
	if err := b.begin(ctx, Call{Method: "ListReplays", Service: service, Limit: limit}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.service(service); err != nil {
		return nil, err
	}
	var out []admin.ReplayInfo
	for i := len(b.replays) - 1; i >= 0 && len(out) < limit; i-- {
		if b.replays[i].Service == service {
			out = append(out, b.replays[i])
		}
	}
	return out, nil
}

// CancelReplay implements admin.Backend.
func (b *Backend) CancelReplay(ctx context.Context, service string, id uuid.UUID, actor string) (admin.ReplayInfo, error) {
	if err := b.begin(ctx, Call{Method: "CancelReplay", Actor: actor, Service: service, ID: id}); err != nil {
		return admin.ReplayInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.replay(service, id)
	if err != nil {
		return admin.ReplayInfo{}, err
	}
	if b.replays[i].State == replay.StateRunning {
		b.replays[i].State = replay.StateCancelled
		b.replays[i].FinishedAt = Now
		b.record(service, actor, "replay.cancel", service, map[string]any{"replay": id.String()})
	}
	return b.replays[i], nil
}
