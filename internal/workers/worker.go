package workers

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/startstop"
)

// worker is one consumer of a pool: one channel, one batch at a time.
type worker struct {
	pool *Pool
	id   int
	log  *slog.Logger
	pub  *broker.Publisher

	prefetch int
	// retry and wait: after a batch whose outcome is unknown, the worker
	// waits before it takes the next (wait 0: the last batch committed).
	retry  startstop.Backoff
	wait   time.Duration
	timer  *time.Timer
	batch  []message
	events []consumer.Event

	// lastBatch is the size of the previous batch: the worker lingers
	// for batch.wait only while its batches come at least half full.
	lastBatch int
	// idleLinger is idleLinger (tests lengthen it).
	idleLinger time.Duration
	// deliveries is the current consumer's delivery channel; a delivery
	// already waiting there (held by peek) lets an ack wait for the next
	// batch's.
	deliveries <-chan amqp.Delivery
	held       amqp.Delivery
	hasHeld    bool
	// ackLimit bounds how many settled deliveries an ack may cover.
	ackLimit int
	tr       tracer
	// orderKey finds the sequence key of an ordered pool's deliveries
	// (nil otherwise); the worker's own.
	orderKey *partitionKey
}

func newWorker(p *Pool, id int) *worker {
	return newWorkerWith(p, id, WorkerPrefetch(p.cfg.Prefetch, p.cfg.Concurrency, p.cfg.BatchSize))
}

// newWorkerWith returns worker id of p whose window (its consumer's
// prefetch, or a partitioned worker's share of the reader's) is prefetch.
func newWorkerWith(p *Pool, id, prefetch int) *worker {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &worker{
		pool:     p,
		id:       id,
		log:      p.log.With(slog.Int("worker", id)),
		pub:      broker.NewPublisher(p.deps.Publish, p.cfg.BatchSize),
		prefetch: prefetch,
		retry:    startstop.Backoff{Min: batchBackoffMin},
		timer:    t,
		batch:    make([]message, 0, min(p.cfg.BatchSize, prefetch)),
		// A quarter of the window: the broker keeps three quarters to
		// send while acks are held back.
		ackLimit:   max(prefetch/4, 1),
		idleLinger: idleLinger,
		tr:         newTracer(p.cfg, p.deps.Tracer),
		orderKey:   orderKeyOf(p.cfg),
	}
}

// orderKeyOf returns the sequence key finder of an ordered pool, nil for
// another.
func orderKeyOf(cfg Config) *partitionKey {
	if !cfg.OrderedFailures {
		return nil
	}
	return newPartitionKey(cfg.PartitionKey)
}

// run keeps the worker's consumer channel alive until fetchCtx ends.
func (w *worker) run(fetchCtx, workCtx context.Context) {
	defer w.pub.Close()
	defer w.pool.setIdle([]int{w.id}, true)
	w.pool.keepChannel(fetchCtx, w.log, func() error {
		ids := []int{w.id}
		return w.pool.runChannel(fetchCtx, strconv.Itoa(w.id), w.prefetch, func() []int { return ids }, func(ch *amqp.Channel) consumeFunc {
			st := w.newSettler(ch)
			return func(tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
				return w.consume(fetchCtx, workCtx, ch, st, tag, deliveries, changed)
			}
		})
	})
}

// consume reads deliveries into batches and handles them until the pool is
// paused, fetchCtx ends (both: cancel the consumer, then drain and handle
// what the broker already sent) or the deliveries channel closes.
func (w *worker) consume(fetchCtx, workCtx context.Context, ch *amqp.Channel, st *settler, tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
	// A new consumer: the old one's deliveries are gone (settled before
	// it was cancelled, or with its channel).
	w.deliveries, w.held, w.hasHeld = deliveries, amqp.Delivery{}, false
	for {
		next, d := w.next(fetchCtx, st, changed)
		switch next {
		case nextDelivery:
			if !w.handle(workCtx, fetchCtx, st, d) {
				return endChannelGone
			}
		case nextGone:
			return endChannelGone
		case nextChanged:
			var paused bool
			paused, changed = w.pool.pauseState()
			if paused {
				if !w.cancelAndDrain(workCtx, ch, st, tag) {
					return endChannelGone
				}
				return endPaused
			}
		case nextStop:
			w.cancelAndDrain(workCtx, ch, st, tag)
			return endStopping
		}
	}
}

type nextEvent uint8

const (
	nextDelivery nextEvent = iota + 1
	nextGone               // deliveries closed or an ack failed: the channel is gone
	nextChanged            // the pause state changed
	nextStop               // fetchCtx ended
)

