package tracing

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
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

// deliveryLimit is the least of each span limit under which delivery spans
// are recorded outside the SDK (Deliveries): the SDK's defaults, which no
// delivery span comes near (it has at most a dozen attributes and three
// events). Under tighter limits the SDK records them, and cuts them as its
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

// Deliveries records the CONSUMER spans of one pool's deliveries, all of one
// name and sharing a set of attributes, without the SDK's span objects: a
// delivery span is then one allocation, its sampling decision is made
// before anything else, and the shared attributes are encoded once for
// every export. What is exported is what the SDK would export for the same
// calls (TestDeliverySpansMatchTheSDK); the provider's sampler decides, its
// batch span processor queues and exports. It is safe for concurrent use.
type Deliveries struct {
	rec   *recorder
	name  string
	fixed []attribute.KeyValue
	// fixedPB is fixed as the attributes fields of an OTLP Span.
	fixedPB []byte
}

// Deliveries returns the recorder of spans named name that carry fixed
// first, or nil when delivery spans must be the SDK's (its span limits are
// set below deliveryLimit): then start them with Start. fixed's keys must
// be distinct.
func (t *Tracer) Deliveries(name string, fixed []attribute.KeyValue) *Deliveries {
	if t.rec == nil {
		return nil
	}
	d := &Deliveries{rec: t.rec, name: name, fixed: fixed}
	for _, kv := range fixed {
		d.fixedPB = appendKeyValue(d.fixedPB, fSpanAttributes, kv)
	}
	return d
}

// Start starts the span of a delivery under parent (its extracted
// traceparent, or none) at start, as the SDK's Start with the span kind
// CONSUMER would. span is nil when the sampler does not sample it: sc is
// then the context the SDK would have given its non-recording span, to
// propagate.
func (d *Deliveries) Start(parent context.Context, start time.Time) (span *DeliverySpan, sc trace.SpanContext) {
	psc := trace.SpanContextFromContext(parent)
	tid := psc.TraceID()
	if !tid.IsValid() {
		tid = newTraceID()
	}
	res := d.rec.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: parent, TraceID: tid, Name: d.name,
		Kind: trace.SpanKindConsumer})
	scc := trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceState: res.Tracestate}
	if res.Decision != sdktrace.RecordAndSample {
		// RecordOnly too: its span would go to the batch processor only,
		// which exports sampled spans alone.
		scc.TraceFlags = psc.TraceFlags() &^ trace.FlagsSampled
		return nil, trace.NewSpanContext(scc)
	}
	scc.TraceFlags = psc.TraceFlags() | trace.FlagsSampled
	span = spanPool.Get().(*DeliverySpan)
	span.set, span.parent, span.start, span.sc = d, psc, start, trace.NewSpanContext(scc)
	if len(res.Attributes) > 0 {
		span.setSamplerAttributes(res.Attributes)
	}
	return span, span.sc
}

// setSamplerAttributes sets the sampler's attributes, which the SDK's span
// has first: a fixed attribute of the same key, set after them there,
// replaces the sampler's value in its place (merge). The standard samplers
// give none.
func (s *DeliverySpan) setSamplerAttributes(kv []attribute.KeyValue) {
	s.sampling = true
	s.SetAttributes(kv...)
	s.sampling = false
	s.samplerAttrs = len(s.own())
	for _, a := range s.own() {
		if indexKey(s.set.fixed, a.Key) >= 0 {
			s.merge()
			return
		}
	}
}

// DeliverySpan is one delivery's span (Deliveries.Start): a trace.Span for
// the worker that settles the delivery, then, once ended, the read-only
// span the batch span processor exports. Unlike the SDK's spans it is not
// safe for concurrent use: one goroutine records it and ends it.
type DeliverySpan struct {
	// The embedded interfaces are nil: they only give the type the
	// unexported methods of trace.Span (the API's sanctioned way to
	// implement it) and of sdktrace.ReadOnlySpan (which keeps others from
	// implementing it: TestDeliverySpanImplementsEveryMethod fails when the
	// SDK adds one this type does not define).
	embedded.Span
	sdktrace.ReadOnlySpan

	set        *Deliveries
	sc, parent trace.SpanContext
	start, end time.Time
	ended      bool
	name       string // the span's when named, else the set's
	// attrs[:n] are the attributes set beyond the set's fixed ones, the
	// sampler's first (samplerAttrs of them); more holds those past
	// attrs' room.
	attrs        [8]attribute.KeyValue
	n            int
	samplerAttrs int
	more         []attribute.KeyValue
	// merged is true when an attribute replaced a fixed one: the span's
	// attributes are then all in more, in the SDK's order.
	merged bool
	// sampling is true while the sampler's attributes are set.
	sampling bool
	// named is true once SetName was called: name is then the span's.
	named  bool
	events [3]sdktrace.Event
	nev    int
	moreEv []sdktrace.Event
	links  []sdktrace.Link
	status sdktrace.Status
	// dropped counts the attributes dropped (invalid, or past the limit),
	// droppedEv and droppedLinks the events and links.
	dropped, droppedEv, droppedLinks int
}

