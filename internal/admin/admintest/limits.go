package admintest

import (
	"context"
	"sync"

	"github.com/platformd/platformd/internal/admin"
)

// limitsState is the fake's live limits: per pool and the kill switches.
// Kept beside Backend rather than in it, so that its fields stay its own.
type limitsState struct {
	mu       sync.Mutex
	limits   map[string]admin.PoolLimitsInfo // pool -> set limits
	switches map[string]admin.ServicePause   // service -> kill switch
}

// limitsState returns the fake's live limits, made on first use.
func (b *Backend) limitsState() *limitsState {
	st := &b.lim
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.limits == nil {
		st.limits, st.switches = map[string]admin.PoolLimitsInfo{}, map[string]admin.ServicePause{}
	}
	return st
}

// SetPoolLimits implements admin.Backend.
func (b *Backend) SetPoolLimits(ctx context.Context, req admin.PoolLimitsRequest, actor string) (admin.PoolLimitsInfo, error) {
	if err := b.begin(ctx, Call{Method: "SetPoolLimits", Pool: req.Pool, Reason: req.Reason, Actor: actor}); err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	b.mu.Lock()
	i, err := b.pool(req.Pool)
	var conc int
	var service string
	if err == nil {
		conc, service = b.pools[i].Concurrency, b.pools[i].Service
		if req.Concurrency > 0 {
			b.pools[i].Concurrency = req.Concurrency
			conc = req.Concurrency
		}
		b.record(service, actor, "pool.limits", req.Pool, map[string]any{"rate": req.Rate, "burst": req.Burst, "concurrency": conc, "reason": req.Reason})
	}
	b.mu.Unlock()
	if err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	l := admin.PoolLimitsInfo{Pool: req.Pool, Rate: req.Rate, Burst: req.Burst, Concurrency: conc, Reason: req.Reason, UpdatedAt: Now, UpdatedBy: actor}
	st := b.limitsState()
	st.mu.Lock()
	st.limits[req.Pool] = l
	st.mu.Unlock()
	return l, nil
}

// GetPoolLimits implements admin.Backend.
func (b *Backend) GetPoolLimits(ctx context.Context, pool string) (admin.PoolLimitsInfo, error) {
	if err := b.begin(ctx, Call{Method: "GetPoolLimits", Pool: pool}); err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	b.mu.Lock()
	i, err := b.pool(pool)
	var conc int
	if err == nil {
		conc = b.pools[i].Concurrency
	}
	b.mu.Unlock()
	if err != nil {
		return admin.PoolLimitsInfo{}, err
	}
	st := b.limitsState()
	st.mu.Lock()
	defer st.mu.Unlock()
	if l, ok := st.limits[pool]; ok {
		return l, nil
	}
	return admin.PoolLimitsInfo{Pool: pool, Concurrency: conc}, nil
}

// PauseAll implements admin.Backend.
func (b *Backend) PauseAll(ctx context.Context, service, reason, actor string) ([]admin.ServicePause, error) {
	return b.turn(ctx, "PauseAll", service, true, reason, actor)
}

// ResumeAll implements admin.Backend.
func (b *Backend) ResumeAll(ctx context.Context, service, actor string) ([]admin.ServicePause, error) {
	return b.turn(ctx, "ResumeAll", service, false, "", actor)
}

func (b *Backend) turn(ctx context.Context, method, service string, paused bool, reason, actor string) ([]admin.ServicePause, error) {
	if err := b.begin(ctx, Call{Method: method, Service: service, Reason: reason, Actor: actor}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	var names []string
	if service != "" {
		if _, err := b.service(service); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		names = []string{service}
	} else {
		for _, s := range b.services {
			names = append(names, s.Name)
		}
	}
	action := "service.resume"
	if paused {
		action = "service.pause"
	}
	for _, n := range names {
		b.record(n, actor, action, n, map[string]any{"reason": reason})
	}
	b.mu.Unlock()
	st := b.limitsState()
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]admin.ServicePause, 0, len(names))
	for _, n := range names {
		sp := admin.ServicePause{Service: n, Paused: paused, Reason: reason, UpdatedAt: Now, UpdatedBy: actor}
		st.switches[n] = sp
		out = append(out, sp)
	}
	return out, nil
}

// KillSwitches implements admin.Backend.
func (b *Backend) KillSwitches(ctx context.Context) ([]admin.ServicePause, error) {
	if err := b.begin(ctx, Call{Method: "KillSwitches"}); err != nil {
		return nil, err
	}
	st := b.limitsState()
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []admin.ServicePause
	b.mu.Lock()
	for _, s := range b.services {
		if sp, ok := st.switches[s.Name]; ok && sp.Paused {
			out = append(out, sp)
		}
	}
	b.mu.Unlock()
	return out, nil
}
