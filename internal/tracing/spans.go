package tracing

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// deliveryLimit is the least of each span limit under which spans are
// recorded outside the SDK (Spans): the SDK's defaults, which no delivery
// or batch span comes near (at most a dozen attributes and three events;
// a batch span's links are held to the link limit as the SDK holds
// them). Under tighter limits the SDK records them, and cuts them as its
// limits say.
const deliveryLimit = 128

// recorder is what delivery spans need of the provider to be recorded
// beside the SDK's own spans: its sampler, its batch span processor (which
// exports them with the others), and the resource and scope the SDK gives
// platformd's spans.
type recorder struct {
	sampler sdktrace.Sampler
	proc    sdktrace.SpanProcessor
	res     *resource.Resource
	scope   instrumentation.Scope
	tp      trace.TracerProvider
	limits  sdktrace.SpanLimits // the provider's; limitsAllow(limits)
}

// limitsAllow reports whether l lets every delivery span through uncut, so
// that recording them outside the SDK changes nothing of what is exported.
func limitsAllow(l sdktrace.SpanLimits) bool {
	atLeast := func(n int) bool { return n < 0 || n >= deliveryLimit }
	return l.AttributeValueLengthLimit < 0 && atLeast(l.AttributeCountLimit) &&
		atLeast(l.EventCountLimit) && atLeast(l.AttributePerEventCountLimit)
}

// Spans records spans of one name and kind that share a set of attributes
// (a pool's delivery spans, a pool's batch spans) without the SDK's span
// objects: a span is then a pooled value, its sampling decision is made
// before anything else, and the shared attributes are encoded once for
// every export. What is exported is what the SDK would export for the same
// calls (TestDeliverySpansMatchTheSDK in internal/workers,
// TestBatchSpansMatchTheSDK in internal/dedup); the provider's sampler
// decides, its batch span processor queues and exports. It is safe for
// concurrent use.
type Spans struct {
	rec   *recorder
	name  string
	kind  trace.SpanKind
	fixed []attribute.KeyValue
	// fixedPB is fixed as the attributes fields of an OTLP Span.
	fixedPB []byte
	// pool holds this set's exported spans (Span.release): one pool per
	// set, so that the link room a batch span grew stays with batch
	// spans.
	pool sync.Pool
}

// Spans returns the recorder of spans named name of kind that carry fixed
// first, or nil when they must be the SDK's (its span limits are set below
// deliveryLimit): then start them with Start. fixed's keys must be
// distinct.
func (t *Tracer) Spans(name string, kind trace.SpanKind, fixed []attribute.KeyValue) *Spans {
	if t.rec == nil {
		return nil
	}
	d := &Spans{rec: t.rec, name: name, kind: kind, fixed: fixed}
	d.pool.New = func() any { return new(Span) }
	for _, kv := range fixed {
		d.fixedPB = appendKeyValue(d.fixedPB, fSpanAttributes, kv)
	}
	return d
}

// Start starts a span under the span context of parent (a delivery's
// extracted traceparent, or none: a new trace) at start, as the SDK's Start
// with the set's kind would. span is nil when the sampler does not sample
// it: sc is then the context the SDK would have given its non-recording
// span, to propagate.
func (d *Spans) Start(parent context.Context, start time.Time) (span *Span, sc trace.SpanContext) {
	psc, sc, res := decide(d.rec.sampler, parent, d.name, d.kind)
	if res.Decision != sdktrace.RecordAndSample {
		// RecordOnly too: its span would go to the batch processor only,
		// which exports sampled spans alone.
		return nil, sc
	}
	span = d.pool.Get().(*Span)
	span.set, span.parent, span.start, span.sc = d, psc, start, sc
	span.own, span.evs = span.attrs[:0], span.events[:0]
	if len(res.Attributes) > 0 {
		span.setSamplerAttributes(res.Attributes)
	}
	return span, span.sc
}

