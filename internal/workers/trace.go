package workers

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
)

// Attributes of a delivery span beyond the messaging conventions'
// (docs/tracing.md).
const (
	AttrService = attribute.Key("platformd.service")
	AttrPool    = attribute.Key("platformd.pool")
	// AttrOutcome is the metrics' outcome (processed, duplicate, retried,
	// failed, rejected); absent when the delivery was requeued, which the
	// metrics do not count either.
	AttrOutcome = attribute.Key("platformd.outcome")
	// AttrSettlement is what became of a delivery that was not simply
	// acked: retry (a copy on a delay queue, then ack), failure_store (a
	// row of the failure store, then ack), parked (a row parked behind its
	// key's failure, then ack) or requeue (nack: outcome unknown, a copy
	// not confirmed or a row not stored). Absent, the delivery was acked: its
	// outcome is processed or duplicate.
	AttrSettlement = attribute.Key("platformd.settlement")
	// AttrAttempt is the delivery's x-attempt: 1 on the first retry, and
	// so on; absent on a first delivery.
	AttrAttempt = attribute.Key("platformd.attempt")
	// AttrFailureReason is the reason a failure was stored for.
	AttrFailureReason = attribute.Key("platformd.failure_reason")
	// AttrFailureID is the id of a stored failure's row.
	AttrFailureID = attribute.Key("platformd.failure_id")
)

// Events recorded on a delivery span when it is settled by a copy.
const (
	EventRetryCopy   = "retry copy confirmed"
	EventFailureCopy = "failure stored"
	EventRequeued    = "requeued"
	EventChannelLost = "channel closed before the ack"
)

// tracer is a worker's tracing of its deliveries; t is nil when tracing is
// off, and then no step of it runs.
type tracer struct {
	t    trace.Tracer
	name string                // "process <queue>"
	kind trace.SpanStartOption // CONSUMER
	// pool are the pool's attributes, the same on every span.
	pool []attribute.KeyValue
	// attrs is scratch for one span's attributes. A span gets them all in
	// one call, when it ends: the SDK then copies them once, where one
	// call per step would grow its slice at every step.
	attrs []attribute.KeyValue
}

func newTracer(cfg Config, t trace.Tracer) tracer {
	if t == nil {
		return tracer{}
	}
	return tracer{
		t: t, name: "process " + cfg.Queue, kind: trace.WithSpanKind(trace.SpanKindConsumer),
		pool: []attribute.KeyValue{semconv.MessagingSystemRabbitMQ, semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(cfg.Queue), AttrService.String(cfg.Service), AttrPool.String(cfg.Name)},
	}
}

// startSpans starts the span of every delivery of batch (decoded), each a
// child of its traceparent header when it has one, and gives the events
// that run (events, in batch order) their span's context. A span the
// sampler drops is the SDK's non-recording span: its context still
// propagates, with the sampled flag clear.
func (w *worker) startSpans(batch []message, events []consumer.Event, start time.Time) {
	tr := &w.tr
	if tr.t == nil {
		return
	}
	// One options slice per batch: a variadic call through an interface
	// would allocate one per span.
	opts := []trace.SpanStartOption{tr.kind, trace.WithTimestamp(start)}
	k := 0
	for i := range batch {
		m := &batch[i]
		parent := context.Background()
		if _, ok := m.d.Headers[consumer.HeaderTraceParent]; ok {
			parent = propagation.TraceContext{}.Extract(parent, consumer.HeaderCarrier(m.d.Headers))
		}
		_, m.span = tr.t.Start(parent, tr.name, opts...)
		m.sc = m.span.SpanContext()
		if m.runs() {
			events[k].SpanContext = m.sc
			k++
		}
	}
}

