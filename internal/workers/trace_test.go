package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// traceRig is a pool tracing to an in-process OTLP receiver through a real
// exporter, with a handler ("test.trace") that records the trace headers
// an outbox message written from its ctx would carry.
type traceRig struct {
	*bundle
	rcv *tracingtest.Receiver
	tp  *tracing.Provider

	hmu     sync.Mutex
	headers map[uuid.UUID][]map[string]any
}

func newTraceRig(t *testing.T) *traceRig {
	r := &traceRig{bundle: newBundle(t), headers: map[uuid.UUID][]map[string]any{}}
	r.rcv = tracingtest.New(t)
	// The daemon's provider (tracing.New): the SDK's tracer, batch span
	// processor and OTLP exporter.
	tp, err := tracing.New(r.ctx, tracing.Config{Endpoint: r.rcv.HTTPEndpoint, Logger: r.logger})
	require.NoError(t, err)
	t.Cleanup(tp.Stop)
	r.tp, r.tracer = tp, tp.Tracer()
	r.reg.MustRegister(consumer.Registration{Name: "test.trace", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, _ pgx.Tx, ev consumer.Event) error {
			h := consumer.InjectTraceContext(ctx, nil)
			r.hmu.Lock()
			r.headers[ev.ID] = append(r.headers[ev.ID], h)
			r.hmu.Unlock()
			return nil
		})})
	return r
}

// producer is a producer's span: the traceparent it would publish with.
type producer struct{ traceID, spanID string }

func newProducer(t *testing.T) producer {
	t.Helper()
	b := make([]byte, 24)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return producer{traceID: hex.EncodeToString(b[:16]), spanID: hex.EncodeToString(b[16:])}
}

func (p producer) traceparent() string { return "00-" + p.traceID + "-" + p.spanID + "-01" }

// deliverySpans returns the delivery spans of event id, in start order.
func (r *traceRig) deliverySpans(spans []tracingtest.Span, id uuid.UUID) []tracingtest.Span {
	out := tracingtest.WithAttr(tracingtest.Named(spans, "process "+r.queue), "messaging.message.id", id.String())
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].GetStartTimeUnixNano() < out[j-1].GetStartTimeUnixNano(); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// wait waits until every event of ids has n delivery spans.
func (r *traceRig) wait(n int, ids ...uuid.UUID) []tracingtest.Span {
	r.t.Helper()
	spans, err := r.rcv.WaitFlushed(30*time.Second, r.tp, func(s []tracingtest.Span) bool {
		for _, id := range ids {
			if len(r.deliverySpans(s, id)) < n {
				return false
			}
		}
		return true
	})
	require.NoError(r.t, err)
	return spans
}

func requireAttrs(t *testing.T, s tracingtest.Span, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got, ok := s.Attr(k)
		require.True(t, ok, "attribute %s missing on %s", k, s.GetName())
		require.Equal(t, v, got, "attribute %s", k)
	}
}

// linkedBatch returns the batch span linked to delivery span d.
func linkedBatch(t *testing.T, spans []tracingtest.Span, d tracingtest.Span) tracingtest.Span {
	t.Helper()
	for _, b := range tracingtest.Named(spans, dedup.SpanBatch) {
		for _, l := range b.GetLinks() {
			if hex.EncodeToString(l.GetSpanId()) == d.SpanIDHex() && hex.EncodeToString(l.GetTraceId()) == d.TraceIDHex() {
				return b
			}
		}
	}
	t.Fatalf("no batch span links to delivery span %s", d.SpanIDHex())
	return tracingtest.Span{}
}

func childrenOf(spans []tracingtest.Span, parent tracingtest.Span) []string {
	var out []string
	for _, s := range spans {
		if s.ParentIDHex() == parent.SpanIDHex() && s.TraceIDHex() == parent.TraceIDHex() {
			out = append(out, s.GetName())
		}
	}
	return out
}