// setSamplerAttributes sets the sampler's attributes, which the SDK's span
// has first: a fixed attribute of the same key, set after them there,
// replaces the sampler's value in its place (merge). The standard samplers
// give none.
func (s *Span) setSamplerAttributes(kv []attribute.KeyValue) {
	s.sampling = true
	s.SetAttributes(kv...)
	s.sampling = false
	s.samplerAttrs = len(s.own)
	for _, a := range s.own {
		if indexKey(s.set.fixed, a.Key) >= 0 {
			s.merge()
			return
		}
	}
}

// Span is one span of a set (Spans.Start): a trace.Span for the code that
// records it (the worker that settles a delivery, the dedup step that runs
// a batch), then, once ended, the read-only span the batch span processor
// exports. Unlike the SDK's spans it is not safe for concurrent use: one
// goroutine records it and ends it.
type Span struct {
	// The embedded interfaces are nil: they only give the type the
	// unexported methods of trace.Span (the API's sanctioned way to
	// implement it) and of sdktrace.ReadOnlySpan (which keeps others from
	// implementing it: TestSpanImplementsEveryMethod fails when the
	// SDK adds one this type does not define).
	embedded.Span
	sdktrace.ReadOnlySpan

	set        *Spans
	sc, parent trace.SpanContext
	start, end time.Time
	ended      bool
	name       string // the span's when named, else the set's
	// own are the attributes set beyond the set's fixed ones, the
	// sampler's first (samplerAttrs of them), in attrs until they outgrow
	// it (a span then allocates nothing for them).
	own          []attribute.KeyValue
	attrs        [8]attribute.KeyValue
	samplerAttrs int
	// merged is true when an attribute replaced a fixed one: own then
	// holds every attribute of the span, in the SDK's order.
	merged bool
	// sampling is true while the sampler's attributes are set.
	sampling bool
	// named is true once SetName was called: name is then the span's.
	named bool
	// evs are the span's events, in events until they outgrow it.
	evs    []sdktrace.Event
	events [3]sdktrace.Event
	links  []sdktrace.Link
	status sdktrace.Status
	// dropped counts the attributes dropped (invalid, or past the limit),
	// droppedEv and droppedLinks the events and links.
	dropped, droppedEv, droppedLinks int
}

// release returns s to its set's pool: the exporter calls it once s is
// encoded, when nothing reads s any more (the batch span processor clears
// its batch after the export). A sampled span then allocates nothing, where
// a kilobyte per delivery span was a third of what tracing cost at a
// sampler of 1 (the allocation and the collector's scanning of it); a
// batch span keeps the room of its links. A span the processor drops (its
// queue full, or stopped) is never released: the collector frees it.
func (s *Span) release() {
	set, links := s.set, s.links
	clear(links)
	*s = Span{links: links[:0]}
	set.pool.Put(s)
}

var _ trace.Span = (*Span)(nil)
var _ sdktrace.ReadOnlySpan = (*Span)(nil)

// SetAttributes sets kv on the span as the SDK's span does: a key already
// set keeps its place and takes the new value; invalid ones are dropped.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	if s.ended {
		return
	}
	for _, a := range kv {
		if !a.Valid() {
			s.dropped++
			continue
		}
		if !s.merged && !s.sampling && indexKey(s.set.fixed, a.Key) >= 0 {
			s.merge()
		}
		if i := indexKey(s.own, a.Key); i >= 0 {
			s.own[i] = a
			continue
		}
		if l := s.set.rec.limits.AttributeCountLimit; l >= 0 && s.attributeCount() >= l {
			s.dropped++ // the SDK keeps the first ones
			continue
		}
		s.own = append(s.own, a)
	}
}

// attributeCount is how many attributes the span has.
func (s *Span) attributeCount() int {
	if s.merged {
		return len(s.own)
	}
	return len(s.set.fixed) + len(s.own)
}