// spanPool holds the delivery spans exported (release): a sampled delivery
// then allocates nothing, where a kilobyte per span was a third of what
// tracing cost at a sampler of 1 (the allocation and the collector's
// scanning of it).
var spanPool = sync.Pool{New: func() any { return new(DeliverySpan) }}

// release returns s to the pool: the exporter calls it once s is encoded,
// when nothing reads s any more (the batch span processor clears its batch
// after the export). A span the processor drops (its queue full, or
// stopped) is never released: the collector frees it.
func (s *DeliverySpan) release() {
	*s = DeliverySpan{}
	spanPool.Put(s)
}

var _ trace.Span = (*DeliverySpan)(nil)
var _ sdktrace.ReadOnlySpan = (*DeliverySpan)(nil)

// own returns the span's attributes beyond the fixed ones.
func (s *DeliverySpan) own() []attribute.KeyValue {
	if s.more != nil {
		return s.more
	}
	return s.attrs[:s.n]
}

// SetAttributes sets kv on the span as the SDK's span does: a key already
// set keeps its place and takes the new value; invalid ones are dropped.
func (s *DeliverySpan) SetAttributes(kv ...attribute.KeyValue) {
	if s.ended {
		return
	}
	for _, a := range kv {
		if !a.Valid() {
			s.dropped++
			continue
		}
		if !s.merged && !s.sampling {
			for _, f := range s.set.fixed {
				if f.Key == a.Key {
					s.merge()
					break
				}
			}
		}
		own := s.own()
		if s.merged {
			own = s.more
		}
		replaced := false
		for i := range own {
			if own[i].Key == a.Key {
				own[i], replaced = a, true
				break
			}
		}
		if replaced {
			continue
		}
		if l := s.set.rec.limits.AttributeCountLimit; l >= 0 && len(s.set.fixed)+len(own) >= l {
			s.dropped++ // the SDK keeps the first ones
			continue
		}
		if s.more == nil && s.n < len(s.attrs) {
			s.attrs[s.n] = a
			s.n++
			continue
		}
		if s.more == nil {
			s.more = append(make([]attribute.KeyValue, 0, 2*len(s.attrs)), s.attrs[:s.n]...)
		}
		s.more = append(s.more, a)
	}
}

