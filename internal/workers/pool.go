package workers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
)

// Pool defaults.
const (
	SoftStopTimeoutDefault   = 20 * time.Second
	StatePollIntervalDefault = 5 * time.Second
	SettleTimeoutDefault     = 30 * time.Second
)

// Pool states, as reported by Info.
const (
	StateConnecting = "connecting"
	StateRunning    = "running"
	StatePaused     = "paused"
	StateStopped    = "stopped"
)

// Config configures one pool.
type Config struct {
	Name    string
	Service string
	broker.Topology
	Concurrency int
	// Prefetch is the pool's total prefetch, split across its workers
	// (each gets at least one delivery; zero: BatchSize per worker). A
	// worker's batches never outgrow its share.
	Prefetch int
	// BatchSize is the most deliveries one transaction takes.
	BatchSize int
	// BatchWait is how long a busy worker (its previous batch at least
	// half full) waits for a batch to fill; an idle worker commits what it
	// has at once, so the wait does not turn into latency at low load.
	BatchWait time.Duration
	// MaxBodyBytes bounds accepted bodies (envelope default when 0).
	MaxBodyBytes int
	// BeyondHorizon is config.BeyondHorizonQuarantine (default) or
	// config.BeyondHorizonProcess.
	BeyondHorizon string
	// HorizonFunc returns the service's replay horizon in force.
	HorizonFunc func() time.Duration
	// PartitionKey, a JSON pointer into the payload (e.g. "/order_id"),
	// gives each key to one worker (see reader); "" (the default) lets
	// every worker consume on its own channel.
	PartitionKey string
	// OrderedFailures (config failures.ordered, with PartitionKey) keeps
	// each key's events in order across failures: once an event of a key
	// is a stored failure, or waits in a retry delay, the key's later
	// events are stored parked until it is resolved, then released in
	// their order. Default false.
	OrderedFailures bool
	// DuplicateAgeFlushInterval is how often, at most, the pool adds the
	// ages of the duplicates it skipped to platform.duplicate_age
	// (default DuplicateAgeFlushIntervalDefault); it also does when it
	// stops.
	DuplicateAgeFlushInterval time.Duration
	// SoftStopTimeout bounds how long Stop lets in-flight batches finish.
	SoftStopTimeout time.Duration
	// StatePollInterval is how often the stored pause state is re-read as
	// a safety net under LISTEN/NOTIFY.
	StatePollInterval time.Duration

	// testBeforeSettleFunc, set only by this package's tests, runs after a
	// batch's outcome is known and before it is settled.
	testBeforeSettleFunc func()
	// testAckFunc, set only by this package's tests, sees every multiple
	// ack the workers send, once it succeeded.
	testAckFunc func(worker int, tag uint64)
}

// Deps are a pool's collaborators.
type Deps struct {
	Processor *dedup.Processor
	// DB is the service database (pause state).
	DB dbpool.DB
	// ReadStateFunc, when set, reads the pool's stored pause state instead
	// of a query on DB (the daemon runs it on the service's control
	// session, so that an idle pool holds no pooled connection).
	ReadStateFunc func(ctx context.Context, pool string) (state.PoolState, error)
	// Consume is the pool's consuming connection.
	Consume *broker.Conn
	// Publish is the daemon's publishing connection.
	Publish *broker.Conn
	// Failures is the service database's failure store (default: a
	// store over DB).
	Failures *failure.Store
	Metrics  *metrics.Metrics
	Logger   *slog.Logger
	// Tracer, when set, traces every delivery (a "process <queue>" span);
	// nil (default) traces nothing and costs nothing.
	Tracer trace.Tracer
}

// Info is a snapshot of a pool.
type Info struct {
	Name, Service, Queue string
	State                string
	PausedReason         string
	Concurrency          int
	InFlight             int
	Processed            uint64
	Duplicates           uint64
	// DuplicatesBySource splits Duplicates by where each copy came from.
	DuplicatesBySource DuplicateCounts
	Retried            uint64
	Failed             uint64
	// Error is why the pool is connecting: its service database's last
	// error; empty otherwise.
	Error string
	// Node is the broker node (host:port) the pool's consuming connection
	// is on, "" while it is not connected.
	Node string
	// RateLimit is the pool's rate limit in events per second across
	// every daemon running it (0: none), RateShare this daemon's part of
	// it, and Members the daemons it is shared by.
	RateLimit, RateShare float64
	Members              int
}

