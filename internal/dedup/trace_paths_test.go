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

// The batch spans recorded outside the SDK (tracing.Spans) export what the
// SDK's batch spans export for the same batches: the links to every
// delivery span (trace state and flags included, an invalid context
// left out), the attributes and counts, a handler's failure with its replay,
// an unknown outcome, and the SDK's child spans under them. Only the random
// ids and the instants differ. A span limit tighter than the defaults makes
// the SDK record them (the fallback exports the same).
func TestBatchSpansMatchTheSDK(t *testing.T) {
	rcv := tracingtest.New(t)
	fast := runTracedBatch(t, rcv, false)
	t.Setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1000000")
	sdk := runTracedBatch(t, rcv, true)
	require.Len(t, sdk, 13) // three batches: 4, 5 and 4 spans
	tracingtest.RequireSameSpans(t, sdk, fast)
}

func runTracedBatch(t *testing.T, rcv *tracingtest.Receiver, wantSDK bool) map[string]*tracepb.Span {
	t.Helper()
	before := len(rcv.Spans())
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer tp.Stop()
	tr := newTracer(ProcessorConfig{Tracer: tp.Tracer(), TraceAttributes: []attribute.KeyValue{attribute.String("platformd.pool", "p")}})
	require.Equal(t, wantSDK, tr.batch == nil, "the path under test")

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
		// Exported, each batch span goes back to its pool: the next
		// batch's span may be the same value, which must start empty.
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
// follow its unsampled context), whichever path records it.
func TestSampledOutBatchExportsNothing(t *testing.T) {
	rcv := tracingtest.New(t)
	zero := 0.0
	tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, SamplerRatio: &zero,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer tp.Stop()
	tr := newTracer(ProcessorConfig{Tracer: tp.Tracer()})
	require.NotNil(t, tr.batch)
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