// merge puts every attribute in more, in the SDK's order (the sampler's,
// the fixed ones, then the others), for a key that repeats a fixed one.
func (s *DeliverySpan) merge() {
	own := s.own()
	all := make([]attribute.KeyValue, 0, len(s.set.fixed)+len(own)+4)
	all = append(all, own[:s.samplerAttrs]...)
	for _, f := range s.set.fixed {
		if i := indexKey(all, f.Key); i >= 0 {
			all[i] = f
			continue
		}
		all = append(all, f)
	}
	all = append(all, own[s.samplerAttrs:]...)
	s.more, s.merged = all, true
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
func (s *DeliverySpan) AddEvent(name string, opts ...trace.EventOption) {
	if s.ended {
		return
	}
	c := trace.NewEventConfig(opts...)
	// As the SDK's: a repeated key stays repeated (the SDK normalises only
	// the slice and map values within, which delivery spans do not have).
	e := sdktrace.Event{Name: name, Attributes: c.Attributes(), Time: c.Timestamp()}
	if l := s.set.rec.limits.AttributePerEventCountLimit; l >= 0 && len(e.Attributes) > l {
		e.DroppedAttributeCount = len(e.Attributes) - l
		e.Attributes = e.Attributes[:l]
	}
	s.addEvent(e)
}

// addEvent appends e; past the event limit the oldest goes, as in the
// SDK's span.
func (s *DeliverySpan) addEvent(e sdktrace.Event) {
	if l := s.set.rec.limits.EventCountLimit; l >= 0 && len(s.Events()) >= l {
		s.droppedEv++
		if l == 0 {
			return
		}
		evs := s.Events()
		copy(evs, evs[1:])
		evs[len(evs)-1] = e
		return
	}
	if s.moreEv == nil && s.nev < len(s.events) {
		s.events[s.nev] = e
		s.nev++
		return
	}
	if s.moreEv == nil {
		s.moreEv = append(make([]sdktrace.Event, 0, 2*len(s.events)), s.events[:s.nev]...)
	}
	s.moreEv = append(s.moreEv, e)
}

// RecordError records err as an exception event, as the SDK's span does.
func (s *DeliverySpan) RecordError(err error, opts ...trace.EventOption) {
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
func (s *DeliverySpan) SetStatus(code codes.Code, description string) {
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
func (s *DeliverySpan) SetName(name string) {
	if !s.ended {
		s.name, s.named = name, true
	}
}

// AddLink adds a link to a valid span context.
func (s *DeliverySpan) AddLink(l trace.Link) {
	if s.ended || (!l.SpanContext.IsValid() && len(l.Attributes) == 0 && l.SpanContext.TraceState().Len() == 0) {
		return
	}
	link := sdktrace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes}
	if n := s.set.rec.limits.AttributePerLinkCountLimit; n >= 0 && len(link.Attributes) > n {
		link.DroppedAttributeCount = len(link.Attributes) - n
		link.Attributes = link.Attributes[:n]
	}
	if n := s.set.rec.limits.LinkCountLimit; n >= 0 && len(s.links) >= n {
		s.droppedLinks++ // the oldest goes, as in the SDK's span
		if n == 0 {
			return
		}
		s.links = append(s.links[1:], link)
		return
	}
	s.links = append(s.links, link)
}

// End ends the span (at the WithTimestamp time, else now) and hands it to
// the provider's batch span processor (the one it was built with: a
// processor registered on the provider later does not see delivery spans).
// A call on the span after End is ignored until the span is exported; then
// it goes back to the pool and may be another delivery's: its holder must
// drop it at End, as the workers do.
func (s *DeliverySpan) End(opts ...trace.SpanEndOption) {
	if s.ended {
		return
	}
	c := trace.NewSpanEndConfig(opts...)
	s.end = c.Timestamp()
	if s.end.IsZero() {
		s.end = time.Now()
	}
	s.ended = true
	s.set.rec.proc.OnEnd(s)
}

// IsRecording is true until End.
func (s *DeliverySpan) IsRecording() bool { return !s.ended }

// TracerProvider returns the provider of the span.
func (s *DeliverySpan) TracerProvider() trace.TracerProvider { return s.set.rec.tp }

// Name returns the span's name.
func (s *DeliverySpan) Name() string {
	if s.named {
		return s.name
	}
	return s.set.name
}

// SpanContext returns the span's context.
func (s *DeliverySpan) SpanContext() trace.SpanContext { return s.sc }

// Parent returns the context of the span's parent (its producer's, from the
// traceparent header), invalid for a root.
func (s *DeliverySpan) Parent() trace.SpanContext { return s.parent }

// SpanKind is CONSUMER.
func (s *DeliverySpan) SpanKind() trace.SpanKind { return trace.SpanKindConsumer }

// StartTime returns when the span started.
func (s *DeliverySpan) StartTime() time.Time { return s.start }

// EndTime returns when the span ended.
func (s *DeliverySpan) EndTime() time.Time { return s.end }

// Attributes returns every attribute of the span, in the SDK's order (a
// new slice: the exporter's encoder reads them without it).
func (s *DeliverySpan) Attributes() []attribute.KeyValue {
	if s.merged {
		return s.more
	}
	own := s.own()
	out := make([]attribute.KeyValue, 0, len(s.set.fixed)+len(own))
	out = append(out, own[:s.samplerAttrs]...)
	out = append(out, s.set.fixed...)
	return append(out, own[s.samplerAttrs:]...)
}

// appendAttributes writes the span's attributes as fields of an OTLP Span:
// the fixed ones as encoded once for the set.
func (s *DeliverySpan) appendAttributes(b []byte) []byte {
	if s.merged {
		for _, kv := range s.more {
			b = appendKeyValue(b, fSpanAttributes, kv)
		}
		return b
	}
	own := s.own()
	for _, kv := range own[:s.samplerAttrs] {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	b = append(b, s.set.fixedPB...)
	for _, kv := range own[s.samplerAttrs:] {
		b = appendKeyValue(b, fSpanAttributes, kv)
	}
	return b
}

// Links returns the span's links.
func (s *DeliverySpan) Links() []sdktrace.Link { return s.links }

// Events returns the span's events, in the order they were added.
func (s *DeliverySpan) Events() []sdktrace.Event {
	if s.moreEv != nil {
		return s.moreEv
	}
	return s.events[:s.nev]
}

// Status returns the span's status.
func (s *DeliverySpan) Status() sdktrace.Status { return s.status }

// InstrumentationScope returns platformd's scope, the SDK tracer's.
func (s *DeliverySpan) InstrumentationScope() instrumentation.Scope { return s.set.rec.scope }

// InstrumentationLibrary returns the scope, as the SDK's deprecated method
// does.
func (s *DeliverySpan) InstrumentationLibrary() instrumentation.Library { //nolint:staticcheck // part of ReadOnlySpan
	return s.set.rec.scope
}

// Resource returns the provider's resource.
func (s *DeliverySpan) Resource() *resource.Resource { return s.set.rec.res }

// DroppedAttributes counts the attributes dropped: invalid, or past the
// limit.
func (s *DeliverySpan) DroppedAttributes() int { return s.dropped }

// DroppedLinks counts the links dropped past the limit.
func (s *DeliverySpan) DroppedLinks() int { return s.droppedLinks }

// DroppedEvents counts the events dropped past the limit.
func (s *DeliverySpan) DroppedEvents() int { return s.droppedEv }

// ChildSpanCount is 0: no span starts under a delivery span in this
// process (its handlers' spans are the batch span's children).
func (s *DeliverySpan) ChildSpanCount() int { return 0 }
