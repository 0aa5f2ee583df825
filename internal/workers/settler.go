package workers

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/failure"
)

// acker is what settling needs of a consuming channel (*amqp.Channel):
// acks and nacks by delivery tag, and whether the channel died.
type acker interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	IsClosed() bool
}

// copier publishes retry and failure copies with publisher confirms
// (*Publisher): one error per copy, nil only once the broker confirmed it
// and did not return it.
type copier interface {
	Publish(ctx context.Context, out []broker.Outgoing) []error
}

// settler settles one channel's batches, in order, one at a time. Its ack
// discipline:
//   - a retry or failure copy is confirmed before its original is acked
//     (a copy not confirmed requeues the original instead);
//   - acks are multiple acks up to the highest tag of a batch whose
//     deliveries are all settled: every older unacked tag on the channel
//     belongs to that batch, since the channel is the worker's own;
//   - when a batch is all committed and another delivery already waits,
//     the ack is held for the next batch's multiple ack (at most limit
//     deliveries held): losing a held ack only redelivers committed events,
//     which the dedup step skips;
//   - a held ack is sent before the worker blocks (flush), on pause and on
//     stop.
//
// A settler belongs to one channel: a new channel gets a new settler, and
// the old one's held ack is dropped with its tags. It is not safe for
// concurrent use.
type settler struct {
	ch    acker
	pub   copier
	store failureStore
	// ordered is the pool's failures.ordered: a key's event going to a
	// retry delay is stored, blocking the key.
	ordered bool
	// key finds a failure's sequence key (nil: the pool has no
	// partition_key). Not safe for concurrent use: the settler's own.
	key   *partitionKey
	queue string // the pool's queue, for copy destinations
	pool  string
	// delays are the pool's retry delays (attempt n goes to delays[n-1]).
	delays []time.Duration
	// limit bounds how many settled deliveries a held ack may cover.
	limit   int
	timeout time.Duration // bounds publishing a batch's copies
	count   *counters
	log     *slog.Logger
	// ackFunc, set only by tests, sees every multiple ack once sent.
	ackFunc func(tag uint64)
	// redeclareFunc declares the pool's delay queues again (nil: never):
	// called when a retry copy found no delay queue (deleted by an
	// operator), so that the requeued original's next copy lands.
	redeclareFunc func(ctx context.Context)

	held heldAck
}

// heldAck is an ack held back: every delivery up to tag is committed
// (processed or duplicate) and will be acked by the next multiple ack on
// the channel. Its counts reach the counters once the ack is sent.
type heldAck struct {
	tag uint64
	n   int
	tally
}

// settle publishes batch's retry and failure copies, waits for their
// confirms, then acks what is durable and requeues the rest. more reports
// whether another delivery is already waiting (the next batch then carries
// this one's ack). It returns false when the channel is gone: the broker
// then requeues every unacked delivery, and the redelivery of a committed
// one is a duplicate.
func (st *settler) settle(ctx context.Context, batch []message, more func() bool) bool {
	if st.ch.IsClosed() {
		// Gone while the batch was in the database (a consumer timeout, a
		// node lost): every delivery comes back, so a copy published now
		// would be a second one of its failure.
		return false
	}
	stored := st.storeFailures(ctx, batch)
	copied := st.publishCopies(ctx, batch)
	var maxAck uint64
	alive, plain := true, !copied && !stored
	for i := range batch {
		m := &batch[i]
		if m.s.kind == settleRequeue {
			plain = false
			if err := st.ch.Nack(m.d.DeliveryTag, false, true); err != nil {
				alive = false
			}
			continue
		}
		maxAck = max(maxAck, m.d.DeliveryTag)
	}
	if !alive {
		return false
	}
	if maxAck == 0 {
		return st.flush() && !st.ch.IsClosed()
	}
	st.hold(batch, maxAck)
	if plain && st.held.n <= st.limit && more() {
		// Every delivery is committed and more are waiting: the next
		// batch's multiple ack covers these too. One ack frame for several
		// batches is what makes batch size 1 cheaper for the broker than
		// an ack per message.
		return !st.ch.IsClosed()
	}
	if !st.flush() {
		return false
	}
	for i := range batch {
		st.count.countCopied(batch[i].s)
	}
	return !st.ch.IsClosed()
}