// A delivery's span is a CONSUMER span "process <queue>", the child of its
// producer's traceparent (a string or bytes header), with the contract's
// attributes; one without a traceparent starts a trace. The batch that
// committed it links to it, and the handler's ctx carries it: an outbox
// message written there would carry it as its traceparent.
func TestTraceDeliveryChildOfProducer(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	r.start(shop.HandlerStockReserve, "test.trace")
	p1, p2 := newProducer(t), newProducer(t)
	e1, _ := r.order(1)
	e2, _ := r.order(1)
	e3, _ := r.order(1)
	r.publishEnv(e1, amqp.Table{"traceparent": p1.traceparent()})
	r.publishEnv(e2, amqp.Table{"traceparent": []byte(p2.traceparent()), "tracestate": "vendor=v"})
	r.publishEnv(e3, nil)
	spans := r.wait(1, e1.EventID, e2.EventID, e3.EventID)

	d1 := r.deliverySpans(spans, e1.EventID)[0]
	require.Equal(t, "process "+r.queue, d1.GetName())
	require.Equal(t, tracepb.Span_SPAN_KIND_CONSUMER, d1.GetKind())
	require.Equal(t, p1.traceID, d1.TraceIDHex())
	require.Equal(t, p1.spanID, d1.ParentIDHex())
	requireAttrs(t, d1, map[string]string{
		"messaging.system": "rabbitmq", "messaging.operation.type": "process", "messaging.destination.name": r.queue,
		"messaging.rabbitmq.destination.routing_key": shop.EventOrderPlaced, "messaging.message.id": e1.EventID.String(),
		"platformd.service": "stock", "platformd.pool": r.cfg.Name, "platformd.outcome": "processed",
	})
	// Exactly the contract's eight: an acked first delivery needs no
	// settlement or attempt, and a ninth attribute costs a third more.
	require.Len(t, d1.GetAttributes(), 8)
	require.Equal(t, tracepb.Status_STATUS_CODE_UNSET, d1.GetStatus().GetCode())

	d2 := r.deliverySpans(spans, e2.EventID)[0]
	require.Equal(t, p2.traceID, d2.TraceIDHex())
	require.Equal(t, p2.spanID, d2.ParentIDHex())
	require.Equal(t, "vendor=v", d2.GetTraceState())

	d3 := r.deliverySpans(spans, e3.EventID)[0]
	require.Empty(t, d3.ParentIDHex(), "no traceparent: a trace of its own")

	for _, d := range []tracingtest.Span{d1, d2, d3} {
		b := linkedBatch(t, spans, d)
		spans, err := r.rcv.WaitFlushed(10*time.Second, r.tp, func(s []tracingtest.Span) bool {
			return len(childrenOf(s, b)) >= 4
		})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{dedup.SpanInsert, dedup.SpanHandler + shop.HandlerStockReserve, dedup.SpanHandler + "test.trace", dedup.SpanCommit},
			childrenOf(spans, b))
	}

	r.hmu.Lock()
	defer r.hmu.Unlock()
	require.Equal(t, "00-"+p1.traceID+"-"+d1.SpanIDHex()+"-01", r.headers[e1.EventID][0]["traceparent"])
	require.Equal(t, "00-"+p2.traceID+"-"+d2.SpanIDHex()+"-01", r.headers[e2.EventID][0]["traceparent"])
	require.Equal(t, "vendor=v", r.headers[e2.EventID][0]["tracestate"])
	require.Equal(t, "00-"+d3.TraceIDHex()+"-"+d3.SpanIDHex()+"-01", r.headers[e3.EventID][0]["traceparent"])
}