// next waits for what consume does next. A delivery that settle's peek
// holds goes first, once a pause or a stop has had its chance; before
// blocking, the held-back ack is sent, so that no committed delivery stays
// unacked while the worker waits.
func (w *worker) next(fetchCtx context.Context, st *settler, changed <-chan struct{}) (nextEvent, amqp.Delivery) {
	if w.hasHeld {
		select {
		case <-changed:
			return nextChanged, amqp.Delivery{}
		case <-fetchCtx.Done():
			return nextStop, amqp.Delivery{}
		default:
			d, _ := w.takeHeld()
			return nextDelivery, d
		}
	}
	if !st.flush() {
		return nextGone, amqp.Delivery{}
	}
	select {
	case d, ok := <-w.deliveries:
		if !ok {
			return nextGone, amqp.Delivery{}
		}
		return nextDelivery, d
	case <-changed:
		return nextChanged, amqp.Delivery{}
	case <-fetchCtx.Done():
		return nextStop, amqp.Delivery{}
	}
}

// peek reports whether another delivery is ready, holding it for the next
// batch. The library's delivery channel is unbuffered: a receive that does
// not block is the only way to see its backlog.
func (w *worker) peek() bool {
	if w.hasHeld {
		return true
	}
	select {
	case d, ok := <-w.deliveries:
		if ok {
			w.held, w.hasHeld = d, true
			return true
		}
	default:
	}
	return false
}

// takeHeld returns the delivery peek held, if any.
func (w *worker) takeHeld() (amqp.Delivery, bool) {
	if !w.hasHeld {
		return amqp.Delivery{}, false
	}
	d := w.held
	w.held, w.hasHeld = amqp.Delivery{}, false
	return d, true
}

// cancelAndDrain cancels the consumer and handles every delivery the broker
// had already sent; the library closes deliveries once they are all read.
func (w *worker) cancelAndDrain(workCtx context.Context, ch *amqp.Channel, st *settler, tag string) bool {
	if err := ch.Cancel(tag, false); err != nil {
		return false
	}
	for {
		d, ok := w.takeHeld()
		if !ok {
			if d, ok = <-w.deliveries; !ok {
				break
			}
		}
		if !w.handle(workCtx, nil, st, d) {
			return false
		}
	}
	return st.flush()
}

// serve handles the deliveries a partitioned pool's reader hands this
// worker, settling them through st, until in is closed. If the shared
// channel dies, the rest of in is dropped: those deliveries come back
// redelivered.
func (w *worker) serve(workCtx, fetchCtx context.Context, st *settler, in <-chan amqp.Delivery) {
	w.deliveries, w.held, w.hasHeld = in, amqp.Delivery{}, false
	for {
		d, ok := w.takeHeld()
		if !ok {
			if !st.flush() {
				break
			}
			if d, ok = <-in; !ok {
				return
			}
		}
		if !w.handle(workCtx, fetchCtx, st, d) {
			break
		}
	}
	for range in { //nolint:revive // drop the dead channel's deliveries
	}
}

// handle gathers a batch starting with first and processes and settles it.
// It returns false when the channel is gone.
func (w *worker) handle(workCtx, fetchCtx context.Context, st *settler, first amqp.Delivery) bool {
	size := min(w.pool.cfg.BatchSize, w.prefetch)
	lim, taken := w.pool.lim.Load(), 0
	if lim != nil && fetchCtx != nil {
		// A rate limit: the batch is cut to the tokens there are; what
		// waits stays with the broker (limits.go).
		taken, size = w.throttle(fetchCtx, lim, size)
	}
	batch := w.collectUpTo(first, w.deliveries, size)
	if taken > 0 {
		settleTokens(lim, len(batch), taken)
	}
	w.pool.inFlight.Add(int64(len(batch)))
	w.pool.count.m.inFlight.Add(float64(len(batch)))
	ok := w.processBatch(workCtx, st, batch)
	w.pool.inFlight.Add(-int64(len(batch)))
	w.pool.workedAt.Store(time.Now().UnixNano())
	w.pool.count.m.inFlight.Sub(float64(len(batch)))
	if w.wait > 0 && fetchCtx != nil {
		// The last batch could not be committed (database down?): do not
		// spin through requeued deliveries.
		startstop.Sleep(fetchCtx, w.wait)
	}
	return ok
}

// batchBackoffMin is how long a worker waits after a batch whose outcome
// was unknown; each further one in a row doubles it.
const batchBackoffMin = 500 * time.Millisecond

// idleLinger is how long a worker that is not busy waits for a second
// delivery: long enough for the library's delivery goroutine to hand over
// a backlog (its channel is unbuffered, so a receive that does not wait
// at all finds the next delivery only when that goroutine is already
// parked on it), short enough not to count as latency.
const idleLinger = 250 * time.Microsecond

// collect takes first plus what arrives within BatchWait, up to size,
// but lingers the full BatchWait only while the worker is busy (its
// previous batch was at least half full). Otherwise it stops as soon as
// idleLinger passes without a delivery: at low load a lone delivery is
// committed at once instead of waiting for company that is not coming, and
// under load a backlog, handed over a delivery at a time, fills the batch,
// which makes the worker busy again.
func (w *worker) collect(first amqp.Delivery, deliveries <-chan amqp.Delivery) []message {
	return w.collectUpTo(first, deliveries, min(w.pool.cfg.BatchSize, w.prefetch))
}

