package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is platformd's tracer: the SDK's, Presample, which asks the
// provider's sampler before a span is started so that a span it drops costs
// no span at all, and Spans, which records delivery and batch spans
// without the SDK's span objects. Its methods are safe for concurrent use.
type Tracer struct {
	trace.Tracer
	sampler    sdktrace.Sampler
	dropsRoots bool
	// rec records platformd's own spans beside the SDK; nil when the SDK
	// must (Spans).
	rec *recorder
}

// DropsRoots reports whether the sampler drops any span without a parent:
// when it does not, Presample only adds to a span's cost.
func (t *Tracer) DropsRoots() bool { return t.dropsRoots }

// newRecorder returns what platformd's spans need of the provider, or nil when
// the SDK's resource and scope cannot be read: a probe span started (never
// ended, so never exported) on a sampled parent whose trace id every
// standard sampler that samples anything samples (parent-based ones follow
// the parent; a trace-id ratio compares the id's low half, zero here,
// against its bound). A sampler that drops it drops every delivery span
// too.
func newRecorder(t trace.Tracer, sampler sdktrace.Sampler, proc sdktrace.SpanProcessor, tp trace.TracerProvider,
	limits sdktrace.SpanLimits) *recorder {
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0: 1}, SpanID: trace.SpanID{0: 1},
		TraceFlags: trace.FlagsSampled, Remote: true})
	_, probe := t.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "probe")
	ro, ok := probe.(sdktrace.ReadOnlySpan)
	if !ok {
		return nil
	}
	return &recorder{sampler: sampler, proc: proc, res: ro.Resource(), scope: ro.InstrumentationScope(), tp: tp, limits: limits}
}

// Presample decides, as the SDK would when starting a span of kind named
// name under parent, whether that span is sampled. Dropped: sampled is
// false and sc is the span context the SDK would have given its
// non-recording span (the parent's trace, a new span id, the sampled flag
// clear, the sampler's trace state), to propagate; nothing is started.
// Sampled (or recorded only): start the span with Start(ctx, ...) at once,
// ctx being parent with the ids the decision was made on, which the SDK
// then gives the first span started in it. The span must be started with
// no attributes or links that the sampler would see: platformd's samplers
// (the environment's standard ones) look only at the parent and the trace
// id.
func (t *Tracer) Presample(parent context.Context, name string, kind trace.SpanKind) (ctx context.Context, sc trace.SpanContext, sampled bool) {
	_, sc, res := decide(t.sampler, parent, name, kind)
	if res.Decision == sdktrace.Drop {
		// Nothing allocated: most deliveries take this way.
		return parent, sc, false
	}
	return context.WithValue(parent, drawnKey{}, &drawnIDs{tid: sc.TraceID(), sid: sc.SpanID()}), trace.SpanContext{}, true
}

// decide asks sampler, as the SDK's Start does, about a span of kind named
// name under parent's span context (psc): new ids (the parent's trace, or a
// new one), and the span context the SDK would give the span, its sampled
// flag set only for RecordAndSample and the sampler's trace state.
func decide(sampler sdktrace.Sampler, parent context.Context, name string, kind trace.SpanKind) (psc, sc trace.SpanContext,
	res sdktrace.SamplingResult) {
	psc = trace.SpanContextFromContext(parent)
	tid := psc.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res = sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Name: name, Kind: kind})
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	if res.Decision == sdktrace.RecordAndSample {
		flags |= trace.FlagsSampled
	}
	return psc, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags,
		TraceState: res.Tracestate}), res
}

// drawnIDs are the ids Presample decided on, for the first span started
// in its context: taken once, a later span there gets random ids.
type drawnIDs struct {
	tid   trace.TraceID
	sid   trace.SpanID
	taken atomic.Bool
}

type drawnKey struct{}

// take returns the drawn ids of ctx for a span of trace tid (any trace when
// root), once.
func take(ctx context.Context, tid trace.TraceID, root bool) (*drawnIDs, bool) {
	d, ok := ctx.Value(drawnKey{}).(*drawnIDs)
	if !ok || (!root && d.tid != tid) || !d.taken.CompareAndSwap(false, true) {
		return nil, false
	}
	return d, true
}

// idGenerator is the provider's: the ids Presample drew, for the span
// started in their context, else random ones.
type idGenerator struct{}

// NewIDs implements sdktrace.IDGenerator.
func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if d, ok := take(ctx, trace.TraceID{}, true); ok {
		return d.tid, d.sid
	}
	return newTraceID(), newSpanID()
}

// NewSpanID implements sdktrace.IDGenerator.
func (idGenerator) NewSpanID(ctx context.Context, tid trace.TraceID) trace.SpanID {
	if d, ok := take(ctx, tid, false); ok {
		return d.sid
	}
	return newSpanID()
}

// newTraceID and newSpanID are random, never zero (math/rand/v2's
// generator: per-thread, no lock).
func newTraceID() trace.TraceID {
	var t trace.TraceID
	for !t.IsValid() {
		binary.BigEndian.PutUint64(t[:8], rand.Uint64())
		binary.BigEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

func newSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.BigEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}