// A message a handler writes to the outbox (consumer.Publish) carries, as
// its traceparent, the span of the delivery that caused it: the row the
// relay publishes is in the producer's trace, one hop further.
func TestTraceOutboxMessageInHandlersTrace(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	r.reg.MustRegister(consumer.Registration{Name: "test.announce", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			_, err := consumer.Publish(ctx, tx, consumer.Message{Name: "test.announced.v1", Payload: map[string]string{"of": ev.ID.String()},
				Headers: map[string]any{"x-app": "shop"}})
			return err
		})})
	r.start(shop.HandlerStockReserve, "test.announce")
	p := newProducer(t)
	withParent, _ := r.order(1)
	orphan, _ := r.order(1)
	r.publishEnv(withParent, amqp.Table{"traceparent": p.traceparent()})
	r.publishEnv(orphan, nil)
	spans := r.wait(1, withParent.EventID, orphan.EventID)

	for _, e := range []envelope.Envelope{withParent, orphan} {
		d := r.deliverySpans(spans, e.EventID)[0]
		var headers map[string]any
		require.NoError(t, r.check.QueryRow(r.ctx, `SELECT headers FROM platform.outbox WHERE payload->>'of' = $1`, e.EventID.String()).Scan(&headers))
		require.Equal(t, "00-"+d.TraceIDHex()+"-"+d.SpanIDHex()+"-01", headers["traceparent"])
		require.Equal(t, "shop", headers["x-app"])
	}
	require.Equal(t, p.traceID, r.deliverySpans(spans, withParent.EventID)[0].TraceIDHex())
}

// A duplicate is a delivery span with outcome duplicate in its producer's
// trace; its batch inserted nothing and ran no handler.
func TestTraceDuplicate(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	r.start(shop.HandlerStockReserve, "test.trace")
	p := newProducer(t)
	e, _ := r.order(1)
	r.publishEnv(e, amqp.Table{"traceparent": p.traceparent()})
	r.wait(1, e.EventID)
	r.publishEnv(e, amqp.Table{"traceparent": p.traceparent()}) // the relay republishes
	spans := r.wait(2, e.EventID)

	ds := r.deliverySpans(spans, e.EventID)
	require.Len(t, ds, 2)
	for i, want := range []string{"processed", "duplicate"} {
		requireAttrs(t, ds[i], map[string]string{"platformd.outcome": want})
		require.Equal(t, p.traceID, ds[i].TraceIDHex())
		require.Equal(t, p.spanID, ds[i].ParentIDHex())
		require.Equal(t, tracepb.Status_STATUS_CODE_UNSET, ds[i].GetStatus().GetCode())
	}
	b := linkedBatch(t, spans, ds[1])
	spans, err := r.rcv.WaitFlushed(10*time.Second, r.tp, func(s []tracingtest.Span) bool { return len(childrenOf(s, b)) >= 2 })
	require.NoError(t, err)
	require.ElementsMatch(t, []string{dedup.SpanInsert, dedup.SpanCommit}, childrenOf(spans, b), "a duplicate runs no handler")
	requireAttrs(t, b, map[string]string{"platformd.batch.duplicates": "1", "platformd.batch.processed": "0"})
	r.hmu.Lock()
	require.Len(t, r.headers[e.EventID], 1)
	r.hmu.Unlock()
}

// A retried event's attempts are one trace: with a producer's traceparent
// every attempt is its child (the copy keeps the header); without one, the
// copy carries the first attempt's span, so the second attempt is its
// child. The failed attempt records the retry copy and the error.
func TestTraceRetriedAcrossAttempts(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	p := newProducer(t)
	withParent, _ := r.order(1)
	orphan, _ := r.order(1)
	r.failN[withParent.EventID] = 1
	r.failN[orphan.EventID] = 1
	r.start(shop.HandlerStockReserve, "test.probe")
	r.publishEnv(withParent, amqp.Table{"traceparent": p.traceparent()})
	r.publishEnv(orphan, nil)
	spans := r.wait(2, withParent.EventID, orphan.EventID)

	wp := r.deliverySpans(spans, withParent.EventID)
	require.Len(t, wp, 2)
	for i, s := range wp {
		require.Equal(t, p.traceID, s.TraceIDHex())
		require.Equal(t, p.spanID, s.ParentIDHex())
		v, _ := s.Attr("platformd.attempt")
		require.Equal(t, []string{"", "1"}[i], v)
	}
	requireAttrs(t, wp[0], map[string]string{"platformd.outcome": "retried", "platformd.settlement": "retry"})
	requireAttrs(t, wp[1], map[string]string{"platformd.outcome": "processed"})
	ev, ok := wp[0].Event(EventRetryCopy)
	require.True(t, ok)
	q, _ := tracingtest.EventAttr(ev, "messaging.destination.name")
	require.Equal(t, broker.DelayQueue(100*time.Millisecond), q)
	ex, ok := wp[0].Event("exception")
	require.True(t, ok)
	msg, _ := tracingtest.EventAttr(ex, "exception.message")
	require.Contains(t, msg, "transient failure")

	op := r.deliverySpans(spans, orphan.EventID)
	require.Len(t, op, 2)
	require.Empty(t, op[0].ParentIDHex())
	require.Equal(t, op[0].TraceIDHex(), op[1].TraceIDHex(), "both attempts in one trace")
	require.Equal(t, op[0].SpanIDHex(), op[1].ParentIDHex())
}

