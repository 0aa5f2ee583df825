package workers

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// limits are a pool's live limits (docs/operations.md, "Limits"): its
// rate, shared across the daemons running it, and its concurrency changed
// at runtime.
// The hot path pays one atomic load (Pool.lim) when no rate is set.
type limits struct {
	mu sync.Mutex
	// rate and burst are the pool's, across every daemon (rate 0: none);
	// members is how many daemons run the pool (at least 1).
	rate    float64
	burst   int
	members int

	rateGauge prometheus.Gauge
	throttled prometheus.Counter

	// resized is closed and replaced whenever a partitioned pool's
	// concurrency changes: its reader then moves its keys to the new
	// number of workers (reader.resize).
	resized chan struct{}

	// run is set while the pool runs unpartitioned: what adding or
	// stopping a worker needs.
	run *workerSet
}

// workerSet is the running workers of an unpartitioned pool.
type workerSet struct {
	fetchCtx, workCtx context.Context
	wg                *sync.WaitGroup
	next              int
	// cancels stops each running worker, by id (ascending ids: the
	// newest is stopped first).
	cancels map[int]context.CancelFunc
	order   []int
}

// SetLimits sets the pool's rate (events per second for the pool across
// every daemon; 0: none) and burst (0: the rate), applied from the next
// batch on. Safe for concurrent use.
func (p *Pool) SetLimits(rateLimit float64, burst int) {
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rate, l.burst = rateLimit, burst
	l.rateGauge.Set(rateLimit)
	p.applyShareLocked()
}

// SetMembers sets how many daemons run the pool (n < 1 counts as 1): this
// daemon takes rate/n of the pool's rate. Safe for concurrent use.
func (p *Pool) SetMembers(n int) {
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	n = max(n, 1)
	if n == l.members {
		return
	}
	l.members = n
	p.applyShareLocked()
}

// RateShare returns this daemon's share of the pool's rate (0: none) and
// the daemons counted.
func (p *Pool) RateShare() (float64, int) {
	_, share, members := p.rateLimits()
	return share, members
}

// rateLimits returns the pool's rate (0: none), this daemon's share of it
// and the daemons counted, read together.
func (p *Pool) rateLimits() (rate, share float64, members int) {
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	members = max(l.members, 1)
	if l.rate == 0 {
		return 0, 0, members
	}
	return l.rate, l.rate / float64(members), members
}

// applyShareLocked sets the token bucket to this daemon's share; l.mu held.
func (p *Pool) applyShareLocked() {
	l := &p.limits
	if l.rate <= 0 {
		p.lim.Store(nil)
		return
	}
	n := float64(max(l.members, 1))
	share := l.rate / n
	burst := l.burst
	if burst <= 0 {
		burst = int(math.Ceil(l.rate))
	}
	b := max(int(math.Ceil(float64(burst)/n)), 1)
	if cur := p.lim.Load(); cur != nil {
		cur.SetLimit(rate.Limit(share))
		cur.SetBurst(b)
		return
	}
	// A bucket starts empty: a full one would let every daemon that
	// starts or joins take a whole burst at once on top of the pool's
	// rate (2 daemons of a 200/s pool overshot a 3,000-event drain by 7%).
	lim := rate.NewLimiter(rate.Limit(share), b)
	lim.AllowN(time.Now(), b)
	p.lim.Store(lim)
}

// batchesPerSecondMax is how many batches a throttled worker's share of
// the rate is cut into at most: a wait gathers rate/batchesPerSecondMax
// tokens (at least one), so that a limited pool does not spend a
// transaction per event; at most 1/batchesPerSecondMax s of latency.
const batchesPerSecondMax = 50

// throttle waits for the pool's rate limiter to allow the first events of
// a batch (one, or a fiftieth of a second's worth of the share), and
// returns how many tokens it took and how many events the batch may hold:
// those plus the tokens there are now, at most size. The batch's events
// beyond the taken ones are taken by settleTokens once it is cut, so that
// tokens not used stay in the bucket. A wait cut short by ctx lets the
// batch go.
func (w *worker) throttle(ctx context.Context, lim *rate.Limiter, size int) (taken, allowed int) {
	now := time.Now()
	taken = min(max(int(float64(lim.Limit())/batchesPerSecondMax), 1), size, max(lim.Burst(), 1))
	r := lim.ReserveN(now, taken)
	if d := r.DelayFrom(now); d > 0 {
		w.timer.Reset(d)
		select {
		case <-w.timer.C:
		case <-ctx.Done():
			w.timer.Stop()
		}
		w.pool.limits.throttled.Add(time.Since(now).Seconds())
		now = time.Now()
	}
	return taken, taken + max(min(int(lim.TokensAt(now)), size-taken), 0)
}

// settleTokens takes from lim the tokens of a batch's n events beyond the
// taken ones (throttle's): a worker that raced another to them leaves a
// debt that the next wait pays, so the rate holds exactly.
func settleTokens(lim *rate.Limiter, n, taken int) {
	if n > taken {
		lim.ReserveN(time.Now(), n-taken)
	}
}

