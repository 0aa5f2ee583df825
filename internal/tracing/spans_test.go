package tracing

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// A delivery span's API does what the SDK's span does for the same calls,
// beyond what the workers call (TestDeliverySpansMatchTheSDK in
// internal/workers covers theirs): repeated keys, a key that replaces a
// fixed attribute, invalid attributes, the status's precedence, renaming,
// links, events past the event limit, attributes past the attribute limit,
// calls after End.
func TestSpanAPIMatchesTheSDK(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1_800_000_000, 0).Add(time.Duration(ms) * time.Millisecond) }
	fixed := []attribute.KeyValue{attribute.String("messaging.system", "rabbitmq"), attribute.String("platformd.pool", "p"),
		attribute.Int("fixed.int", 7)}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{8},
		TraceFlags: trace.FlagsSampled, Remote: true})
	scripts := map[string]func(s trace.Span){
		"attributes": func(s trace.Span) {
			s.SetAttributes(attribute.Int("a", 1), attribute.String("b", "x"))
			s.SetAttributes(attribute.Int("a", 2), attribute.KeyValue{}, attribute.Bool("c", true))
			for i := range 12 {
				s.SetAttributes(attribute.Int(fmt.Sprintf("k%d", i), i))
			}
			s.SetAttributes(attribute.String("b", "y"))
		},
		"fixed key replaced": func(s trace.Span) {
			s.SetAttributes(attribute.Int("a", 1), attribute.String("platformd.pool", "other"), attribute.Int("d", 4))
			s.SetAttributes(attribute.Int("a", 3))
		},
		"past the attribute limit": func(s trace.Span) {
			for i := range deliveryLimit + 10 {
				s.SetAttributes(attribute.Int(fmt.Sprintf("k%d", i), i))
			}
			s.SetAttributes(attribute.Int("k3", -3))
		},
		"status and events": func(s trace.Span) {
			s.SetStatus(codes.Error, "first")
			s.AddEvent("e1", trace.WithTimestamp(at(1)), trace.WithAttributes(attribute.Int("x", 1), attribute.Int("x", 2),
				attribute.String("y", "z")))
			s.RecordError(errors.New("boom"), trace.WithTimestamp(at(2)))
			s.RecordError(fmt.Errorf("wrapped: %w", context.Canceled), trace.WithTimestamp(at(3)))
			s.RecordError(nil)
			s.SetStatus(codes.Ok, "dropped description")
			s.SetStatus(codes.Error, "after ok")
			s.SetStatus(codes.Unset, "")
			s.SetName("renamed")
			s.AddLink(trace.Link{SpanContext: parent, Attributes: []attribute.KeyValue{attribute.String("l", "v")}})
			s.AddLink(trace.Link{})
		},
		"past the event limit": func(s trace.Span) {
			for i := range deliveryLimit + 5 {
				s.AddEvent(fmt.Sprintf("e%d", i), trace.WithTimestamp(at(i)))
			}
		},
	}
	for name, script := range scripts {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t)
			rcv := tracingtest.New(t)
			p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, Logger: quiet()})
			require.NoError(t, err)
			defer p.Stop()
			ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)

			_, sdkSpan := p.tracer.Tracer.Start(ctx, "process q", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(at(0)))
			sdkSpan.SetAttributes(fixed...)
			script(sdkSpan)
			sdkSpan.End(trace.WithTimestamp(at(500)))
			sdkSpan.SetAttributes(attribute.String("after", "end"))

			d := p.tracer.Spans("process q", trace.SpanKindConsumer, fixed)
			require.NotNil(t, d)
			span, sc := d.Start(ctx, at(0))
			require.NotNil(t, span)
			require.Equal(t, span.SpanContext(), sc)
			script(span)
			span.End(trace.WithTimestamp(at(500)))
			span.SetAttributes(attribute.String("after", "end"))
			span.End()

			want, got := exportedPair(t, p, rcv, true)
			require.Equal(t, want.Resource, got.Resource)
			require.Equal(t, want.Scope, got.Scope)
			requireSameSpan(t, want.Span, got.Span)
		})
	}
}

// exportedPair flushes p and returns the two spans rcv received, the SDK's
// first, without the ids drawn at random: the span id, and the trace id
// too unless keepTrace (the spans have a parent).
func exportedPair(t *testing.T, p tracingtest.Flusher, rcv *tracingtest.Receiver, keepTrace bool) (sdk, ours tracingtest.Span) {
	t.Helper()
	require.NoError(t, p.ForceFlush(context.Background()))
	spans := rcv.Spans()
	require.Len(t, spans, 2)
	sdk, ours = spans[0], spans[1]
	for _, s := range []*tracingtest.Span{&sdk, &ours} {
		s.Span = proto.Clone(s.Span).(*tracepb.Span)
		s.SpanId = nil
		if !keepTrace {
			s.TraceId = nil
		}
	}
	return sdk, ours
}

func requireSameSpan(t *testing.T, sdk, ours *tracepb.Span) {
	t.Helper()
	require.True(t, proto.Equal(sdk, ours), "SDK:   %v\nSpans: %v", sdk, ours)
}

