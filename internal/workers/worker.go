package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/metrics"
)

// poolMetrics are a pool's collectors with their labels bound once, so the
// hot path does no label lookups.
type poolMetrics struct {
	processed, duplicate, retried, failed, rejected prometheus.Counter
	dupRedelivery, dupReplay, dupRepublish          prometheus.Counter
	failures                                        *prometheus.CounterVec
	batchDuration, batchSize, handlerDuration       prometheus.Observer
	paused, inFlight                                prometheus.Gauge
	batchErrors, reconnects                         prometheus.Counter
}

func newPoolMetrics(m *metrics.Metrics, service, pool string) poolMetrics {
	out := func(o string) prometheus.Counter { return m.MessagesTotal.WithLabelValues(service, pool, o) }
	dup := func(s string) prometheus.Counter { return m.DuplicatesTotal.WithLabelValues(service, pool, s) }
	return poolMetrics{
		processed: out(metrics.OutcomeProcessed), duplicate: out(metrics.OutcomeDuplicate),
		retried: out(metrics.OutcomeRetried), failed: out(metrics.OutcomeFailed), rejected: out(metrics.OutcomeRejected),
		dupRedelivery: dup(metrics.SourceRedelivery), dupReplay: dup(metrics.SourceReplay), dupRepublish: dup(metrics.SourceRepublish),
		failures:        m.FailuresTotal.MustCurryWith(prometheus.Labels{"service": service, "pool": pool}),
		batchDuration:   m.BatchDuration.WithLabelValues(service, pool),
		batchSize:       m.BatchSize.WithLabelValues(service, pool),
		handlerDuration: m.HandlerDuration.WithLabelValues(service, pool),
		paused:          m.PoolPaused.WithLabelValues(service, pool),
		inFlight:        m.PoolInFlight.WithLabelValues(service, pool),
		batchErrors:     m.BatchErrors.WithLabelValues(service, pool),
		reconnects:      m.Reconnects.WithLabelValues(service, pool),
	}
}

// action is what settling does with one delivery.
type actionKind uint8

const (
	actAck     actionKind = iota + 1 // outcome durable: ack
	actRequeue                       // outcome unknown: nack and requeue
	actRetry                         // copy to a delay queue, then ack
	actFail                          // copy to the failure queue, then ack
)

// eventIDText is a's event id as logged ("" when it did not decode).
func (a *action) eventIDText() string {
	if a.eventID == uuid.Nil {
		return ""
	}
	return a.eventID.String()
}

type action struct {
	kind    actionKind
	reason  string // failure reason
	err     string // error text for headers and logs
	attempt int    // next attempt for a retry
	// eventID is the envelope's id (uuid.Nil when it did not decode),
	// formatted only for the logs of the rare failed message.
	eventID uuid.UUID
	outcome string // metrics outcome once settled
	source  string // duplicate source
}

// worker is one consumer of a pool: one channel, one batch at a time.
type worker struct {
	pool *Pool
	id   int
	log  *slog.Logger
	pub  *Publisher

	prefetch  int
	backoff   time.Duration
	timer     *time.Timer
	batch     []amqp.Delivery
	acts      []action
	events    []consumer.Event
	eventIdx  []int
	consumers int

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
	// ack is the ack held back for the next batch's multiple ack.
	ack pendingAck
}

// pendingAck is an ack held back: every delivery up to tag is committed
// (processed or duplicate) and will be acked by the next multiple ack on
// the channel. Its counts reach the metrics once the ack is sent.
type pendingAck struct {
	tag                                         uint64
	n, processed, redelivery, replay, republish int
}

func newWorker(p *Pool, id int) *worker {
	prefetch := max((p.cfg.Prefetch+p.cfg.Concurrency-1)/p.cfg.Concurrency, p.cfg.BatchSize)
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &worker{
		pool:     p,
		id:       id,
		log:      p.log.With(slog.Int("worker", id)),
		pub:      NewPublisher(p.deps.Publish, p.cfg.BatchSize),
		prefetch: prefetch,
		timer:    t,
		batch:    make([]amqp.Delivery, 0, p.cfg.BatchSize),
		// A quarter of the window: the broker keeps three quarters to
		// send while acks are held back.
		ackLimit:   max(prefetch/4, 1),
		idleLinger: idleLinger,
	}
}