// merge puts every attribute in own, in the SDK's order (the sampler's,
// the fixed ones, then the others), for a key that repeats a fixed one.
func (s *Span) merge() {
	all := make([]attribute.KeyValue, 0, len(s.set.fixed)+len(s.own)+4)
	all = append(all, s.own[:s.samplerAttrs]...)
	for _, f := range s.set.fixed {
		if i := indexKey(all, f.Key); i >= 0 {
			all[i] = f
			continue
		}
		all = append(all, f)
	}
	s.own, s.merged = append(all, s.own[s.samplerAttrs:]...), true
}

func indexKey(kvs []attribute.KeyValue, k attribute.Key) int {
	for i := range kvs {
		if kvs[i].Key == k {
			return i
		}
	}
	return -1
}

// AddEvent records an event as the SDK's span does.
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	if s.ended {
		return
	}
	c := trace.NewEventConfig(opts...)
	// As the SDK's: a repeated key stays repeated (the SDK normalises only
	// the slice and map values within, which delivery spans do not have).
	e := sdktrace.Event{Name: name, Time: c.Timestamp()}
	e.Attributes, e.DroppedAttributeCount = cutAttributes(c.Attributes(), s.set.rec.limits.AttributePerEventCountLimit)
	s.evs = pushEvicting(s.evs, e, s.set.rec.limits.EventCountLimit, &s.droppedEv)
}

// cutAttributes keeps the first limit of attrs (all when limit is
// negative) and says how many it dropped, as the SDK cuts an event's or a
// link's attributes.
func cutAttributes(attrs []attribute.KeyValue, limit int) ([]attribute.KeyValue, int) {
	if limit < 0 || len(attrs) <= limit {
		return attrs, 0
	}
	return attrs[:limit], len(attrs) - limit
}

// pushEvicting appends x to q, which holds at most limit (no bound when
// negative): past it the oldest goes and dropped counts it, in place, as
// the SDK's span queues do, so that the room stays the span's.
func pushEvicting[T any](q []T, x T, limit int, dropped *int) []T {
	if limit < 0 || len(q) < limit {
		return append(q, x)
	}
	*dropped++
	if limit > 0 {
		copy(q, q[1:])
		q[len(q)-1] = x
	}
	return q
}

// RecordError records err as an exception event, as the SDK's span does.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil || s.ended {
		return
	}
	opts = append(opts, trace.WithAttributes(semconv.ExceptionType(typeStr(err)), semconv.ExceptionMessage(err.Error())))
	c := trace.NewEventConfig(opts...)
	if c.StackTrace() {
		stack := make([]byte, 2048)
		opts = append(opts, trace.WithAttributes(semconv.ExceptionStacktrace(string(stack[:runtime.Stack(stack, false)]))))
	}
	s.AddEvent(semconv.ExceptionEventName, opts...)
}

// typeStr is the SDK's name of an error's type.
func typeStr(i any) string {
	t := reflect.TypeOf(i)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return fmt.Sprintf("%s.%s", t.PkgPath(), t.Name())
}

// SetStatus sets the status as the SDK's span does: Ok is final, an Error's
// description is kept, Unset changes nothing set.
func (s *Span) SetStatus(code codes.Code, description string) {
	if s.ended || s.status.Code > code {
		return
	}
	st := sdktrace.Status{Code: code}
	if code == codes.Error {
		st.Description = description
	}
	s.status = st
}

// SetName renames the span.
func (s *Span) SetName(name string) {
	if !s.ended {
		s.name, s.named = name, true
	}
}

// AddLink adds a link to a valid span context.
func (s *Span) AddLink(l trace.Link) {
	if s.ended || (!l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0) {
		return
	}
	link := sdktrace.Link{SpanContext: l.SpanContext}
	link.Attributes, link.DroppedAttributeCount = cutAttributes(l.Attributes, s.set.rec.limits.AttributePerLinkCountLimit)
	s.links = pushEvicting(s.links, link, s.set.rec.limits.LinkCountLimit, &s.droppedLinks)
}

