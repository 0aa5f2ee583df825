package workers

import (
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
)

// settleKind is what settling does with one delivery.
type settleKind uint8

const (
	settleAck     settleKind = iota + 1 // outcome durable: ack
	settleRequeue                       // outcome unknown: nack and requeue
	settleRetry                         // copy to a delay queue, then ack
	settleFail                          // store in the failure store, then ack
	settlePark                          // store parked behind its key's failure, then ack
)

// settlement is the fate of one delivery of a batch: what settling does
// with it and what it counts as once settled.
type settlement struct {
	kind    settleKind
	reason  string // failure reason (settleFail)
	err     string // error text for headers and logs
	attempt int    // next attempt (settleRetry)
	// eventID is the envelope's id (uuid.Nil when it did not decode),
	// formatted only for the logs of the rare failed message.
	eventID uuid.UUID
	outcome string // metrics outcome once settled
	source  string // duplicate source
	// age is a duplicate's age when it was decided: now minus its event's
	// time (eventTime).
	age     time.Duration
	handler string // the handler that failed, if one did
	// failureID is the row of the failure store the delivery's settling
	// wrote (a retry copy carries it as x-failure-id).
	failureID uuid.UUID
}

// eventIDText is s's event id as logged ("" when it did not decode).
func (s settlement) eventIDText() string {
	if s.eventID == uuid.Nil {
		return ""
	}
	return s.eventID.String()
}

// message is one delivery of a batch, its event once decoded, and its
// settlement once decided. A batch is a []message passed from step to step
// (decode, decide, settle): each step reads and writes the messages.
type message struct {
	d    amqp.Delivery
	ev   consumer.Event
	s    settlement
	span trace.Span // the delivery's span (nil when tracing is off or its sampler dropped it)
	// sc is the delivery span's context, also when the sampler dropped
	// the span (no span was started): what its handlers and copies
	// propagate.
	sc trace.SpanContext
}

// runs reports whether the message's event goes to the dedup step: it
// decoded and passed the checks (no settlement decided yet).
func (m *message) runs() bool { return m.s.kind == 0 }

// rules are what decoding and deciding need of a pool's configuration.
type rules struct {
	pool, queue  string
	maxBodyBytes int
	// handles reports whether a handler of the pool handles an event name.
	handles func(eventName string) bool
	// horizon is the service's replay horizon in force; with quarantine,
	// events older than it are not run (0: no guard).
	horizon    time.Duration
	quarantine bool
	delays     []time.Duration
}

// decode decodes every message of batch and decides, at once, the
// settlement of those that cannot run: an undecodable body, an event no
// handler of the pool handles, an event beyond the replay horizon. It
// appends the events of the others to events, in batch order, and returns
// it.
func (r rules) decode(batch []message, now time.Time, events []consumer.Event) []consumer.Event {
	for i := range batch {
		m := &batch[i]
		m.s = settlement{}
		env, err := envelope.Decode(m.d.Body, r.maxBodyBytes)
		if err != nil {
			m.s = settlement{kind: settleFail, reason: broker.ReasonDecode, err: err.Error(), outcome: metrics.OutcomeRejected}
			continue
		}
		m.ev = toEvent(env, &m.d, r.pool, r.queue)
		m.ev.Delivery.FailureID = failureIDOf(m.d.Headers)
		id := m.ev.ID
		if !r.handles(m.ev.Name) {
			m.s = settlement{kind: settleFail, reason: broker.ReasonNoHandler, eventID: id, outcome: metrics.OutcomeRejected,
				err: fmt.Sprintf("no handler of pool %s handles event %q", r.pool, m.ev.Name)}
			continue
		}
		if r.horizon > 0 && r.quarantine && !broker.BeyondHorizonOverride(&m.d) {
			if at := eventTime(m.ev); now.Sub(at) > r.horizon {
				m.s = settlement{kind: settleFail, reason: broker.ReasonBeyondHorizon, eventID: id, outcome: metrics.OutcomeRejected,
					err: fmt.Sprintf("event from %s is older than the service's %s replay horizon: its processed_event row may have been purged",
						at.UTC().Format(time.RFC3339), r.horizon)}
				continue
			}
		}
		events = append(events, m.ev)
	}
	return events
}

// decide sets the settlement of every message that ran from the dedup
// step's results, given in the order of the messages that ran; when the
// batch's outcome is unknown (err), those messages are requeued.
func (r rules) decide(batch []message, results []dedup.Result, err error) {
	k := 0
	for i := range batch {
		m := &batch[i]
		if !m.runs() {
			continue
		}
		if err != nil {
			m.s = settlement{kind: settleRequeue, eventID: m.ev.ID}
			continue
		}
		m.s = r.settlementOf(&m.d, m.ev, results[k])
		k++
	}
}

// settlementOf turns one dedup result into a settlement: processed and
// duplicate events are acked; a failure is retried through the next delay
// queue while attempts remain, else (or when permanent) sent to the failure
// queue.
func (r rules) settlementOf(d *amqp.Delivery, ev consumer.Event, res dedup.Result) settlement {
	s := settlement{eventID: ev.ID}
	switch res.Outcome {
	case dedup.OutcomeProcessed:
		s.kind, s.outcome = settleAck, metrics.OutcomeProcessed
	case dedup.OutcomeDuplicate:
		s.kind, s.outcome, s.source = settleAck, metrics.OutcomeDuplicate, duplicateSource(d)
		s.age = time.Since(eventTime(ev))
	case dedup.OutcomeParked:
		s.kind, s.reason, s.outcome = settlePark, failure.ReasonParked, metrics.OutcomeRetried
		s.err = fmt.Sprintf("parked: an earlier event of key %q failed in the same batch", ev.Delivery.SequenceKey)
	default:
		s.err = res.ErrorText()
		s.handler = res.Handler
		switch {
		case res.BeyondHorizon: // refused by a partitioned processed_event
			s.kind, s.reason, s.outcome = settleFail, broker.ReasonBeyondHorizon, metrics.OutcomeRejected
		case res.Permanent:
			s.kind, s.reason, s.outcome = settleFail, broker.ReasonPermanent, metrics.OutcomeFailed
		case ev.Attempt < len(r.delays):
			s.kind, s.attempt, s.outcome = settleRetry, ev.Attempt+1, metrics.OutcomeRetried
		default:
			s.kind, s.reason, s.outcome = settleFail, broker.ReasonRetriesExhausted, metrics.OutcomeFailed
		}
	}
	return s
}