// run keeps a consuming session alive until fetchCtx ends.
func (w *worker) run(fetchCtx, workCtx context.Context) {
	defer w.pub.Close()
	defer w.pool.setIdle(w.id, true)
	backoff := BackoffMinDefault
	for fetchCtx.Err() == nil {
		start := time.Now()
		err := w.session(fetchCtx, workCtx)
		if fetchCtx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff = BackoffMinDefault
		}
		w.log.WarnContext(fetchCtx, "workers: consumer session ended, restarting", slog.Any("error", err), slog.Duration("backoff", backoff))
		select {
		case <-fetchCtx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, BackoffMaxDefault)
	}
}

type sessionEnd uint8

const (
	endPaused sessionEnd = iota + 1
	endStopping
	endChannelGone
)

// session opens a fresh channel, declares the topology and consumes until
// the channel dies or fetchCtx ends.
func (w *worker) session(fetchCtx, workCtx context.Context) error {
	conn, err := w.pool.deps.Consume.Get(fetchCtx)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := w.pool.cfg.Topology.Declare(ch); err != nil {
		return err
	}
	if err := ch.Qos(w.prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	w.pool.connected.Add(1)
	defer w.pool.connected.Add(-1)
	for {
		paused, changed := w.pool.pauseState()
		if paused {
			w.pool.setIdle(w.id, true)
			select {
			case <-changed:
				continue
			case <-fetchCtx.Done():
				return nil
			case e := <-closed:
				return fmt.Errorf("channel closed while paused: %w", amqpErr(e))
			}
		}
		w.pool.setIdle(w.id, false)
		w.consumers++
		tag := fmt.Sprintf("platformd.%s.%d.%d.%d", w.pool.cfg.Name, w.id, time.Now().UnixNano(), w.consumers)
		deliveries, err := ch.Consume(w.pool.cfg.Queue, tag, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", w.pool.cfg.Queue, err)
		}
		switch w.consume(fetchCtx, workCtx, ch, tag, deliveries, changed) {
		case endPaused:
			continue
		case endStopping:
			return nil
		case endChannelGone:
			select {
			case e := <-closed:
				return fmt.Errorf("channel closed: %w", amqpErr(e))
			default:
				return errors.New("consumer cancelled by the broker")
			}
		}
	}
}

func amqpErr(e *amqp.Error) error {
	if e == nil {
		return errors.New("closed")
	}
	return e
}

// consume reads deliveries into batches and handles them until the pool is
// paused, fetchCtx ends (both: cancel the consumer, then drain and handle
// what the broker already sent) or the deliveries channel closes.
func (w *worker) consume(fetchCtx, workCtx context.Context, ch *amqp.Channel, tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) sessionEnd {
	// A new channel: the old one's tags and deliveries are gone.
	w.deliveries, w.ack, w.held, w.hasHeld = deliveries, pendingAck{}, amqp.Delivery{}, false
	for {
		next, d := w.next(fetchCtx, ch, changed)
		switch next {
		case nextDelivery:
			if !w.handle(workCtx, fetchCtx, ch, d) {
				return endChannelGone
			}
		case nextGone:
			return endChannelGone
		case nextChanged:
			var paused bool
			paused, changed = w.pool.pauseState()
			if paused {
				if !w.cancelAndDrain(workCtx, ch, tag) {
					return endChannelGone
				}
				return endPaused
			}
		case nextStop:
			w.cancelAndDrain(workCtx, ch, tag)
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
func (w *worker) next(fetchCtx context.Context, ch *amqp.Channel, changed <-chan struct{}) (nextEvent, amqp.Delivery) {
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
	if !w.flushAck(ch) {
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
func (w *worker) cancelAndDrain(workCtx context.Context, ch *amqp.Channel, tag string) bool {
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
		if !w.handle(workCtx, nil, ch, d) {
			return false
		}
	}
	return w.flushAck(ch)
}

// handle gathers a batch starting with first and processes and settles it.
// It returns false when the channel is gone.
func (w *worker) handle(workCtx, fetchCtx context.Context, ch *amqp.Channel, first amqp.Delivery) bool {
	batch := w.collect(first, w.deliveries)
	w.pool.inFlight.Add(int64(len(batch)))
	w.pool.m.inFlight.Add(float64(len(batch)))
	ok := w.processBatch(workCtx, ch, batch)
	w.pool.inFlight.Add(-int64(len(batch)))
	w.pool.m.inFlight.Sub(float64(len(batch)))
	if w.backoff > 0 && fetchCtx != nil {
		// The last batch could not be committed (database down?): do not
		// spin through requeued deliveries.
		select {
		case <-fetchCtx.Done():
		case <-time.After(jitter(w.backoff)):
		}
	}
	return ok
}

// idleLinger is how long a worker that is not busy waits for a second
// delivery: long enough for the library's delivery goroutine to hand over
// a backlog (its channel is unbuffered, so a receive that does not wait
// at all finds the next delivery only when that goroutine is already
// parked on it), short enough not to count as latency.
const idleLinger = 250 * time.Microsecond

// collect takes first plus what arrives within BatchWait, up to BatchSize,
// but lingers the full BatchWait only while the worker is busy (its
// previous batch was at least half full). Otherwise it stops as soon as
// idleLinger passes without a delivery: at low load a lone delivery is
// committed at once instead of waiting for company that is not coming, and
// under load a backlog, handed over a delivery at a time, fills the batch,
// which makes the worker busy again.
func (w *worker) collect(first amqp.Delivery, deliveries <-chan amqp.Delivery) (batch []amqp.Delivery) {
	batch = append(w.batch[:0], first)
	size, wait := w.pool.cfg.BatchSize, w.pool.cfg.BatchWait
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
			batch = append(batch, d)
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
			batch = append(batch, d)
		case <-w.timer.C:
			return batch
		}
	}
	return batch
}

// processBatch decodes, runs the dedup step and settles every delivery.
func (w *worker) processBatch(workCtx context.Context, ch *amqp.Channel, batch []amqp.Delivery) bool {
	start := time.Now()
	p := w.pool
	if cap(w.acts) < len(batch) {
		w.acts = make([]action, len(batch))
	}
	w.acts = w.acts[:len(batch)]
	clear(w.acts)
	w.events = w.events[:0]
	w.eventIdx = w.eventIdx[:0]
	horizon := time.Duration(0)
	if p.cfg.HorizonFunc != nil {
		horizon = p.cfg.HorizonFunc()
	}
	for i := range batch {
		d := &batch[i]
		env, err := envelope.Decode(d.Body, p.cfg.MaxBodyBytes)
		if err != nil {
			w.acts[i] = action{kind: actFail, reason: ReasonDecode, err: err.Error(), outcome: metrics.OutcomeRejected}
			continue
		}
		ev := toEvent(env, d, p.cfg.Name, p.cfg.Queue)
		id := ev.ID
		if !p.deps.Processor.Handles(ev.Name) {
			w.acts[i] = action{kind: actFail, reason: ReasonNoHandler, eventID: id, outcome: metrics.OutcomeRejected,
				err: fmt.Sprintf("no handler of pool %s handles event %q", p.cfg.Name, ev.Name)}
			continue
		}
		if horizon > 0 && p.cfg.BeyondHorizon == BeyondHorizonQuarantine && !beyondHorizonOverride(d) {
			if at := eventTime(ev); start.Sub(at) > horizon {
				w.acts[i] = action{kind: actFail, reason: ReasonBeyondHorizon, eventID: id, outcome: metrics.OutcomeRejected,
					err: fmt.Sprintf("event from %s is older than the service's %s replay horizon: its processed_event row may have been purged", at.UTC().Format(time.RFC3339), horizon)}
				continue
			}
		}
		w.acts[i].eventID = id
		w.events = append(w.events, ev)
		w.eventIdx = append(w.eventIdx, i)
	}
	w.backoff = 0
	if len(w.events) > 0 {
		hstart := time.Now()
		results, err := p.deps.Processor.Process(workCtx, w.events)
		if err != nil {
			p.m.batchErrors.Inc()
			w.backoff = 500 * time.Millisecond
			if workCtx.Err() == nil {
				w.log.WarnContext(workCtx, "workers: batch outcome unknown, requeueing", slog.Int("events", len(w.events)), slog.Any("error", err))
			}
			for _, i := range w.eventIdx {
				w.acts[i].kind = actRequeue
			}
		} else {
			p.m.handlerDuration.Observe(time.Since(hstart).Seconds() / float64(len(w.events)))
			for k, r := range results {
				i := w.eventIdx[k]
				w.acts[i] = w.decide(&batch[i], w.events[k], r, w.acts[i])
			}
		}
	}
	if p.cfg.testBeforeSettleFunc != nil {
		p.cfg.testBeforeSettleFunc()
	}
	ok := w.settle(workCtx, ch, batch)
	p.m.batchSize.Observe(float64(len(batch)))
	p.m.batchDuration.Observe(time.Since(start).Seconds())
	return ok
}

// decide turns a dedup result into an action.
func (w *worker) decide(d *amqp.Delivery, ev consumer.Event, r dedup.Result, a action) action {
	switch r.Outcome {
	case dedup.OutcomeProcessed:
		a.kind, a.outcome = actAck, metrics.OutcomeProcessed
	case dedup.OutcomeDuplicate:
		a.kind, a.outcome, a.source = actAck, metrics.OutcomeDuplicate, duplicateSource(d)
	default:
		errText := r.Err.Error()
		if r.Handler != "" {
			errText = r.Handler + ": " + errText
		}
		a.err = errText
		delays := w.pool.cfg.RetryDelays
		switch {
		case r.Permanent:
			a.kind, a.reason, a.outcome = actFail, ReasonPermanent, metrics.OutcomeFailed
		case ev.Attempt < len(delays):
			a.kind, a.attempt, a.outcome = actRetry, ev.Attempt+1, metrics.OutcomeRetried
		default:
			a.kind, a.reason, a.outcome = actFail, ReasonRetriesExhausted, metrics.OutcomeFailed
		}
	}
	return a
}

// settle publishes the retry and failure copies, waits for their confirms,
// then acks what is durable and requeues the rest. Acks use one multiple
// ack up to the highest tag: every older tag on this channel belongs to
// this batch (batches are settled in order, one at a time).
func (w *worker) settle(workCtx context.Context, ch *amqp.Channel, batch []amqp.Delivery) bool {
	p := w.pool
	var out []outgoing
	var outIdx []int
	now := time.Now()
	for i := range batch {
		a := &w.acts[i]
		switch a.kind {
		case actRetry:
			delay := p.cfg.RetryDelays[a.attempt-1]
			out = append(out, outgoing{queue: RetryQueue(p.cfg.Queue, delay), msg: retryCopy(&batch[i], a.attempt, a.err)})
			outIdx = append(outIdx, i)
		case actFail:
			out = append(out, outgoing{queue: FailedQueue(p.cfg.Queue), msg: failureCopy(&batch[i], p.cfg.Name, a.reason, a.err, now)})
			outIdx = append(outIdx, i)
		}
	}
	if len(out) > 0 {
		ctx, cancel := context.WithTimeout(workCtx, SettleTimeoutDefault)
		errs := w.pub.Publish(ctx, out)
		cancel()
		for k, err := range errs {
			a := &w.acts[outIdx[k]]
			if err != nil {
				w.log.WarnContext(workCtx, "workers: copy not confirmed, requeueing original",
					slog.String("event_id", a.eventIDText()), slog.String("queue", out[k].queue), slog.Any("error", err))
				a.kind = actRequeue
				continue
			}
			w.logCopy(workCtx, a)
		}
	}
	var maxAck uint64
	alive, plain := true, len(out) == 0
	for i := range batch {
		a := &w.acts[i]
		if a.kind == actRequeue {
			plain = false
			if err := ch.Nack(batch[i].DeliveryTag, false, true); err != nil {
				alive = false
			}
			continue
		}
		maxAck = max(maxAck, batch[i].DeliveryTag)
	}
	if !alive {
		return false
	}
	if maxAck == 0 {
		return w.flushAck(ch) && !ch.IsClosed()
	}
	w.hold(batch, maxAck)
	if plain && w.ack.n <= w.ackLimit && w.peek() {
		// Every delivery is committed and more are waiting: the next
		// batch's multiple ack covers these too. One ack frame for several
		// batches is what makes batch size 1 cheaper for the broker than
		// an ack per message; a crash before it only redelivers committed
		// events, which the dedup step skips.
		return !ch.IsClosed()
	}
	// The channel died if this fails: the broker requeues every unacked
	// delivery, and the redelivery of a committed one is a duplicate.
	if !w.flushAck(ch) {
		return false
	}
	w.countCopied(batch)
	return !ch.IsClosed()
}

// hold adds batch's acked deliveries (up to tag) to the ack held for the
// next multiple ack, counting the processed and duplicate ones.
func (w *worker) hold(batch []amqp.Delivery, tag uint64) {
	w.ack.tag = tag
	for i := range batch {
		a := &w.acts[i]
		if a.kind == actRequeue {
			continue
		}
		w.ack.n++
		if a.kind != actAck {
			continue // copied: counted by countCopied once acked
		}
		switch {
		case a.outcome == metrics.OutcomeProcessed:
			w.ack.processed++
		case a.source == metrics.SourceRedelivery:
			w.ack.redelivery++
		case a.source == metrics.SourceReplay:
			w.ack.replay++
		default:
			w.ack.republish++
		}
	}
}

// flushAck sends the held-back ack, if any; false when the channel is gone
// (the broker then redelivers those deliveries, as duplicates).
func (w *worker) flushAck(ch *amqp.Channel) bool {
	if w.ack.tag == 0 {
		return true
	}
	tag := w.ack.tag
	w.ack.tag = 0
	if err := w.sendAck(ch, tag); err != nil {
		w.ack = pendingAck{}
		return false
	}
	w.countHeld()
	return true
}

// sendAck acks every delivery up to tag on ch.
func (w *worker) sendAck(ch *amqp.Channel, tag uint64) error {
	if err := ch.Ack(tag, true); err != nil {
		return err
	}
	if f := w.pool.cfg.testAckFunc; f != nil {
		f(w.id, tag)
	}
	return nil
}

// countHeld moves the counts of an ack that was just sent to the metrics.
func (w *worker) countHeld() {
	p, a := w.pool, w.ack
	w.ack = pendingAck{}
	if a.n == 0 {
		return
	}
	p.processed.Add(uint64(a.processed))
	p.m.processed.Add(float64(a.processed))
	dups := a.redelivery + a.replay + a.republish
	p.duplicates.Add(uint64(dups))
	p.dupRedelivery.Add(uint64(a.redelivery))
	p.dupReplay.Add(uint64(a.replay))
	p.dupRepublish.Add(uint64(a.republish))
	p.m.duplicate.Add(float64(dups))
	p.m.dupRedelivery.Add(float64(a.redelivery))
	p.m.dupReplay.Add(float64(a.replay))
	p.m.dupRepublish.Add(float64(a.republish))
}

func (w *worker) logCopy(ctx context.Context, a *action) {
	if a.kind == actRetry {
		w.log.DebugContext(ctx, "workers: event retried", slog.String("event_id", a.eventIDText()),
			slog.Int("attempt", a.attempt), slog.String("error", a.err))
		return
	}
	w.log.WarnContext(ctx, "workers: message to failure queue", slog.String("event_id", a.eventIDText()),
		slog.String("reason", a.reason), slog.String("error", a.err))
}

// countCopied counts the deliveries of batch that were copied to a retry
// or failure queue, once their originals are acked.
func (w *worker) countCopied(batch []amqp.Delivery) {
	p := w.pool
	for i := range batch {
		a := &w.acts[i]
		switch {
		case a.kind == actRetry:
			p.retried.Add(1)
			p.m.retried.Inc()
		case a.kind == actFail:
			p.failed.Add(1)
			if a.outcome == metrics.OutcomeFailed {
				p.m.failed.Inc()
			} else {
				p.m.rejected.Inc()
			}
			p.m.failures.WithLabelValues(a.reason).Inc()
		}
	}
}
