// Package admintest provides Backend, an in-memory admin.Backend for the
// tests of the admin server and of its clients (platformctl). It records
// every call and lets a test make any method fail, block or panic.
package admintest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/replay"
)

// Fixture values of the Backend returned by New: the example shop.
var (
	// Now is the Backend's fixed clock.
	Now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// StockEventID is an event processed by service stock only.
	StockEventID = uuid.MustParse("0b1d7c52-5a4e-4a8e-9d1f-3c0f9a6b2e11")
	// SharedEventID is an event processed by both services.
	SharedEventID = uuid.MustParse("5f6e2a90-8c3b-4d7e-a1b2-c3d4e5f60718")
	// FailedEventID is the event in stock-events' failure queue.
	FailedEventID = uuid.MustParse("9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d")
	// ReplayID is the fake's finished replay of stock.
	ReplayID = uuid.MustParse("0190b2f4-7c1e-7b3a-9f1d-2c4e6a8b0d1f")
)

// Call is one recorded Backend call with its arguments; fields a method
// does not take are left zero.
type Call struct {
	Method  string
	Actor   string
	Service string
	Pool    string
	Reason  string
	ID      uuid.UUID
	IDs     []uuid.UUID
	All     bool
	Force   bool
	DryRun  bool
	Horizon time.Duration
	Limit   int
	// The failure workbench's arguments.
	Filter    failure.Filter
	GroupBy   []string
	PageToken string
	Retry     failure.RetryRequest
	Parked    failure.Parked
	Payload   []byte
}

// HookFunc runs before a Backend method. A non-nil error is returned by the
// method; a hook may also block (until ctx is done) or panic.
type HookFunc func(ctx context.Context) error

// Backend is an in-memory admin.Backend. It is safe for concurrent use.
type Backend struct {
	mu        sync.Mutex
	services  []admin.ServiceInfo
	updated   map[string]admin.HorizonInfo // service -> last SetHorizon
	pools     []admin.PoolInfo
	processed map[string]map[uuid.UUID]time.Time // service -> id -> processed_at
	runs      map[string][]admin.PurgeRun        // service -> runs, oldest first
	failed    map[string][]admin.FailedMessage   // pool -> messages
	audit     []admin.AuditEntry                 // oldest first
	replays   []admin.ReplayInfo                 // oldest first
	failures  []admin.FailedEvent                // the failure stores, oldest first
	retries   []admin.FailureRetry               // oldest first
	hooks     map[string]HookFunc
	lim       limitsState // limits.go
	calls     []Call
}

// New returns a Backend holding the example shop: services stock and
// shipping, pools stock-events (running) and shipping-events (paused), a
// few processed events, one purge run and one failed message.
func New() *Backend {
	return &Backend{
		services: []admin.ServiceInfo{
			{Name: "shipping", Horizon: 336 * time.Hour, MinHorizon: 24 * time.Hour, BeyondHorizon: "fail"},
			{Name: "stock", Horizon: 336 * time.Hour, MinHorizon: 24 * time.Hour, LastPurge: Now.Add(-time.Hour), BeyondHorizon: "fail",
				OutboxPending: 3, OutboxOldest: 2500 * time.Millisecond},
		},
		updated: map[string]admin.HorizonInfo{},
		pools: []admin.PoolInfo{
			{
				Name: "shipping-events", Service: "shipping", Queue: "shipping.events", State: admin.PoolStatePaused,
				PausedReason: "maintenance", Concurrency: 2, Processed: 7, Duplicates: 1,
			},
			{
				Name: "stock-events", Service: "stock", Queue: "stock.events", State: admin.PoolStateRunning,
				Concurrency: 4, InFlight: 3, Processed: 1200, Duplicates: 12, Retried: 5, Failed: 1,
				BrokerNode: "10.0.0.2:5672", RateLimit: 200, RateShare: 100, Daemons: 2,
			},
		},
		processed: map[string]map[uuid.UUID]time.Time{
			"stock": {
				StockEventID:  Now.Add(-2 * time.Hour),
				SharedEventID: Now.Add(-400 * time.Hour),
			},
			"shipping": {
				SharedEventID: Now.Add(-3 * time.Hour),
			},
		},
		runs: map[string][]admin.PurgeRun{
			"stock": {{
				Service: "stock", Cutoff: Now.Add(-337 * time.Hour), StartedAt: Now.Add(-time.Hour - time.Second),
				FinishedAt: Now.Add(-time.Hour), Deleted: 42, Trigger: "schedule",
			}},
		},
		failed: map[string][]admin.FailedMessage{
			"stock-events": {{
				EventID: FailedEventID.String(), EventName: "order.order.placed.v1", FailureReason: "permanent",
				Error: "stock.reserve: unknown product", Attempt: 1, FailedAt: Now.Add(-30 * time.Minute),
				Pool: "stock-events", RoutingKey: "order.order.placed.v1",
			}},
			"shipping-events": {},
		},
		replays: []admin.ReplayInfo{{
			ID: ReplayID.String(), State: replay.StateDone, Service: "stock", Matched: 10, Published: 10,
			Rate: 500, CreatedAt: Now.Add(-2 * time.Hour), FinishedAt: Now.Add(-2*time.Hour + time.Minute), CreatedBy: "ops",
			TargetPool: "stock-events", EventNames: []string{"order.#"}, From: Now.Add(-26 * time.Hour), To: Now.Add(-24 * time.Hour),
			Pools: []admin.ReplayPoolInfo{{Pool: "stock-events", Service: "stock", WouldApply: 7, AlreadyProcessed: 3, PublishedCopies: 10}},
		}},
		failures: failureFixture(),
		retries:  failureRetryFixture(),
		hooks:    map[string]HookFunc{},
	}
}