// DuplicateCounts counts duplicates by source (metrics.Source…): a
// broker redelivery, a replay (x-replay header), or else a republish.
type DuplicateCounts struct {
	Redelivery, Replay, Republish uint64
}

// Pool is one named worker pool. Its methods are safe for concurrent use.
// Start and Stop follow internal/startstop's contract: Stop stops
// consuming, lets in-flight batches finish and settle within
// SoftStopTimeout, then cancels the rest (their deliveries return to the
// queue) and returns once every worker has; it is idempotent and safe
// before Start.
type Pool struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	count     counters
	inFlight  atomic.Int64
	workedAt  atomic.Int64          // unix nanos a worker last finished a batch (Working)
	dbErr     atomic.Pointer[error] // the service database's last error; nil once it answers
	connected atomic.Int64          // workers with a live consumer or paused on a live channel

	// lim is this daemon's share of the pool's rate limit, nil when none
	// (the hot path's only cost); conc is the concurrency in force; both
	// set through limits (limits.go).
	lim    atomic.Pointer[rate.Limiter]
	conc   atomic.Int64
	limits limits

	startstop.Base

	mu      sync.Mutex
	paused  bool
	reason  string
	changed chan struct{} // closed and replaced on every pause change
	idle    map[int]bool  // worker id -> applying nothing: no consumer, or paused and drained
	idled   chan struct{} // closed and replaced whenever a worker goes idle

	testSignals PoolTestSignals
}

// NewPool validates cfg and returns a stopped pool.
func NewPool(cfg Config, deps Deps) (*Pool, error) {
	if cfg.Name == "" || cfg.Queue == "" || cfg.Exchange == "" {
		return nil, errors.New("workers: pool needs a name, a queue and an exchange")
	}
	if deps.Processor == nil || deps.DB == nil || deps.Consume == nil || deps.Publish == nil || deps.Metrics == nil || deps.Logger == nil {
		return nil, fmt.Errorf("workers: pool %s: missing dependency", cfg.Name)
	}
	if cfg.OrderedFailures && cfg.PartitionKey == "" {
		return nil, fmt.Errorf("workers: pool %s: ordered failures need a partition key", cfg.Name)
	}
	if deps.Failures == nil {
		deps.Failures = failure.NewStore(deps.DB)
	}
	if cfg.PartitionKey != "" && !jsontext.Pointer(cfg.PartitionKey).IsValid() {
		return nil, fmt.Errorf("workers: pool %s: partition key %q is not a JSON pointer", cfg.Name, cfg.PartitionKey)
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 1)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 1)
	if cfg.Prefetch <= 0 {
		cfg.Prefetch = cfg.BatchSize * cfg.Concurrency
	}
	// Never below one delivery per worker, but never raised to a batch
	// each either: a prefetch capped by the pool's memory budget
	// (config's max_unacked_bytes) must stay capped, and batch.size is a
	// ceiling that a smaller window simply never reaches.
	cfg.Prefetch = max(cfg.Prefetch, cfg.Concurrency)
	cfg.QueueType = cmp.Or(cfg.QueueType, "quorum")
	cfg.BeyondHorizon = cmp.Or(cfg.BeyondHorizon, config.BeyondHorizonDefault)
	cfg.SoftStopTimeout = cmp.Or(cfg.SoftStopTimeout, SoftStopTimeoutDefault)
	cfg.StatePollInterval = cmp.Or(cfg.StatePollInterval, StatePollIntervalDefault)
	cfg.DuplicateAgeFlushInterval = cmp.Or(cfg.DuplicateAgeFlushInterval, DuplicateAgeFlushIntervalDefault)
	p := &Pool{
		cfg:     cfg,
		deps:    deps,
		log:     deps.Logger.With(slog.String("pool", cfg.Name), slog.String("service", cfg.Service)),
		changed: make(chan struct{}),
		idle:    make(map[int]bool, cfg.Concurrency),
		idled:   make(chan struct{}),
	}
	// A worker that has no consumer yet applies nothing: quiet until its
	// channel starts consuming.
	for i := range cfg.Concurrency {
		p.idle[i] = true
	}
	p.count.m = newPoolMetrics(deps.Metrics, cfg.Service, cfg.Name)
	p.conc.Store(int64(cfg.Concurrency))
	p.limits.members = 1
	p.limits.resized = make(chan struct{})
	p.limits.rateGauge = deps.Metrics.Limits.PoolRateLimit.WithLabelValues(cfg.Service, cfg.Name)
	p.limits.throttled = deps.Metrics.Limits.PoolThrottled.WithLabelValues(cfg.Service, cfg.Name)
	p.limits.rateGauge.Set(0)
	p.count.settled = &p.testSignals.BatchSettled
	p.count.ages = state.NewDuplicateAges(cfg.Name)
	p.count.agesNoted = make(chan struct{}, 1)
	if deps.Consume.OnReconnectFunc == nil {
		deps.Consume.OnReconnectFunc = p.count.m.reconnects.Inc
	}
	return p, nil
}