// collectUpTo is collect with a batch of at most size deliveries.
func (w *worker) collectUpTo(first amqp.Delivery, deliveries <-chan amqp.Delivery, size int) (batch []message) {
	batch = append(w.batch[:0], message{d: first})
	// A batch cannot outgrow the worker's prefetch window (size is at most
	// that, and less under a rate limit): busy is judged against what the
	// window lets it reach.
	wait := w.pool.cfg.BatchWait
	busy := 2*w.lastBatch >= size
	var started time.Time
	defer func() {
		w.lastBatch = len(batch)
		w.timer.Stop() // since Go 1.23 a Stop or Reset leaves no stale tick to drain
	}()
	for len(batch) < size {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, message{d: d})
			continue
		default:
		}
		if wait <= 0 {
			return batch
		}
		// Busy: wait out batch.wait. Idle: wait idleLinger after each
		// delivery, within batch.wait: a backlog handed over one delivery
		// at a time keeps filling the batch, a lone event goes at once.
		if started.IsZero() {
			started = time.Now()
		}
		left := wait - time.Since(started)
		if !busy {
			left = min(left, w.idleLinger)
		}
		if left <= 0 {
			return batch
		}
		w.timer.Reset(left)
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, message{d: d})
		case <-w.timer.C:
			return batch
		}
	}
	return batch
}

// newSettler returns the settler of a fresh channel.
func (w *worker) newSettler(ch acker) *settler {
	p := w.pool
	st := &settler{
		ch: ch, pub: w.pub, store: p.deps.Failures, ordered: p.cfg.OrderedFailures,
		queue: p.cfg.Queue, pool: p.cfg.Name, delays: p.cfg.RetryDelays,
		limit: w.ackLimit, timeout: SettleTimeoutDefault, count: &p.count, log: w.log,
		redeclareFunc: p.redeclareDelays,
		ackFunc: func(tag uint64) {
			if f := p.cfg.testAckFunc; f != nil {
				f(w.id, tag)
			}
		},
	}
	if p.cfg.PartitionKey != "" {
		st.key = newPartitionKey(p.cfg.PartitionKey)
	}
	return st
}

// rules returns the pool's decoding and deciding rules, with the horizon
// in force now.
func (w *worker) rules() rules {
	p := w.pool
	r := rules{
		pool: p.cfg.Name, queue: p.cfg.Queue, maxBodyBytes: p.cfg.MaxBodyBytes,
		handles: p.deps.Processor.Handles, quarantine: p.cfg.BeyondHorizon == config.BeyondHorizonQuarantine,
		delays: p.cfg.RetryDelays,
	}
	if p.cfg.HorizonFunc != nil {
		r.horizon = p.cfg.HorizonFunc()
	}
	return r
}

// batchFailed notes a batch whose outcome is unknown: the database is
// likely away, so the worker waits longer after each batch in a row that
// fails, so as not to spin through requeued deliveries (at most
// startstop.BackoffMaxDefault), and says so in Info.
func (w *worker) batchFailed(workCtx context.Context, err error) {
	p := w.pool
	p.count.m.batchErrors.Inc()
	w.wait = w.retry.Next()
	if workCtx.Err() == nil {
		p.setDatabaseError(err)
		w.log.WarnContext(workCtx, "workers: batch outcome unknown, requeueing", slog.Int("events", len(w.events)),
			slog.Any("error", err), slog.Duration("backoff", w.wait))
	}
}

// processBatch decodes batch, runs the dedup step over the events that can
// run, decides every delivery's settlement and settles the batch. It
// returns false when the channel is gone.
func (w *worker) processBatch(workCtx context.Context, st *settler, batch []message) bool {
	start := time.Now()
	p := w.pool
	r := w.rules()
	w.events = r.decode(batch, start, w.events[:0])
	var results []dedup.Result
	var err error
	if p.cfg.OrderedFailures {
		if err = keepOrder(workCtx, p.deps.Failures, p.cfg.Name, w.orderKey, batch); err == nil {
			w.events = w.events[:0]
			for i := range batch {
				if batch[i].runs() {
					w.events = append(w.events, batch[i].ev)
				}
			}
		}
	}
	w.startSpans(batch, w.events, start) //nolint:contextcheck // a delivery's trace is its producer's, not workCtx's
	if err != nil {
		w.batchFailed(workCtx, err)
	} else if len(w.events) > 0 {
		hstart := time.Now()
		results, err = p.deps.Processor.Process(workCtx, w.events)
		switch {
		case err != nil:
			w.batchFailed(workCtx, err)
		default:
			if w.wait > 0 {
				w.wait = 0
				w.retry.Reset()
				p.setDatabaseError(nil)
			}
			p.count.m.handlerDuration.Observe(time.Since(hstart).Seconds() / float64(len(w.events)))
		}
	}
	r.decide(batch, results, err)
	w.stampCopies(workCtx, batch)
	if p.cfg.testBeforeSettleFunc != nil {
		p.cfg.testBeforeSettleFunc()
	}
	ok := st.settle(workCtx, batch, w.peek)
	w.endSpans(batch, err, ok)
	p.count.m.batchSize.Observe(float64(len(batch)))
	p.count.m.batchDuration.Observe(time.Since(start).Seconds())
	return ok
}
