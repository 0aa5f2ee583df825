package consumer

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderTraceParent and HeaderTraceState are the W3C Trace Context headers
// that carry a trace across the broker: platformd's span of a delivery is a
// child of its traceparent, and the messages a handler writes to the outbox
// carry the delivery span's.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// EventContext returns ctx carrying the span context of ev's delivery span
// (ev.SpanContext): spans a handler starts from it are children of that
// span, and InjectTraceContext (so Publish) stamps messages with it. Handle
// is already given such a ctx; HandleBatch's ctx carries the batch's span
// instead, so a BatchHandler that publishes passes EventContext(ctx, ev) for
// the messages ev causes. ctx is returned as it is when ev has no span
// context (tracing off).
func EventContext(ctx context.Context, ev Event) context.Context {
	if !ev.SpanContext.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, ev.SpanContext)
}

// HeaderCarrier reads and writes the W3C trace context in a message's
// headers (an amqp.Table converts to it): it is the
// propagation.TextMapCarrier platformd extracts a delivery's traceparent
// from and injects the outbox's with. A producer may send a header as a
// string or as bytes; Set writes strings.
type HeaderCarrier map[string]any

// Get returns the header key as a string ("" when absent or not text).
func (c HeaderCarrier) Get(key string) string {
	switch v := c[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return ""
}

// Set sets the header key to value.
func (c HeaderCarrier) Set(key, value string) { c[key] = value }

// Keys lists the headers.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// withTraceContext returns headers with ctx's trace context added, in a
// copy: the caller's map is never written.
func withTraceContext(ctx context.Context, headers map[string]any) map[string]any {
	if !addsTraceContext(ctx, headers) {
		return headers
	}
	h := make(map[string]any, len(headers)+2)
	maps.Copy(h, headers)
	propagation.TraceContext{}.Inject(ctx, HeaderCarrier(h))
	return h
}

// InjectTraceContext adds to headers the W3C trace context of the span in
// ctx (traceparent, and tracestate when it has one) and returns headers, a
// new map when headers is nil and there is something to add. A traceparent
// already in headers is kept: a handler that traced its own publish keeps
// its own. Without a valid span context in ctx (tracing off) headers is
// returned untouched. Publish calls it on its copy of a message's
// headers, so the next consumer's spans join the trace of the event that
// caused the message; other outbox writers can do the same. It is safe for
// concurrent use on distinct maps.
func InjectTraceContext(ctx context.Context, headers map[string]any) map[string]any {
	if !addsTraceContext(ctx, headers) {
		return headers
	}
	if headers == nil {
		headers = make(map[string]any, 2)
	}
	propagation.TraceContext{}.Inject(ctx, HeaderCarrier(headers))
	return headers
}

// addsTraceContext reports whether InjectTraceContext would add to headers:
// ctx has a valid span context and headers no traceparent of their own.
func addsTraceContext(ctx context.Context, headers map[string]any) bool {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return false
	}
	_, own := headers[HeaderTraceParent]
	return !own
}