// Name returns the pool's name.
func (p *Pool) Name() string { return p.cfg.Name }

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// DeclareTopology declares the pool's exchange, queue, bindings and shared
// delay queues on channels of its own (the workers declare them again whenever they
// connect).
func (p *Pool) DeclareTopology(ctx context.Context) error {
	ch, err := p.deps.Consume.Channel(ctx)
	if err != nil {
		return fmt.Errorf("workers: pool %s: %w", p.cfg.Name, err)
	}
	defer func() { _ = ch.Close() }()
	if err := p.cfg.Topology.Declare(ch); err != nil {
		return fmt.Errorf("workers: pool %s: %w", p.cfg.Name, err)
	}
	if err := p.cfg.Topology.DeclareDelays(ctx, p.deps.Consume, p.log); err != nil {
		return fmt.Errorf("workers: pool %s: %w", p.cfg.Name, err)
	}
	return nil
}

// Start starts the pool in the background: it reads the stored pause
// state, then starts the workers and the state watcher. A database that
// cannot be reached does not fail the start: the pool reports
// StateConnecting with the error, and tries again, with backoff, until the
// database answers or the pool is stopped.
func (p *Pool) Start(ctx context.Context) error {
	return p.StartFunc(func() (func(), error) {
		// Two contexts, as River's fetch and work contexts: cancelling
		// fetchCtx stops consuming and lets the work in hand finish and
		// settle; cancelling workCtx cuts that work off.
		fetchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		workCtx, hard := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Go(func() { p.flushDuplicateAges(fetchCtx) })
		wg.Go(func() {
			if !p.readState(fetchCtx) {
				return
			}
			wg.Go(func() { p.drainFailedQueue(fetchCtx) })
			wg.Go(func() { p.drainOldRetryQueues(fetchCtx) })
			if p.cfg.OrderedFailures {
				wg.Go(func() { p.releaseParked(fetchCtx) })
			}
			if p.cfg.PartitionKey != "" {
				// As many workers as the concurrency in force (stored
				// limits may have changed the config's), which
				// SetConcurrency then changes through the reader.
				r := newReader(p, int(p.conc.Load()))
				wg.Go(func() { r.run(fetchCtx, workCtx) })
			} else {
				// Workers that SetConcurrency may add to or stop.
				p.startWorkers(fetchCtx, workCtx, &wg)
			}
			p.pollState(fetchCtx)
		})
		return func() { p.stop(context.WithoutCancel(ctx), &wg, cancel, hard) }, nil
	})
}

// readStoredState reads the pool's stored pause state, through
// ReadStateFunc when set.
func (p *Pool) readStoredState(ctx context.Context) (state.PoolState, error) {
	if f := p.deps.ReadStateFunc; f != nil {
		return f(ctx, p.cfg.Name)
	}
	return state.GetEffectivePoolState(ctx, p.deps.DB, p.cfg.Service, p.cfg.Name)
}

