package workers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// reader is a partitioned pool's one consumer (Config.PartitionKey):
// it reads the queue on one channel, in queue order, and hands each
// delivery to the worker that owns its key (a hash of the value at the
// key's pointer, modulo the pool's concurrency), so that within a daemon
// no two transactions of the pool touch the same entity at once and a
// key's events are applied in delivery order. A delivery whose payload
// has no value at the pointer (or does not decode) goes to the workers in
// turn. The workers settle through the channel's tracker.
type reader struct {
	pool    *Pool
	workers []*worker
	key     *partitionKey
	turn    int // next worker of a keyless delivery
	log     *slog.Logger
}

// newReader returns the reader of p with n workers.
func newReader(p *Pool, n int) *reader {
	r := &reader{pool: p, key: newPartitionKey(p.cfg.PartitionKey), log: p.log.With(slog.String("consumer", "reader"))}
	r.setWorkers(n, true)
	return r
}

// setWorkers replaces the reader's workers with n new ones, ids 0 to n-1,
// each with its share of the reader's prefetch. The old ones must have
// settled everything they were handed: their publishers close here. idle
// is the new workers' state in the pool's pause bookkeeping (the old ones
// beyond n leave it). Only the reader's goroutine calls it.
func (r *reader) setWorkers(n int, idle bool) {
	for _, w := range r.workers {
		w.pub.Close()
	}
	p := r.pool
	prefetch := WorkerPrefetch(p.cfg.Prefetch, n, p.cfg.BatchSize)
	r.workers = make([]*worker, n)
	for i := range r.workers {
		r.workers[i] = newWorkerWith(p, i, prefetch)
	}
	r.turn = 0
	p.mu.Lock()
	for id := range p.idle {
		if id >= n {
			delete(p.idle, id)
		}
	}
	for id := range n {
		p.idle[id] = idle
	}
	p.mu.Unlock()
}

// replaceWorkers puts n new workers, at work on a live consumer, in place
// of the old ones, which have settled everything (setWorkers), and counts
// the difference as connected; it returns how many there were.
func (r *reader) replaceWorkers(n int) (old int) {
	old = len(r.workers)
	r.setWorkers(n, false)
	r.pool.connected.Add(int64(n - old))
	return old
}

// workerIDs returns the ids of the reader's workers in force (always 0 to
// n-1), for its channel's bookkeeping: asked on a connect or a pause, never
// per message, so they are derived rather than kept beside the workers.
func (r *reader) workerIDs() []int {
	ids := make([]int, len(r.workers))
	for i := range ids {
		ids[i] = i
	}
	return ids
}

// run keeps the reader's consumer channel alive until fetchCtx ends.
func (r *reader) run(fetchCtx, workCtx context.Context) {
	defer func() {
		for _, w := range r.workers {
			w.pub.Close()
		}
	}()
	defer func() { r.pool.setIdle(r.workerIDs(), true) }()
	r.pool.keepChannel(fetchCtx, r.log, func() error {
		return r.pool.runChannel(fetchCtx, "reader", r.pool.cfg.Prefetch, r.workerIDs, func(ch *amqp.Channel) consumeFunc {
			trk := newTracker(ch, len(r.workers))
			return func(tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
				return r.consume(fetchCtx, workCtx, ch, trk, tag, deliveries, changed)
			}
		})
	})
}

// owner returns the index of the worker that owns d's key.
func (r *reader) owner(d *amqp.Delivery) int {
	if h, ok := r.key.hash(d.Body); ok {
		return int(h % uint64(len(r.workers)))
	}
	r.turn = (r.turn + 1) % len(r.workers)
	return r.turn
}

// serving is the reader's workers at work on one consumer: each one's
// input and the group to wait for once the inputs are closed.
type serving struct {
	ins []chan amqp.Delivery
	wg  sync.WaitGroup
}

