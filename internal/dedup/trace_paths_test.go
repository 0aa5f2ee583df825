package dedup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// The batch spans of three batches (one that commits, one whose handler
// fails and is replayed, one whose outcome is unknown) export the batch
// span with a link to every delivery span (an invalid context left out)
// and the SDK's child spans under
// it. (This compared platformd's own span recorder with the SDK while
// there were two paths; the SDK is now the only one.)
func TestBatchSpansExport(t *testing.T) {
	rcv := tracingtest.New(t)
	sdk := runTracedBatch(t, rcv)
	require.Len(t, sdk, 13) // three batches: 4, 5 and 4 spans
	for run := range 3 {
		b, ok := sdk[fmt.Sprintf("%s %d", SpanBatch, run)]
		require.True(t, ok, "batch %d", run)
		require.Len(t, b.GetLinks(), 5, "a link per delivery with a span context")
	}
}

func runTracedBatch(t *testing.T, rcv *tracingtest.Receiver) map[string]*tracepb.Span {
	t.Helper()
	before := len(rcv.Spans())
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer tp.Stop()
	tr := newTracer(ProcessorConfig{Tracer: tp.Tracer(), TraceAttributes: []attribute.KeyValue{attribute.String("platformd.pool", "p")}})

	ts, err := trace.ParseTraceState("vendor=a")
	require.NoError(t, err)
	events := make([]consumer.Event, 6)
	results := make([]Result, len(events))
	for i := range events {
		if i == 3 {
			continue // a delivery without a span context: no link
		}
		events[i].SpanContext = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i + 1), 7},
			SpanID: trace.SpanID{byte(i + 1), 8}, TraceFlags: trace.TraceFlags(i % 2), TraceState: ts, Remote: i == 5})
		results[i] = Result{Outcome: []Outcome{OutcomeProcessed, OutcomeDuplicate, OutcomeFailed}[i%3]}
	}
	// A batch that commits, one whose handler fails and is replayed, and
	// one whose outcome is unknown.
	for run, fail := range []error{nil, errors.New("no stock"), errors.New("commit: connection reset")} {
		ctx, batch := tr.startBatch(context.Background(), events)
		_, insert := tr.start(ctx, SpanInsert, insertAttrs...)
		endInsert(insert, 4, nil)
		_, handler := tr.startHandler(ctx, fmt.Sprintf("stock.reserve.%d", run), len(events))
		switch run {
		case 1:
			endSpan(handler, fail)
			rctx, replay := tr.start(ctx, SpanReplay)
			endSpan(tr.startCommit(rctx), nil)
			endSpan(replay, nil)
			tr.endBatch(batch, len(events), results, nil)
		case 2:
			endSpan(handler, nil)
			endSpan(tr.startCommit(ctx), fail)
			tr.endBatch(batch, len(events), results, fail)
		default:
			endSpan(handler, nil)
			endSpan(tr.startCommit(ctx), nil)
			tr.endBatch(batch, len(events), results, nil)
		}
		require.NoError(t, tp.ForceFlush(context.Background()))
	}
	spans := rcv.Spans()[before:]
	names := map[string]string{} // span id -> the name it is known by
	for _, s := range spans {
		names[string(s.GetSpanId())] = s.GetName()
	}
	// Each batch is a trace of its own: a span is known by its name, its
	// parent's and its batch's number.
	out := map[string]*tracepb.Span{}
	traces := map[string]int{}
	for _, s := range spans {
		if s.GetName() == SpanBatch {
			traces[string(s.GetTraceId())] = len(traces)
		}
	}
	for _, s := range spans {
		k := fmt.Sprintf("%s %d", s.GetName(), traces[string(s.GetTraceId())])
		if s.GetName() != SpanBatch {
			k = fmt.Sprintf("%s under %s %d", s.GetName(), names[string(s.GetParentSpanId())], traces[string(s.GetTraceId())])
		}
		require.NotContains(t, out, k)
		out[k] = normalizedBatchSpan(s.Span, names)
	}
	return out
}

// normalizedBatchSpan is s without its random ids (its parent named
// instead) and its instants.
func normalizedBatchSpan(s *tracepb.Span, names map[string]string) *tracepb.Span {
	s = proto.Clone(s).(*tracepb.Span)
	if len(s.ParentSpanId) > 0 {
		s.ParentSpanId = []byte(names[string(s.ParentSpanId)])
	}
	s.TraceId, s.SpanId, s.StartTimeUnixNano, s.EndTimeUnixNano = nil, nil, 0, 0
	for _, e := range s.GetEvents() {
		e.TimeUnixNano = 0
	}
	return s
}

// A batch the sampler drops exports nothing, its children included (they
// follow its unsampled context).
func TestSampledOutBatchExportsNothing(t *testing.T) {
	rcv := tracingtest.New(t)
	zero := 0.0
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, SamplerRatio: &zero,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer tp.Stop()
	tr := newTracer(ProcessorConfig{Tracer: tp.Tracer()})
	events := []consumer.Event{{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
		TraceFlags: trace.FlagsSampled})}}
	ctx, batch := tr.startBatch(context.Background(), events)
	require.False(t, batch.IsRecording())
	sc := trace.SpanContextFromContext(ctx)
	require.True(t, sc.IsValid())
	require.False(t, sc.IsSampled())
	_, insert := tr.start(ctx, SpanInsert, insertAttrs...)
	require.False(t, insert.IsRecording(), "a child of a dropped batch is dropped")
	endInsert(insert, 1, nil)
	endSpan(tr.startCommit(ctx), nil)
	tr.endBatch(batch, 1, []Result{{Outcome: OutcomeProcessed}}, nil)
	require.NoError(t, tp.ForceFlush(context.Background()))
	require.Empty(t, rcv.Spans())
}