// Every method of the read-only span the SDK's processors and exporters call,
// and of trace.Span, is the delivery span's own: the interfaces embedded
// for their unexported methods are nil, and a method the SDK adds in a new
// version would panic through them.
func TestSpanImplementsEveryMethod(t *testing.T) {
	s := &Span{set: &Spans{rec: &recorder{}}, ended: true}
	v := reflect.ValueOf(s)
	for _, it := range []reflect.Type{reflect.TypeFor[sdktrace.ReadOnlySpan](), reflect.TypeFor[trace.Span]()} {
		for i := range it.NumMethod() {
			m := it.Method(i)
			if !m.IsExported() {
				continue
			}
			fn := v.MethodByName(m.Name)
			args := make([]reflect.Value, fn.Type().NumIn())
			for j := range args {
				args[j] = reflect.Zero(fn.Type().In(j))
			}
			require.NotPanics(t, func() {
				if fn.Type().IsVariadic() {
					fn.CallSlice(args)
				} else {
					fn.Call(args)
				}
			}, "%s.%s", it, m.Name)
		}
	}
}

// Under a span limit tighter than the defaults the SDK records delivery
// spans: Spans is nil and the workers start them with the SDK.
func TestSpansOnlyUnderTheDefaultLimits(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		fast       bool
	}{
		{"", "", true},
		{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "200", true},
		{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "12", false},
		{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4096", false},
		{"OTEL_SPAN_EVENT_COUNT_LIMIT", "2", false},
		{"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "1", false},
		{"OTEL_TRACES_SAMPLER", "always_off", false},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			cleanEnv(t)
			if tc.env != "" {
				t.Setenv(tc.env, tc.value)
			}
			p, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:1", Logger: quiet()})
			require.NoError(t, err)
			defer p.Stop()
			require.Equal(t, tc.fast, p.tracer.Spans("process q", trace.SpanKindConsumer, nil) != nil)
		})
	}
}

// attrSampler samples every span and gives it attributes, one of them of a
// fixed attribute's key.
type attrSampler struct{}

func (attrSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
		Attributes: []attribute.KeyValue{attribute.String("sampler.rule", "all"), attribute.String("platformd.pool", "from sampler"),
			attribute.Int("sampler.n", 1)}}
}

func (attrSampler) Description() string { return "attrSampler" }

// A sampler's attributes come first, as on the SDK's span, and a fixed
// attribute of the same key takes the sampler's place.
func TestSpanSamplerAttributes(t *testing.T) {
	cleanEnv(t)
	rcv := tracingtest.New(t)
	exp, err := newOTLPExporter(context.Background(), otlptracehttp.NewClient(otlptracehttp.WithEndpointURL(rcv.HTTPEndpoint+tracesPath)))
	require.NoError(t, err)
	bsp := sdktrace.NewBatchSpanProcessor(exp)
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSampler(attrSampler{}), sdktrace.WithSpanProcessor(bsp))
	defer func() { require.NoError(t, sdk.Shutdown(context.Background())) }()
	tr := sdk.Tracer(ScopeName)
	rec := newRecorder(tr, attrSampler{}, bsp, sdk, sdktrace.NewSpanLimits())
	require.NotNil(t, rec)
	fixed := []attribute.KeyValue{attribute.String("messaging.system", "rabbitmq"), attribute.String("platformd.pool", "p")}
	start := time.Unix(1_800_000_000, 0)

	_, sdkSpan := tr.Start(context.Background(), "process q", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(start))
	sdkSpan.SetAttributes(append(slices.Clone(fixed), attribute.Int("own", 1))...)
	sdkSpan.End(trace.WithTimestamp(start))
	d := (&Tracer{rec: rec}).Spans("process q", trace.SpanKindConsumer, fixed)
	span, _ := d.Start(context.Background(), start)
	require.NotNil(t, span)
	span.SetAttributes(attribute.Int("own", 1))
	span.End(trace.WithTimestamp(start))

	w, g := exportedPair(t, sdk, rcv, false)
	requireSameSpan(t, w.Span, g.Span)
}

// Past the link limit the oldest links go, as from the SDK's span, and the
// count of those dropped is exported.
func TestSpanLinksPastTheLimit(t *testing.T) {
	cleanEnv(t)
	t.Setenv(envLinkCountLimit, "3")
	rcv := tracingtest.New(t)
	p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, Logger: quiet()})
	require.NoError(t, err)
	defer p.Stop()
	start := time.Unix(1_800_000_000, 0)
	link := func(i int) trace.Link {
		return trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i + 1)},
			SpanID: trace.SpanID{byte(i + 1)}, TraceFlags: trace.FlagsSampled}), Attributes: []attribute.KeyValue{attribute.Int("i", i)}}
	}
	_, sdkSpan := p.tracer.Tracer.Start(context.Background(), "dedup batch", trace.WithTimestamp(start))
	d := p.tracer.Spans("dedup batch", trace.SpanKindInternal, nil)
	require.NotNil(t, d)
	span, _ := d.Start(context.Background(), start)
	for i := range 7 {
		sdkSpan.AddLink(link(i))
		span.AddLink(link(i))
	}
	sdkSpan.End(trace.WithTimestamp(start))
	span.End(trace.WithTimestamp(start))
	w, g := exportedPair(t, p, rcv, false)
	require.Len(t, g.GetLinks(), 3)
	require.EqualValues(t, 4, g.GetDroppedLinksCount())
	requireSameSpan(t, w.Span, g.Span)
}
