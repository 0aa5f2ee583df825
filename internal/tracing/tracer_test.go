package tracing

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// Presample decides as the SDK does, on the ids the SDK then uses: at
// ratio 0.5 every root span it lets start is recorded (were the SDK to draw
// its own trace id, half of them would not be), about half are dropped, a
// dropped span's context is a valid unsampled one, and a parent's decision
// is followed: sampled always, not sampled never, the trace and trace
// state kept.
func TestPresampleAgreesWithTheSDK(t *testing.T) {
	cleanEnv(t)
	rcv := tracingtest.New(t)
	p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, SamplerRatio: ratio(0.5), Logger: quiet()})
	require.NoError(t, err)
	defer p.Stop()
	tr := p.Tracer().(*Tracer)
	dropped := 0
	const n = 2000
	for range n {
		ctx, sc, sampled := tr.Presample(context.Background(), "process q", trace.SpanKindConsumer)
		if !sampled {
			dropped++
			require.True(t, sc.IsValid())
			require.False(t, sc.IsSampled())
			continue
		}
		_, span := tr.Start(ctx, "process q", trace.WithSpanKind(trace.SpanKindConsumer))
		require.True(t, span.IsRecording(), "a span presampled in is recorded")
		// A second span in the same context gets ids of its own.
		_, other := tr.Start(ctx, "other")
		require.NotEqual(t, span.SpanContext().SpanID(), other.SpanContext().SpanID())
		other.End()
		span.End()
	}
	require.InDelta(t, n/2, dropped, n/10)

	ts, err := trace.ParseTraceState("vendor=1")
	require.NoError(t, err)
	for _, flags := range []trace.TraceFlags{trace.FlagsSampled, 0} {
		parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6},
			TraceFlags: flags, TraceState: ts, Remote: true})
		for range 50 {
			ctx, sc, sampled := tr.Presample(trace.ContextWithRemoteSpanContext(context.Background(), parent), "process q", trace.SpanKindConsumer)
			require.Equal(t, flags.IsSampled(), sampled)
			if !sampled {
				require.Equal(t, parent.TraceID(), sc.TraceID())
				require.NotEqual(t, parent.SpanID(), sc.SpanID())
				require.Equal(t, "vendor=1", sc.TraceState().String())
				continue
			}
			_, span := tr.Start(ctx, "process q")
			require.True(t, span.IsRecording())
			require.Equal(t, parent.TraceID(), span.SpanContext().TraceID())
			span.End()
		}
	}
}