// readState reads the stored pause state, again and again with backoff
// while the database cannot be reached; false when ctx ended first.
func (p *Pool) readState(ctx context.Context) bool {
	var backoff startstop.Backoff
	for {
		st, err := p.readStoredState(ctx)
		if err == nil {
			p.setDatabaseError(nil)
			p.apply(st.Paused, st.Reason)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		p.setDatabaseError(err)
		wait := backoff.Next()
		p.log.WarnContext(ctx, "workers: service database not reachable, pool waiting for it", slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return false
		}
	}
}

// markUpWhenServing closes the pool's Started channel the first time it
// is no longer connecting: every worker on a live channel, its topology
// declared, and its database answering.
func (p *Pool) markUpWhenServing() {
	if p.connected.Load() >= p.workerCount() && p.dbErr.Load() == nil {
		p.MarkStarted()
	}
}

// setDatabaseError records the service database's last error, or that it
// answered (nil): while it does not, the pool reports StateConnecting.
func (p *Pool) setDatabaseError(err error) {
	if err == nil {
		if p.dbErr.Load() != nil {
			p.dbErr.Store(nil)
			p.testSignals.DatabaseError.Signal("")
			p.markUpWhenServing()
		}
		return
	}
	p.dbErr.Store(&err)
	p.testSignals.DatabaseError.Signal(err.Error())
}

// stop stops consuming, lets in-flight batches finish and settle within
// SoftStopTimeout, then cancels what remains (unsettled deliveries go back
// to the queue when their channel closes), and waits for every worker.
//
// ctx (never cancelled) carries the start's values to the last flush of
// the duplicate ages.
func (p *Pool) stop(ctx context.Context, wg *sync.WaitGroup, cancel, hard context.CancelFunc) {
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(p.cfg.SoftStopTimeout):
		p.log.Warn("workers: soft stop timed out, cancelling in-flight work and dropping the broker connection")
		hard()
		// A worker may be blocked on the broker itself (a consumer's
		// cancel, a channel's close), which no context ends: a node cut
		// off from its cluster can answer nothing for as long as it
		// sends heartbeats. Closing the socket ends those calls; the
		// broker requeues what was unacked, and committed events come
		// back as duplicates.
		p.deps.Consume.Abort()
		<-done
	}
	hard()
	p.count.m.paused.Set(0)
	// Every worker is done: what they noted since the last flush is
	// written now, so that a restart loses none of it.
	p.flushAges(ctx)
}

// Pause stores the pause in the service database (so every daemon sharing
// it and every restart honours it), applies it here, and waits until every
// worker has cancelled its consumer and settled its in-flight batch, or ctx
// ends. Pausing a paused pool only updates the reason.
func (p *Pool) Pause(ctx context.Context, reason, actor string) (Info, error) {
	if _, err := state.SetPoolPaused(ctx, p.deps.DB, p.cfg.Name, true, reason, actor); err != nil {
		return p.Info(), err
	}
	p.apply(true, reason)
	p.log.InfoContext(ctx, "workers: pool paused", slog.String("reason", reason), slog.String("actor", actor))
	return p.waitQuiesced(ctx)
}

// Resume stores the resume and applies the state in force: workers consume
// again unless the service's kill switch holds.
func (p *Pool) Resume(ctx context.Context, actor string) (Info, error) {
	if _, err := state.SetPoolPaused(ctx, p.deps.DB, p.cfg.Name, false, "", actor); err != nil {
		return p.Info(), err
	}
	if err := p.Refresh(ctx); err != nil {
		p.apply(false, "")
	}
	p.log.InfoContext(ctx, "workers: pool resumed", slog.String("actor", actor))
	return p.Info(), nil
}

// Refresh re-reads the stored pause state and applies it (called on a
// NOTIFY from another daemon, and periodically).
func (p *Pool) Refresh(ctx context.Context) error {
	st, err := p.readStoredState(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.setDatabaseError(err)
		}
		return err
	}
	p.setDatabaseError(nil)
	p.apply(st.Paused, st.Reason)
	return nil
}