// serve starts the reader's workers on trk's views.
func (r *reader) serve(fetchCtx, workCtx context.Context, trk *tracker) *serving {
	s := &serving{ins: make([]chan amqp.Delivery, len(r.workers))}
	for i, w := range r.workers {
		s.ins[i] = make(chan amqp.Delivery, w.prefetch)
		st := w.newSettler(trk.view(i))
		in := s.ins[i]
		s.wg.Go(func() { w.serve(workCtx, fetchCtx, st, in) })
	}
	return s
}

// finish closes the workers' inputs and waits until each has settled
// what it was handed.
func (s *serving) finish() {
	for _, in := range s.ins {
		close(in)
	}
	s.wg.Wait()
}

// resizeWarnAfter is how long a change of concurrency waits for the old
// workers' in-flight batches before it says so in the log (it waits on:
// handing a key to a new worker while an old one may still hold it would
// break the key's order).
const resizeWarnAfter = 10 * time.Second

// resize moves the reader to the pool's concurrency in force, n, without
// touching its consumer: the reader hands nothing on meanwhile (the broker
// keeps what it sent in the channel's buffer, in order), the old workers
// finish and settle what they hold, then n new workers start, each key
// going to the worker of its hash modulo n. It returns false when the
// channel died meanwhile.
func (r *reader) resize(fetchCtx, workCtx context.Context, trk *tracker, cur *serving, n int) (*serving, bool) {
	start := time.Now()
	done := make(chan struct{})
	go func() { cur.finish(); close(done) }()
	select {
	case <-done:
	case <-time.After(resizeWarnAfter):
		r.log.Warn("workers: concurrency change waits for in-flight batches", slog.Int("concurrency", n))
		<-done
	}
	if trk.dead() || !trk.resize(n) {
		// Finished already: nothing left for consume's own finish.
		return &serving{}, false
	}
	old := r.replaceWorkers(n)
	r.pool.testSignals.Resized.Signal(n)
	r.log.Info("workers: partitioned pool resized", slog.Int("from", old), slog.Int("to", n), slog.Duration("took", time.Since(start)))
	return r.serve(fetchCtx, workCtx, trk), true
}

// consume hands deliveries to the workers until the pool is paused,
// fetchCtx ends or the channel dies; a change of concurrency meanwhile
// resizes the workers on the same consumer (resize). On a pause or a stop
// it cancels the consumer and hands on what the broker had already sent;
// it returns once every worker has settled what it was given.
func (r *reader) consume(fetchCtx, workCtx context.Context, ch *amqp.Channel, trk *tracker, tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
	// A change made while no consumer ran: every worker is idle and has
	// settled everything, so the new ones start at once.
	n, resized := r.pool.resizeState()
	if n != len(r.workers) && trk.resize(n) {
		r.replaceWorkers(n)
	}
	cur := r.serve(fetchCtx, workCtx, trk)
	defer func() { cur.finish() }()
	end := endChannelGone
	stop := fetchCtx.Done()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				// After a cancel, the library closes deliveries once the
				// broker's last one is read; otherwise the channel died.
				if trk.dead() {
					return endChannelGone
				}
				return end
			}
			i := r.owner(&d)
			trk.dispatched(i, d.DeliveryTag)
			cur.ins[i] <- d
		case <-resized:
			n, resized = r.pool.resizeState()
			if n == len(r.workers) {
				continue
			}
			var ok bool
			if cur, ok = r.resize(fetchCtx, workCtx, trk, cur, n); !ok {
				return endChannelGone
			}
		case <-changed:
			var paused bool
			paused, changed = r.pool.pauseState()
			if paused {
				changed, stop, end, resized = nil, nil, endPaused, nil
				if ch.Cancel(tag, false) != nil {
					end = endChannelGone
				}
			}
		case <-stop:
			changed, stop, end, resized = nil, nil, endStopping, nil
			if ch.Cancel(tag, false) != nil {
				end = endChannelGone
			}
		}
	}
}