// A failed event and a rejected message: status error, the stored failure
// recorded with its reason and id, and the stored row keeps the producer's
// traceparent among its headers.
func TestTraceFailedAndRejected(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	p1, p2 := newProducer(t), newProducer(t)
	perm, _ := r.order(1)
	r.failPerm[perm.EventID] = true
	r.start(shop.HandlerStockReserve, "test.probe")
	r.publishEnv(perm, amqp.Table{"traceparent": p1.traceparent()})
	r.publishRaw(shop.EventOrderPlaced, []byte(`{"not": "an envelope"}`), amqp.Table{"traceparent": p2.traceparent()})
	spans, err := r.rcv.WaitFlushed(30*time.Second, r.tp, func(s []tracingtest.Span) bool {
		return len(tracingtest.WithAttr(tracingtest.Named(s, "process "+r.queue), "platformd.settlement", "failure_store")) == 2
	})
	require.NoError(t, err)

	f := r.deliverySpans(spans, perm.EventID)
	require.Len(t, f, 1)
	require.Equal(t, p1.traceID, f[0].TraceIDHex())
	requireAttrs(t, f[0], map[string]string{"platformd.outcome": "failed", "platformd.settlement": "failure_store"})
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, f[0].GetStatus().GetCode())
	require.Contains(t, f[0].GetStatus().GetMessage(), broker.ReasonPermanent+": ")
	ev, ok := f[0].Event(EventFailureCopy)
	require.True(t, ok)
	reason, _ := tracingtest.EventAttr(ev, "platformd.failure_reason")
	require.Equal(t, broker.ReasonPermanent, reason)
	id, _ := tracingtest.EventAttr(ev, "platformd.failure_id")
	require.Equal(t, 1, r.count(`SELECT count(*) FROM platform.failed_event WHERE id::text = $1`, id), "the event names the stored row")

	var rejected tracingtest.Span
	for _, s := range tracingtest.Named(spans, "process "+r.queue) {
		if s.TraceIDHex() == p2.traceID {
			rejected = s
		}
	}
	require.NotNil(t, rejected.Span, "the rejected message's span is in its producer's trace")
	requireAttrs(t, rejected, map[string]string{"platformd.outcome": "rejected", "platformd.settlement": "failure_store"})
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, rejected.GetStatus().GetCode())
	_, hasID := rejected.Attr("messaging.message.id")
	require.False(t, hasID, "an undecodable body has no event id")

	var copies int
	for _, f := range r.getFailed() {
		tp, _ := f.Headers["traceparent"].(string)
		require.Contains(t, []string{p1.traceparent(), p2.traceparent()}, tp)
		copies++
	}
	require.Equal(t, 2, copies)
}

// Retry copies keep a delivery's trace context headers as they are, string
// or bytes.
func TestCopiesKeepTraceContext(t *testing.T) {
	t.Parallel()
	d := amqp.Delivery{Headers: amqp.Table{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  []byte("vendor=v"),
	}, Body: []byte(`{}`)}
	for _, c := range []amqp.Publishing{broker.RetryCopy(&d, 1, "e")} {
		require.Equal(t, d.Headers["traceparent"], c.Headers["traceparent"])
		require.Equal(t, d.Headers["tracestate"], c.Headers["tracestate"])
	}
}

