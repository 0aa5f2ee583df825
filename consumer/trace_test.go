package consumer_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
)

func spanContext(t *testing.T, state string) trace.SpanContext {
	t.Helper()
	tid, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	require.NoError(t, err)
	ts, err := trace.ParseTraceState(state)
	require.NoError(t, err)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// A handler's ctx for ev carries ev's delivery span; Inject writes it as
// W3C headers, adding to what the handler set without replacing it.
func TestInjectTraceContext(t *testing.T) {
	t.Parallel()
	ev := consumer.Event{SpanContext: spanContext(t, "vendor=x")}
	ctx := consumer.EventContext(context.Background(), ev)

	h := consumer.InjectTraceContext(ctx, nil)
	require.Equal(t, map[string]any{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "vendor=x",
	}, h)

	own := map[string]any{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "n": 2}
	require.Equal(t, map[string]any{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "n": 2},
		consumer.InjectTraceContext(ctx, own), "a traceparent the handler set is kept")

	other := map[string]any{"x-app": "a"}
	consumer.InjectTraceContext(consumer.EventContext(context.Background(), consumer.Event{SpanContext: spanContext(t, "")}), other)
	require.Equal(t, map[string]any{"x-app": "a", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, other)
}

// Tracing off: no span context, nothing changes and nothing is allocated.
func TestInjectTraceContextOff(t *testing.T) {
	ctx := context.Background()
	require.Equal(t, ctx, consumer.EventContext(ctx, consumer.Event{}))
	require.Nil(t, consumer.InjectTraceContext(ctx, nil))
	h := map[string]any{"a": 1}
	require.Equal(t, map[string]any{"a": 1}, consumer.InjectTraceContext(ctx, h))
	require.Zero(t, testing.AllocsPerRun(100, func() { consumer.InjectTraceContext(consumer.EventContext(ctx, consumer.Event{}), nil) }))
}
