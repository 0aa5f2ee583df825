package dedup_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// traceBundle is a Processor tracing to an in-process OTLP receiver, with a
// handler that records the trace context its ctx carries per event.
type traceBundle struct {
	*testBundle
	rcv    *tracingtest.Receiver
	tp     *tracing.Provider
	tracer trace.Tracer
	mu     sync.Mutex
	seen   map[uuid.UUID]map[string]any // headers InjectTraceContext wrote from the handler's ctx
}

func setupTrace(t *testing.T) *traceBundle {
	b := &traceBundle{testBundle: setup(t), seen: map[uuid.UUID]map[string]any{}}
	b.rcv = tracingtest.New(t)
	// The daemon's provider: the SDK's tracer, batch processor and exporter.
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: b.rcv.HTTPEndpoint, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(tp.Stop)
	b.tp, b.tracer = tp, tp.Tracer()
	b.reg.MustRegister(consumer.Registration{
		Name: "test.outbox", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, _ pgx.Tx, ev consumer.Event) error {
			h := consumer.InjectTraceContext(ctx, nil)
			b.mu.Lock()
			b.seen[ev.ID] = h
			b.mu.Unlock()
			return nil
		}),
	})
	return b
}

func (b *traceBundle) processor(t *testing.T, handlers ...string) *dedup.Processor {
	t.Helper()
	routes, err := dedup.RoutesFor(b.reg, handlers)
	require.NoError(t, err)
	return dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes, Tracer: b.tracer,
		TraceAttributes: []attribute.KeyValue{attribute.String("platformd.pool", "stock-events")}})
}

// deliveries gives each event a delivery span of its own, as the workers
// do, and returns them (ended by the caller).
func (b *traceBundle) deliveries(events []consumer.Event) []trace.Span {
	spans := make([]trace.Span, len(events))
	for i := range events {
		_, spans[i] = b.tracer.Start(context.Background(), "process test", trace.WithSpanKind(trace.SpanKindConsumer))
		events[i].SpanContext = spans[i].SpanContext()
	}
	return spans
}

func endAll(spans []trace.Span) {
	for _, s := range spans {
		s.End()
	}
}

func children(spans []tracingtest.Span, parent tracingtest.Span) []tracingtest.Span {
	var out []tracingtest.Span
	for _, s := range spans {
		if s.ParentIDHex() == parent.SpanIDHex() && s.TraceIDHex() == parent.TraceIDHex() {
			out = append(out, s)
		}
	}
	return out
}

func names(spans []tracingtest.Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.GetName()
	}
	return out
}

// One batch, one trace: the batch span, linked to every delivery span,
// with the insert, one span per handler and the commit as its children; a
// handler's ctx carries its event's delivery span, which is what an
// outbox message would carry.
func TestTraceOfABatch(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	p := b.processor(t, shop.HandlerStockReserve, "test.outbox")
	events := []consumer.Event{orderEvent(t, 1), orderEvent(t, 2), orderEvent(t, 1)}
	events = append(events, events[1]) // the same id twice: one duplicate
	spans := b.deliveries(events)
	results, err := p.Process(context.Background(), events)
	require.NoError(t, err)
	endAll(spans)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeProcessed, dedup.OutcomeProcessed, dedup.OutcomeDuplicate}, outcomes(results))

	got, err := b.rcv.WaitFlushed(10*time.Second, b.tp, func(s []tracingtest.Span) bool {
		return len(tracingtest.Named(s, dedup.SpanCommit)) == 1 && len(tracingtest.Named(s, "process test")) == 4
	})
	require.NoError(t, err)
	batches := tracingtest.Named(got, dedup.SpanBatch)
	require.Len(t, batches, 1)
	batch := batches[0]
	require.Empty(t, batch.ParentIDHex(), "a batch is a trace of its own")
	require.Len(t, batch.GetLinks(), 4)
	for i, l := range batch.GetLinks() {
		require.Equal(t, events[i].SpanContext.SpanID().String(), spanID(l))
	}
	for k, v := range map[string]string{"platformd.batch.size": "4", "platformd.batch.processed": "3", "platformd.batch.duplicates": "1",
		"platformd.batch.failed": "0", "db.system.name": "postgresql", "platformd.pool": "stock-events"} {
		got, ok := batch.Attr(k)
		require.True(t, ok, k)
		require.Equal(t, v, got, k)
	}
	kids := children(got, batch)
	require.ElementsMatch(t, []string{dedup.SpanInsert, dedup.SpanHandler + shop.HandlerStockReserve, dedup.SpanHandler + "test.outbox", dedup.SpanCommit}, names(kids))
	insert := tracingtest.Named(kids, dedup.SpanInsert)[0]
	n, _ := insert.Attr("platformd.dedup.inserted")
	require.Equal(t, "3", n)

	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ev := range events[:3] {
		want := "00-" + ev.SpanContext.TraceID().String() + "-" + ev.SpanContext.SpanID().String() + "-01"
		require.Equal(t, want, b.seen[ev.ID]["traceparent"], "the handler's ctx carries the delivery span of its event")
	}
}