// pollState re-reads the stored pause state every StatePollInterval, a
// safety net under LISTEN/NOTIFY.
func (p *Pool) pollState(ctx context.Context) {
	startstop.Tick(ctx, p.cfg.StatePollInterval, func(ctx context.Context) {
		if err := p.Refresh(ctx); err != nil && ctx.Err() == nil {
			p.log.WarnContext(ctx, "workers: read pause state", slog.Any("error", err))
		}
	})
}

func (p *Pool) apply(paused bool, reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.setPausedLocked(paused, reason)
}

func (p *Pool) setPausedLocked(paused bool, reason string) {
	p.reason = reason
	if p.paused == paused {
		return
	}
	p.paused = paused
	if paused {
		p.count.m.paused.Set(1)
	} else {
		p.count.m.paused.Set(0)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	if paused {
		p.testSignals.Paused.Signal(reason)
		p.signalQuiescedLocked()
	} else {
		p.testSignals.Resumed.Signal(struct{}{})
	}
}

// signalQuiescedLocked fires the Quiesced test signal when the pool is
// paused and every worker idle.
func (p *Pool) signalQuiescedLocked() {
	if !p.testSignals.Quiesced.Initialized() || !p.paused {
		return
	}
	if p.quietLocked() {
		p.testSignals.Quiesced.Signal(struct{}{})
	}
}

// quietLocked reports whether no worker applies anything: each has no
// consumer, or has cancelled its consumer and settled what the broker had
// already sent it.
func (p *Pool) quietLocked() bool {
	for _, idle := range p.idle {
		if !idle {
			return false
		}
	}
	return true
}

// pauseState returns whether the pool is paused and the channel closed on
// the next change.
func (p *Pool) pauseState() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.changed
}

// setIdle records whether the workers are quiesced (paused or stopped).
func (p *Pool) setIdle(workers []int, idle bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range workers {
		p.idle[w] = idle
	}
	if idle {
		close(p.idled)
		p.idled = make(chan struct{})
		p.signalQuiescedLocked()
	}
}

func (p *Pool) waitQuiesced(ctx context.Context) (Info, error) {
	for {
		p.mu.Lock()
		done := !p.paused || p.quietLocked()
		changed, idled := p.changed, p.idled
		p.mu.Unlock()
		// A pool stopping has its workers go idle as they end, which wakes
		// this wait too.
		if done || !p.Running() {
			return p.Info(), nil
		}
		select {
		case <-ctx.Done():
			return p.Info(), ctx.Err()
		case <-changed: // resumed meanwhile
		case <-idled:
		}
	}
}

// Info returns a snapshot of the pool's state and counters.
func (p *Pool) Info() Info {
	running := p.Running()
	p.mu.Lock()
	st := StateRunning
	switch {
	case !running:
		st = StateStopped
	case p.paused && p.quietLocked():
		// Paused once nothing is applied any more: until then a worker may
		// still be handling what the broker sent before its consumer was
		// cancelled (its batches commit, and in_flight drops to 0 between
		// them), and the pool reports running, with its paused reason.
		st = StatePaused
	case p.connected.Load() < p.workerCount() || p.dbErr.Load() != nil:
		st = StateConnecting
	}
	reason := ""
	if p.paused {
		reason = p.reason
	}
	p.mu.Unlock()
	var dbErr string
	if e := p.dbErr.Load(); e != nil && st == StateConnecting {
		dbErr = (*e).Error()
	}
	rateLimit, share, members := p.rateLimits()
	return Info{
		RateLimit: rateLimit, RateShare: share, Members: members,
		Name: p.cfg.Name, Service: p.cfg.Service, Queue: p.cfg.Queue,
		State: st, PausedReason: reason, Concurrency: int(p.workerCount()),
		InFlight:  int(p.inFlight.Load()),
		Processed: p.count.processed.Load(), Duplicates: p.count.duplicates.Load(),
		DuplicatesBySource: DuplicateCounts{
			Redelivery: p.count.dupRedelivery.Load(), Replay: p.count.dupReplay.Load(), Republish: p.count.dupRepublish.Load(),
		},
		Retried: p.count.retried.Load(), Failed: p.count.failed.Load(),
		Error: dbErr,
		Node:  p.deps.Consume.Node(),
	}
}
