package consumer

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

// Publish stamps a copy of the message's headers: a map the handler reuses
// is never written.
func TestWithTraceContextCopies(t *testing.T) {
	t.Parallel()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := EventContext(context.Background(), Event{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})})
	mine := map[string]any{"x-app": "a"}
	got := withTraceContext(ctx, mine)
	require.Equal(t, map[string]any{"x-app": "a", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, got)
	require.Equal(t, map[string]any{"x-app": "a"}, mine)
	require.Nil(t, withTraceContext(context.Background(), nil), "tracing off: nothing added")
	own := map[string]any{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}
	require.Equal(t, own, withTraceContext(ctx, own))
}