func spanID(l *tracepb.Span_Link) string { return trace.SpanID(l.GetSpanId()).String() }

// A failing handler: its span has status error, the batch is replayed
// event by event (a span of its own, with its commit), and the batch
// counts the failure.
func TestTraceOfAFailedHandler(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	p := b.processor(t, "test.flaky")
	events := []consumer.Event{orderEvent(t, 1), orderEvent(t, 1)}
	b.failOn.Store(events[1].ID, errors.New("flaky says no"))
	spans := b.deliveries(events)
	results, err := p.Process(context.Background(), events)
	require.NoError(t, err)
	endAll(spans)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeFailed}, outcomes(results))

	got, err := b.rcv.WaitFlushed(10*time.Second, b.tp, func(s []tracingtest.Span) bool {
		return len(tracingtest.Named(s, dedup.SpanBatch)) == 1
	})
	require.NoError(t, err)
	batch := tracingtest.Named(got, dedup.SpanBatch)[0]
	f, _ := batch.Attr("platformd.batch.failed")
	require.Equal(t, "1", f)
	require.Equal(t, tracepb.Status_STATUS_CODE_UNSET, batch.GetStatus().GetCode(), "one event's failure is not the batch's")
	kids := children(got, batch)
	require.ElementsMatch(t, []string{dedup.SpanInsert, dedup.SpanHandler + "test.flaky", dedup.SpanReplay}, names(kids))
	failedHandler := tracingtest.Named(kids, dedup.SpanHandler+"test.flaky")[0]
	require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, failedHandler.GetStatus().GetCode())
	require.Contains(t, failedHandler.GetStatus().GetMessage(), "flaky says no")
	// The replay runs the other event alone (the failing one's failure is
	// already known): its insert, its handler call and the commit.
	replay := tracingtest.Named(kids, dedup.SpanReplay)[0]
	inReplay := children(got, replay)
	require.ElementsMatch(t, []string{dedup.SpanInsert, dedup.SpanHandler + "test.flaky", dedup.SpanCommit}, names(inReplay))
	for _, s := range inReplay {
		require.Equal(t, tracepb.Status_STATUS_CODE_UNSET, s.GetStatus().GetCode(), s.GetName())
	}
}

// Without a tracer nothing is traced, and a handler's ctx is the caller's.
func TestNoTracer(t *testing.T) {
	t.Parallel()
	b := setupTrace(t)
	routes, err := dedup.RoutesFor(b.reg, []string{"test.outbox"})
	require.NoError(t, err)
	p := dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes})
	ev := orderEvent(t, 1)
	_, err = p.Process(context.Background(), []consumer.Event{ev})
	require.NoError(t, err)
	b.mu.Lock()
	require.Nil(t, b.seen[ev.ID])
	b.mu.Unlock()
	require.Zero(t, b.rcv.Requests())
}