// Tracing off: no span, no span context for handlers, no allocation in the
// tracing steps of a batch.
func TestTracingOffCostsNothing(t *testing.T) {
	w := &worker{}
	batch := make([]message, 50)
	events := make([]consumer.Event, 50)
	for i := range batch {
		env := envelope.Envelope{EventID: uuid.New()}
		batch[i] = message{d: amqp.Delivery{Headers: amqp.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}, ev: consumer.Event{ID: env.EventID}}
		batch[i].s.kind = settleRetry
	}
	now := time.Now()
	allocs := testing.AllocsPerRun(100, func() {
		w.startSpans(batch, events, now)
		w.stampCopies(context.Background(), batch)
		w.endSpans(batch, nil, true)
	})
	require.Zero(t, allocs)
	for i := range batch {
		require.Nil(t, batch[i].span)
		require.False(t, events[i].SpanContext.IsValid())
	}
}

// A delivery span the sampler drops is exported by nothing (the daemon's
// tracer, tracing.New, samples at the config's ratio), yet its context
// propagates: a sampled-out
// delivery's handler sees its trace with the sampled flag clear, its retry
// copy carries it, and the second attempt is in that trace; a delivery
// whose producer sampled it is still traced (parent-based, ratio 0).
func TestTraceSampledOutDeliveryPropagates(t *testing.T) {
	t.Parallel()
	r := newTraceRig(t)
	zero := 0.0
	tp, err := tracing.New(r.ctx, tracing.Config{Endpoint: r.rcv.HTTPEndpoint, SamplerRatio: &zero, Logger: r.logger})
	require.NoError(t, err)
	t.Cleanup(tp.Stop)
	r.tp, r.tracer = tp, tp.Tracer()
	p := newProducer(t)
	sampled, _ := r.order(1)
	orphan, _ := r.order(1)
	r.failN[orphan.EventID] = 1
	r.start(shop.HandlerStockReserve, "test.trace", "test.probe")
	r.publishEnv(sampled, amqp.Table{"traceparent": p.traceparent()})
	r.publishEnv(orphan, nil)
	r.waitFor("the orphan's second attempt and the sampled event", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.attempts[orphan.EventID]) == 2 && len(r.attempts[sampled.EventID]) == 1
	})
	require.Eventually(t, func() bool { return r.reservations() == 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, tp.ForceFlush(r.ctx))
	spans := r.rcv.Spans()

	require.Empty(t, r.deliverySpans(spans, orphan.EventID), "a sampled-out delivery exports no span")
	ds := r.deliverySpans(spans, sampled.EventID)
	require.Len(t, ds, 1)
	require.Equal(t, p.traceID, ds[0].TraceIDHex())
	require.Equal(t, p.spanID, ds[0].ParentIDHex())

	r.hmu.Lock()
	defer r.hmu.Unlock()
	require.Equal(t, []map[string]any{{"traceparent": "00-" + ds[0].TraceIDHex() + "-" + ds[0].SpanIDHex() + "-01"}}, r.headers[sampled.EventID])
	hs := r.headers[orphan.EventID]
	require.GreaterOrEqual(t, len(hs), 2)
	traceID, spanIDs := "", map[string]bool{}
	for _, h := range hs {
		tpv, _ := h["traceparent"].(string)
		parts := strings.Split(tpv, "-")
		require.Len(t, parts, 4, "traceparent %q", tpv)
		require.Equal(t, "00", parts[3], "sampled flag clear: %q", tpv)
		if traceID == "" {
			traceID = parts[1]
		}
		require.Equal(t, traceID, parts[1], "every attempt in one trace")
		spanIDs[parts[2]] = true
	}
	require.Len(t, spanIDs, 2, "each attempt its own span id")
}