// SetConcurrency changes the number of the pool's workers while it runs,
// without restarting it: new workers start consuming, or the newest
// workers cancel their consumers, settle what they hold (no redelivery)
// and end; the others keep their consumers. A partitioned pool's reader
// keeps its consumer and stops handing deliveries on, lets its workers
// finish what they hold, then spreads the keys over the new number of
// workers (reader.resize): a key's events stay in order, never two at
// once. A pool not running takes it at its next start. Safe for
// concurrent use.
func (p *Pool) SetConcurrency(n int) {
	if n < 1 {
		return
	}
	if p.cfg.PartitionKey != "" {
		l := &p.limits
		l.mu.Lock()
		defer l.mu.Unlock()
		if int(p.conc.Load()) == n {
			return
		}
		p.conc.Store(int64(n))
		close(l.resized)
		l.resized = make(chan struct{})
		p.log.Info("workers: concurrency changed", slog.Int("concurrency", n))
		return
	}
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	if int(p.conc.Load()) == n {
		return
	}
	run := l.run
	if run == nil || run.fetchCtx.Err() != nil {
		p.conc.Store(int64(n))
		p.log.Info("workers: concurrency set, taken at the pool's next start", slog.Int("concurrency", n))
		return
	}
	for len(run.order) < n {
		p.startWorkerLocked(run) //nolint:contextcheck // a worker runs under the pool's fetch context, not the caller's
	}
	for len(run.order) > n {
		id := run.order[len(run.order)-1]
		run.order = run.order[:len(run.order)-1]
		run.cancels[id]()
		delete(run.cancels, id)
	}
	p.conc.Store(int64(n))
	p.log.Info("workers: concurrency changed", slog.Int("concurrency", n))
}

// startWorkerLocked starts one more worker in run; p.limits.mu held.
func (p *Pool) startWorkerLocked(run *workerSet) {
	id := run.next
	run.next++
	ctx, cancel := context.WithCancel(run.fetchCtx)
	run.cancels[id] = cancel
	run.order = append(run.order, id)
	p.mu.Lock()
	p.idle[id] = true
	p.mu.Unlock()
	w := newWorker(p, id)
	run.wg.Go(func() {
		defer cancel()
		w.run(ctx, run.workCtx)
		// Gone for good, not idle: the pool's quiet state no longer
		// waits on it.
		p.mu.Lock()
		delete(p.idle, id)
		p.mu.Unlock()
	})
}

// startWorkers starts the unpartitioned pool's workers, which
// SetConcurrency then adds to or stops.
func (p *Pool) startWorkers(fetchCtx, workCtx context.Context, wg *sync.WaitGroup) {
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	run := &workerSet{fetchCtx: fetchCtx, workCtx: workCtx, wg: wg, cancels: map[int]context.CancelFunc{}}
	p.mu.Lock()
	clear(p.idle)
	p.mu.Unlock()
	for range int(p.conc.Load()) {
		p.startWorkerLocked(run) //nolint:contextcheck // run holds fetchCtx and workCtx
	}
	l.run = run
}

// resizeState returns a partitioned pool's concurrency in force and the
// channel closed on its next change.
func (p *Pool) resizeState() (int, <-chan struct{}) {
	l := &p.limits
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(p.conc.Load()), l.resized
}

// workerCount is the pool's concurrency in force.
func (p *Pool) workerCount() int64 { return p.conc.Load() }

// WaitQuiesced waits until the pool, if paused, has every worker idle (its
// consumer cancelled and what it held settled), or ctx ends; it returns at
// once for a pool not paused.
func (p *Pool) WaitQuiesced(ctx context.Context) (Info, error) { return p.waitQuiesced(ctx) }

// WorkerPrefetch returns the prefetch of each worker of an unpartitioned
// pool of concurrency workers whose prefetch in all is prefetch (0: a
// batch of batchSize per worker), as NewPool sets it: the total shared out,
// rounded up, at least one. SetConcurrency keeps it for the workers it
// starts, so a caller can tell whether a new concurrency leaves it as is.
func WorkerPrefetch(prefetch, concurrency, batchSize int) int {
	concurrency, batchSize = cmp.Or(max(concurrency, 0), 1), cmp.Or(max(batchSize, 0), 1)
	if prefetch <= 0 {
		prefetch = batchSize * concurrency
	}
	prefetch = max(prefetch, concurrency)
	return max((prefetch+concurrency-1)/concurrency, 1)
}

// WorkerPrefetch returns the prefetch each of the pool's unpartitioned
// workers consumes with: fixed when the pool is built, kept by
// SetConcurrency for the workers it starts. Safe for concurrent use.
func (p *Pool) WorkerPrefetch() int {
	return WorkerPrefetch(p.cfg.Prefetch, p.cfg.Concurrency, p.cfg.BatchSize)
}