// End ends the span (at the WithTimestamp time, else now) and hands it to
// the provider's batch span processor (the one it was built with: a
// processor registered on the provider later does not see delivery spans).
// A call on the span after End is ignored until the span is exported; then
// it goes back to the pool and may be another delivery's: its holder must
// drop it at End, as the workers do.
func (s *Span) End(opts ...trace.SpanEndOption) {
	if s.ended {
		return
	}
	c := trace.NewSpanEndConfig(opts...)
	s.end = c.Timestamp()
	if s.end.IsZero() {
		// On the monotonic clock from the start, as the SDK ends its
		// spans: a step of the wall clock cannot make a negative span.
		s.end = s.start.Add(time.Since(s.start))
	}
	s.ended = true
	s.set.rec.proc.OnEnd(s)
}

// IsRecording is true until End.
func (s *Span) IsRecording() bool { return !s.ended }

// TracerProvider returns the provider of the span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.set.rec.tp }

// Name returns the span's name.
func (s *Span) Name() string {
	if s.named {
		return s.name
	}
	return s.set.name
}

// SpanContext returns the span's context.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// Parent returns the context of the span's parent (its producer's, from the
// traceparent header), invalid for a root.
func (s *Span) Parent() trace.SpanContext { return s.parent }

// SpanKind returns the set's kind.
func (s *Span) SpanKind() trace.SpanKind { return s.set.kind }

// StartTime returns when the span started.
func (s *Span) StartTime() time.Time { return s.start }

// EndTime returns when the span ended.
func (s *Span) EndTime() time.Time { return s.end }

// Attributes returns every attribute of the span, in the SDK's order (a
// new slice: the exporter's encoder reads them without it).
func (s *Span) Attributes() []attribute.KeyValue {
	if s.merged {
		return slices.Clone(s.own)
	}
	out := make([]attribute.KeyValue, 0, len(s.set.fixed)+len(s.own))
	out = append(out, s.own[:s.samplerAttrs]...)
	out = append(out, s.set.fixed...)
	return append(out, s.own[s.samplerAttrs:]...)
}

// appendAttributes writes the span's attributes as fields of an OTLP Span:
// the fixed ones as encoded once for the set.
func (s *Span) appendAttributes(b []byte) []byte {
	if s.merged {
		return appendKeyValues(b, fSpanAttributes, s.own)
	}
	b = appendKeyValues(b, fSpanAttributes, s.own[:s.samplerAttrs])
	b = append(b, s.set.fixedPB...)
	return appendKeyValues(b, fSpanAttributes, s.own[s.samplerAttrs:])
}

// Links returns the span's links.
func (s *Span) Links() []sdktrace.Link { return s.links }

// Events returns the span's events, in the order they were added.
func (s *Span) Events() []sdktrace.Event { return s.evs }

// Status returns the span's status.
func (s *Span) Status() sdktrace.Status { return s.status }

// InstrumentationScope returns platformd's scope, the SDK tracer's.
func (s *Span) InstrumentationScope() instrumentation.Scope { return s.set.rec.scope }

// InstrumentationLibrary returns the scope, as the SDK's deprecated method
// does.
func (s *Span) InstrumentationLibrary() instrumentation.Library { //nolint:staticcheck // part of ReadOnlySpan
	return s.set.rec.scope
}

// Resource returns the provider's resource.
func (s *Span) Resource() *resource.Resource { return s.set.rec.res }

// DroppedAttributes counts the attributes dropped: invalid, or past the
// limit.
func (s *Span) DroppedAttributes() int { return s.dropped }

// DroppedLinks counts the links dropped past the limit.
func (s *Span) DroppedLinks() int { return s.droppedLinks }

// DroppedEvents counts the events dropped past the limit.
func (s *Span) DroppedEvents() int { return s.droppedEv }

// ChildSpanCount is 0: the SDK counts only the children of its own spans,
// and OTLP carries no count.
func (s *Span) ChildSpanCount() int { return 0 }