// SetHook makes fn run before every call of method (e.g. "PausePool"); nil
// removes it.
func (b *Backend) SetHook(method string, fn HookFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if fn == nil {
		delete(b.hooks, method)
		return
	}
	b.hooks[method] = fn
}

// Calls returns the calls made so far, oldest first.
func (b *Backend) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// CallsTo returns the calls made so far to method, oldest first.
func (b *Backend) CallsTo(method string) []Call {
	var out []Call
	for _, c := range b.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// begin records c and runs its hook, outside the lock.
func (b *Backend) begin(ctx context.Context, c Call) error {
	b.mu.Lock()
	b.calls = append(b.calls, c)
	hook := b.hooks[c.Method]
	b.mu.Unlock()
	if hook != nil {
		return hook(ctx)
	}
	return nil
}

// service returns the index of service; b.mu must be held.
func (b *Backend) service(name string) (int, error) {
	i := slices.IndexFunc(b.services, func(s admin.ServiceInfo) bool { return s.Name == name })
	if i < 0 {
		return 0, fmt.Errorf("service %q: %w", name, admin.ErrNotFound)
	}
	return i, nil
}

// pool returns the index of pool; b.mu must be held.
func (b *Backend) pool(name string) (int, error) {
	i := slices.IndexFunc(b.pools, func(p admin.PoolInfo) bool { return p.Name == name })
	if i < 0 {
		return 0, fmt.Errorf("pool %q: %w", name, admin.ErrNotFound)
	}
	return i, nil
}

// ListServices implements admin.Backend.
func (b *Backend) ListServices(ctx context.Context) ([]admin.ServiceInfo, error) {
	if err := b.begin(ctx, Call{Method: "ListServices"}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.services), nil
}

// ListPools implements admin.Backend.
func (b *Backend) ListPools(ctx context.Context, service string) ([]admin.PoolInfo, error) {
	if err := b.begin(ctx, Call{Method: "ListPools", Service: service}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if service == "" {
		return slices.Clone(b.pools), nil
	}
	if _, err := b.service(service); err != nil {
		return nil, err
	}
	var out []admin.PoolInfo
	for _, p := range b.pools {
		if p.Service == service {
			out = append(out, p)
		}
	}
	return out, nil
}

// PausePool implements admin.Backend.
func (b *Backend) PausePool(ctx context.Context, pool, reason, actor string) (admin.PoolInfo, error) {
	if err := b.begin(ctx, Call{Method: "PausePool", Pool: pool, Reason: reason, Actor: actor}); err != nil {
		return admin.PoolInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.pool(pool)
	if err != nil {
		return admin.PoolInfo{}, err
	}
	if b.pools[i].State != admin.PoolStatePaused {
		b.pools[i].State = admin.PoolStatePaused
		b.pools[i].PausedReason = reason
	}
	b.record(b.pools[i].Service, actor, "pool.pause", pool, map[string]any{"reason": reason})
	return b.pools[i], nil
}

// ResumePool implements admin.Backend.
func (b *Backend) ResumePool(ctx context.Context, pool, actor string) (admin.PoolInfo, error) {
	if err := b.begin(ctx, Call{Method: "ResumePool", Pool: pool, Actor: actor}); err != nil {
		return admin.PoolInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.pool(pool)
	if err != nil {
		return admin.PoolInfo{}, err
	}
	b.pools[i].State = admin.PoolStateRunning
	b.pools[i].PausedReason = ""
	b.record(b.pools[i].Service, actor, "pool.resume", pool, map[string]any{})
	return b.pools[i], nil
}

// LookupEvent implements admin.Backend.
func (b *Backend) LookupEvent(ctx context.Context, id uuid.UUID, service string) ([]admin.LookupResult, error) {
	if err := b.begin(ctx, Call{Method: "LookupEvent", ID: id, Service: service}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	services := b.services
	if service != "" {
		i, err := b.service(service)
		if err != nil {
			return nil, err
		}
		services = b.services[i : i+1]
	}
	out := make([]admin.LookupResult, 0, len(services))
	for _, s := range services {
		r := admin.LookupResult{Service: s.Name}
		if at, ok := b.processed[s.Name][id]; ok {
			r.Processed, r.ProcessedAt, r.PurgeableAt = true, at, at.Add(s.Horizon)
		}
		out = append(out, r)
	}
	return out, nil
}

// GetHorizon implements admin.Backend.
func (b *Backend) GetHorizon(ctx context.Context, service string) (admin.HorizonInfo, error) {
	if err := b.begin(ctx, Call{Method: "GetHorizon", Service: service}); err != nil {
		return admin.HorizonInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.service(service)
	if err != nil {
		return admin.HorizonInfo{}, err
	}
	return b.horizon(i), nil
}

// horizon returns the HorizonInfo of service i; b.mu must be held.
func (b *Backend) horizon(i int) admin.HorizonInfo {
	s := b.services[i]
	h := b.updated[s.Name]
	return admin.HorizonInfo{
		Service: s.Name, Horizon: s.Horizon, MinHorizon: s.MinHorizon,
		UpdatedAt: h.UpdatedAt, UpdatedBy: h.UpdatedBy,
	}
}

// SetHorizon implements admin.Backend.
func (b *Backend) SetHorizon(ctx context.Context, service string, horizon time.Duration, force bool, actor string) (admin.HorizonInfo, error) {
	if err := b.begin(ctx, Call{Method: "SetHorizon", Service: service, Horizon: horizon, Force: force, Actor: actor}); err != nil {
		return admin.HorizonInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.service(service)
	if err != nil {
		return admin.HorizonInfo{}, err
	}
	if minHorizon := b.services[i].MinHorizon; horizon < minHorizon && !force {
		return admin.HorizonInfo{}, fmt.Errorf("horizon %v is under min_horizon %v of service %q: %w", horizon, minHorizon, service, admin.ErrBelowMinHorizon)
	}
	if span := b.retrySpan(service); horizon <= span {
		return admin.HorizonInfo{}, fmt.Errorf("horizon %v is not longer than the retry span %v: %w", horizon, span, admin.ErrBelowMinHorizon)
	}
	b.record(service, actor, "horizon.set", service, map[string]any{
		"from": b.services[i].Horizon.String(), "to": horizon.String(),
		"forced": horizon < b.services[i].MinHorizon, "force": force,
	})
	b.services[i].Horizon = horizon
	b.updated[service] = admin.HorizonInfo{UpdatedAt: Now, UpdatedBy: actor}
	return b.horizon(i), nil
}

// RunPurge implements admin.Backend.
func (b *Backend) RunPurge(ctx context.Context, service string, dryRun bool, actor string) (admin.PurgeRun, error) {
	if err := b.begin(ctx, Call{Method: "RunPurge", Service: service, DryRun: dryRun, Actor: actor}); err != nil {
		return admin.PurgeRun{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.service(service)
	if err != nil {
		return admin.PurgeRun{}, err
	}
	run := admin.PurgeRun{
		Service: service, Cutoff: Now.Add(-b.services[i].Horizon), StartedAt: Now,
		FinishedAt: Now.Add(time.Second), DryRun: dryRun, Trigger: "admin",
	}
	for id, at := range b.processed[service] {
		if at.Before(run.Cutoff) {
			run.Deleted++
			if !dryRun {
				delete(b.processed[service], id)
			}
		}
	}
	b.runs[service] = append(b.runs[service], run)
	b.record(service, actor, "purge.run", service, map[string]any{"dry_run": dryRun, "deleted": run.Deleted})
	return run, nil
}

// ListPurgeRuns implements admin.Backend.
func (b *Backend) ListPurgeRuns(ctx context.Context, service string, limit int) ([]admin.PurgeRun, error) {
	if err := b.begin(ctx, Call{Method: "ListPurgeRuns", Service: service, Limit: limit}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.service(service); err != nil {
		return nil, err
	}
	runs := slices.Clone(b.runs[service])
	slices.Reverse(runs)
	return runs[:min(limit, len(runs))], nil
}

// ListFailedMessages implements admin.Backend.
func (b *Backend) ListFailedMessages(ctx context.Context, pool string, limit int) ([]admin.FailedMessage, error) {
	if err := b.begin(ctx, Call{Method: "ListFailedMessages", Pool: pool, Limit: limit}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.pool(pool); err != nil {
		return nil, err
	}
	msgs := b.failed[pool]
	return slices.Clone(msgs[:min(limit, len(msgs))]), nil
}

// RetryFailedMessages implements admin.Backend.
func (b *Backend) RetryFailedMessages(ctx context.Context, pool string, ids []uuid.UUID, all, override bool, actor string) (int, error) {
	if err := b.begin(ctx, Call{Method: "RetryFailedMessages", Pool: pool, IDs: slices.Clone(ids), All: all, Actor: actor}); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.pool(pool)
	if err != nil {
		return 0, err
	}
	before := len(b.failed[pool])
	b.failed[pool] = slices.DeleteFunc(b.failed[pool], func(m admin.FailedMessage) bool {
		return all || slices.ContainsFunc(ids, func(id uuid.UUID) bool { return strings.EqualFold(id.String(), m.EventID) })
	})
	n := before - len(b.failed[pool])
	b.record(b.pools[i].Service, actor, "failed.retry", pool, map[string]any{
		"retried": n, "all": all, "override_beyond_horizon": override,
	})
	return n, nil
}

// DescribeService implements admin.Backend: the retry span is 11s (the
// pools' delays 1s and 10s), the row estimate counts the processed fixture
// events and the last run is the newest recorded purge that was not a dry
// run.
func (b *Backend) DescribeService(ctx context.Context, service string) (admin.ServiceDetail, error) {
	if err := b.begin(ctx, Call{Method: "DescribeService", Service: service}); err != nil {
		return admin.ServiceDetail{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.service(service); err != nil {
		return admin.ServiceDetail{}, err
	}
	d := admin.ServiceDetail{Service: service, RetrySpan: b.retrySpan(service), RowsEstimate: int64(len(b.processed[service]))}
	for _, r := range slices.Backward(b.runs[service]) {
		if !r.DryRun {
			d.LastRun = r
			break
		}
	}
	return d, nil
}

// retrySpan is the fixture's retry span of every service.
func (b *Backend) retrySpan(string) time.Duration { return 11 * time.Second }

// ListAudit implements admin.Backend over the actions the Backend
// recorded, newest first.
func (b *Backend) ListAudit(ctx context.Context, service string, limit int) (admin.AuditList, error) {
	if err := b.begin(ctx, Call{Method: "ListAudit", Service: service, Limit: limit}); err != nil {
		return admin.AuditList{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out admin.AuditList
	if service != "" {
		i, err := b.service(service)
		if err != nil {
			return out, err
		}
		if msg := b.services[i].Error; msg != "" {
			return out, fmt.Errorf("service %s: %s: %w", service, msg, admin.ErrUnavailable)
		}
	}
	away := map[string]bool{} // of every service, those with a database error
	for _, s := range b.services {
		if service == "" && s.Error != "" {
			away[s.Name] = true
			out.Unavailable = append(out.Unavailable, s.Name)
		}
	}
	slices.Sort(out.Unavailable)
	for _, e := range slices.Backward(b.audit) {
		if len(out.Entries) == limit {
			break
		}
		if (service == "" && !away[e.Service]) || e.Service == service {
			out.Entries = append(out.Entries, e)
		}
	}
	return out, nil
}

// SetDatabaseError makes service's database look away: ListServices
// reports err for it, its pools report connecting with err, and its audit
// is unavailable.
func (b *Backend) SetDatabaseError(service, err string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.services {
		if b.services[i].Name == service {
			b.services[i].Error = err
		}
	}
	for i := range b.pools {
		if b.pools[i].Service == service {
			b.pools[i].State, b.pools[i].Error = admin.PoolStateConnecting, err
		}
	}
}

// ReloadResult is what the Backend's ReloadConfig returns (a hook may
// make it fail instead).
var ReloadResult = admin.ReloadResult{
	PoolsAdded:     []string{"billing-events"},
	PoolsUnchanged: []string{"shipping-events", "stock-events"},
	ServicesAdded:  []string{"billing"},
}

// ReloadConfig implements admin.Backend: it records the call and returns
// ReloadResult.
func (b *Backend) ReloadConfig(ctx context.Context, actor string) (admin.ReloadResult, error) {
	if err := b.begin(ctx, Call{Method: "ReloadConfig", Actor: actor}); err != nil {
		return admin.ReloadResult{}, err
	}
	return ReloadResult, nil
}

// record appends an audit entry; b.mu must be held.
func (b *Backend) record(service, actor, action, target string, detail map[string]any) {
	b.audit = append(b.audit, admin.AuditEntry{
		Service: service, At: Now.Add(time.Duration(len(b.audit)) * time.Second),
		Actor: actor, Action: action, Target: target, Detail: detail,
	})
}

// Compile-time check that Backend implements admin.Backend.
var _ admin.Backend = (*Backend)(nil)