// publishCopies publishes the retry copies of batch and waits for their
// confirms; a copy that is not confirmed turns its original's settlement
// into a requeue. A copy whose failure is stored carries the row's id
// (x-failure-id). It reports whether the batch had copies.
func (st *settler) publishCopies(ctx context.Context, batch []message) bool {
	var out []broker.Outgoing
	var of []*message // the message of each copy
	for i := range batch {
		m := &batch[i]
		if m.s.kind != settleRetry {
			continue
		}
		delay := st.delays[m.s.attempt-1]
		msg := broker.RetryCopy(&m.d, m.s.attempt, m.s.err)
		if m.s.failureID != uuid.Nil {
			msg.Headers[failure.HeaderFailureID] = m.s.failureID.String()
		}
		// To the delay's shared exchange, routed by the pool's queue name:
		// the delay queue dead-letters it back by that routing key.
		out = append(out, broker.Outgoing{Exchange: broker.DelayQueue(delay), RoutingKey: st.queue, Msg: msg})
		of = append(of, m)
	}
	if len(out) == 0 {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, st.timeout)
	errs := st.pub.Publish(pctx, out)
	cancel()
	if st.redeclareFunc != nil && slices.ContainsFunc(errs, missingDelayQueue) {
		st.redeclareFunc(ctx)
	}
	for k, err := range errs {
		m := of[k]
		if err != nil {
			st.log.WarnContext(ctx, "workers: copy not confirmed, requeueing original",
				slog.String("event_id", m.s.eventIDText()), slog.String("delay_queue", out[k].Exchange), slog.Any("error", err))
			m.s.kind = settleRequeue
			continue
		}
		st.logCopy(ctx, m.s)
	}
	return true
}

// missingDelayQueue reports whether err is a retry copy's that found no
// delay queue behind its exchange (returned unroutable) or no exchange
// (404, which closes the publishing channel).
func missingDelayQueue(err error) bool {
	return errors.Is(err, broker.ErrReturned) || broker.IsNotFound(err)
}

// hold adds batch's settled deliveries (up to tag) to the held ack,
// tallying the processed and duplicate ones.
func (st *settler) hold(batch []message, tag uint64) {
	st.held.tag = tag
	for i := range batch {
		s := batch[i].s
		if s.kind == settleRequeue {
			continue
		}
		st.held.n++
		if s.kind == settleAck { // copies are counted once their original is acked
			st.held.add(s)
		}
	}
}

// flush sends the held ack, if any, and counts what it covered; false when
// the channel is gone (the broker then redelivers those deliveries, as
// duplicates).
func (st *settler) flush() bool {
	if st.held.tag == 0 {
		return true
	}
	h := st.held
	// The ages' slice is reused: countAcked is done with it before the
	// next hold appends to it.
	st.held = heldAck{tally: tally{ages: h.ages[:0]}}
	if err := st.ch.Ack(h.tag, true); err != nil {
		return false
	}
	if st.ackFunc != nil {
		st.ackFunc(h.tag)
	}
	st.count.countAcked(h.tally)
	return true
}

func (st *settler) logCopy(ctx context.Context, s settlement) {
	if s.kind == settleRetry {
		st.log.DebugContext(ctx, "workers: event retried", slog.String("event_id", s.eventIDText()),
			slog.Int("attempt", s.attempt), slog.String("error", s.err))
		return
	}
	if s.kind == settlePark {
		st.log.DebugContext(ctx, "workers: event parked", slog.String("event_id", s.eventIDText()),
			slog.String("failure_id", s.failureID.String()), slog.String("error", s.err))
		return
	}
	st.log.WarnContext(ctx, "workers: message stored as a failure", slog.String("event_id", s.eventIDText()),
		slog.String("failure_id", s.failureID.String()), slog.String("reason", s.reason), slog.String("error", s.err))
}

var _ acker = (*amqp.Channel)(nil)

var _ copier = (*broker.Publisher)(nil)