// stampCopies gives the retry and failure copies of batch whose delivery
// carries no traceparent their delivery span's context: a retry then joins
// its first attempt's trace, and a replayed failure the trace it failed
// in. A traceparent the delivery carries stays as it is (the copies keep
// every header).
func (w *worker) stampCopies(ctx context.Context, batch []message) {
	if w.tr.t == nil {
		return
	}
	for i := range batch {
		m := &batch[i]
		if m.s.kind != settleRetry && m.s.kind != settleFail && m.s.kind != settlePark {
			continue
		}
		if _, ok := m.d.Headers[consumer.HeaderTraceParent]; ok {
			continue
		}
		if m.d.Headers == nil {
			m.d.Headers = amqp.Table{}
		}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, m.sc), consumer.HeaderCarrier(m.d.Headers))
	}
}

// endSpans records on every delivery span of batch its settlement and
// outcome, and ends it. batchErr is the dedup step's error (the batch's
// outcome unknown); alive is false when the channel died during settling
// (the acks were lost: the broker redelivers).
func (w *worker) endSpans(batch []message, batchErr error, alive bool) {
	if w.tr.t == nil {
		return
	}
	end := []trace.SpanEndOption{trace.WithTimestamp(time.Now())} // settled together
	for i := range batch {
		m := &batch[i]
		if m.span != nil {
			if m.span.IsRecording() {
				w.recordSettlement(m, batchErr, alive)
			}
			m.span.End(end...)
		}
		m.span, m.sc = nil, trace.SpanContext{}
	}
}

var settlementNames = [...]attribute.KeyValue{
	settleRequeue: AttrSettlement.String("requeue"),
	settleRetry:   AttrSettlement.String("retry"),
	settleFail:    AttrSettlement.String("failure_store"),
	settlePark:    AttrSettlement.String("parked"),
}

func (w *worker) recordSettlement(m *message, batchErr error, alive bool) {
	s, span := m.s, m.span
	attrs := append(w.tr.attrs[:0], w.tr.pool...)
	// A decoded delivery's event holds its routing key and attempt
	// already (toEvent); one that did not decode is read from the
	// delivery.
	attempt := m.ev.Attempt
	if m.ev.ID != uuid.Nil {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(m.ev.Delivery.RoutingKey),
			semconv.MessagingMessageID(m.ev.ID.String()))
	} else {
		attrs = append(attrs, semconv.MessagingRabbitMQDestinationRoutingKey(broker.OriginalRoutingKey(&m.d)))
		attempt = broker.AttemptOf(m.d.Headers)
	}
	if attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int(attempt))
	}
	if s.kind != settleAck && s.kind != 0 && int(s.kind) < len(settlementNames) {
		// Not on an ack, which the outcome already says: the contract's
		// eight attributes are as many as the SDK dedups in one map
		// group, and a ninth costs a third more per span (measured in
		// BenchmarkTraceSpans).
		attrs = append(attrs, settlementNames[s.kind])
	}
	if s.kind != settleRequeue && s.outcome != "" {
		attrs = append(attrs, AttrOutcome.String(s.outcome))
	}
	span.SetAttributes(attrs...)
	w.tr.attrs = attrs[:0]
	switch s.kind {
	case settleRetry:
		queue := broker.DelayQueue(w.pool.cfg.RetryDelays[s.attempt-1])
		span.RecordError(errors.New(s.err))
		span.AddEvent(EventRetryCopy, trace.WithAttributes(semconv.MessagingDestinationName(queue), AttrAttempt.Int(s.attempt)))
	case settleFail:
		span.AddEvent(EventFailureCopy, trace.WithAttributes(AttrFailureID.String(s.failureID.String()),
			AttrFailureReason.String(s.reason)))
		span.SetStatus(codes.Error, s.reason+": "+s.err)
	case settlePark:
		span.AddEvent(EventFailureCopy, trace.WithAttributes(AttrFailureID.String(s.failureID.String()),
			AttrFailureReason.String(s.reason)))
	case settleRequeue:
		msg := "retry or failure copy not confirmed"
		if batchErr != nil {
			msg = "batch outcome unknown: " + batchErr.Error()
		}
		span.AddEvent(EventRequeued)
		span.SetStatus(codes.Error, msg)
	}
	if !alive && s.kind != settleRequeue {
		span.AddEvent(EventChannelLost)
	}
}
