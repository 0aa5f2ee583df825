package tracing

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// captureClient is an otlptrace.Client that keeps the last upload as the
// request's bytes, as a client would send them.
type captureClient struct{ body []byte }

func (*captureClient) Start(context.Context) error { return nil }
func (*captureClient) Stop(context.Context) error  { return nil }
func (c *captureClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&collectortrace.ExportTraceServiceRequest{ResourceSpans: rs})
	c.body = b
	return err
}

// decoded is what a collector decodes from an exporter's request.
func decoded(t *testing.T, exp sdktrace.SpanExporter, c *captureClient, spans []sdktrace.ReadOnlySpan) *collectortrace.ExportTraceServiceRequest {
	t.Helper()
	c.body = nil
	require.NoError(t, exp.ExportSpans(context.Background(), spans))
	var req collectortrace.ExportTraceServiceRequest
	require.NoError(t, proto.Unmarshal(c.body, &req))
	require.Empty(t, req.ProtoReflect().GetUnknown())
	for _, rs := range req.GetResourceSpans() {
		require.Empty(t, rs.ProtoReflect().GetUnknown(), "every field of ours is one a collector knows")
	}
	return &req
}

// TestEncodeMatchesExporter: what platformd's encoder sends is what the
// OTel OTLP exporter sends, decoded field for field, for spans of every
// shape: every attribute type, events, links, status, parents local and
// remote, trace state, dropped counts, several resources and scopes, and
// values long enough for lengths of two and three bytes.
func TestEncodeMatchesExporter(t *testing.T) {
	ours, theirs := &captureClient{}, &captureClient{}
	ourExp, err := newOTLPExporter(context.Background(), ours)
	require.NoError(t, err)
	theirExp, err := otlptrace.New(context.Background(), theirs)
	require.NoError(t, err)
	rnd := rand.New(rand.NewPCG(1, 2))
	for round := range 60 {
		spans := randomSpans(rnd, 1+rnd.IntN(20))
		if round == 0 {
			// A batch processor's whole export, and then some: a
			// ScopeSpans with a length of three bytes.
			spans = randomSpans(rnd, 600)
		}
		got, want := decoded(t, ourExp, ours, spans), decoded(t, theirExp, theirs, spans)
		require.Len(t, got.GetResourceSpans(), len(want.GetResourceSpans()))
		// The exporter orders resources as a map iterates: match them by
		// equality.
		for _, g := range got.GetResourceSpans() {
			found := false
			for _, w := range want.GetResourceSpans() {
				if proto.Equal(g, w) {
					found = true
					break
				}
			}
			require.Truef(t, found, "round %d: resource spans %v not sent by the exporter", round, g)
		}
	}
	require.NoError(t, ourExp.Shutdown(context.Background()))
	require.NoError(t, ourExp.Shutdown(context.Background()), "a second shutdown is not an error")
}

// TestEncodeEmpty: no span, no request.
func TestEncodeEmpty(t *testing.T) {
	c := &captureClient{}
	exp, err := newOTLPExporter(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, exp.ExportSpans(context.Background(), nil))
	require.NoError(t, exp.ExportSpans(context.Background(), []sdktrace.ReadOnlySpan{nil}))
	require.Nil(t, c.body)
}

func randomSpans(rnd *rand.Rand, n int) []sdktrace.ReadOnlySpan {
	resources := []*resource.Resource{
		resource.NewSchemaless(attribute.String("service.name", "platformd"), attribute.String("host.name", "a")),
		resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", attribute.String("service.name", "other")),
		resource.Empty(),
	}
	scopes := []instrumentation.Scope{
		{Name: ScopeName, Version: "v1.2.3"},
		{Name: "other", SchemaURL: "https://opentelemetry.io/schemas/1.26.0", Attributes: attribute.NewSet(attribute.Int("n", 1))},
		{},
	}
	out := make([]sdktrace.ReadOnlySpan, n)
	for i := range out {
		s := tracetest.SpanStub{
			Name:                 randomString(rnd),
			SpanContext:          randomSpanContext(rnd),
			SpanKind:             trace.SpanKind(rnd.IntN(7)),
			StartTime:            randomTime(rnd),
			EndTime:              randomTime(rnd),
			Attributes:           randomAttrs(rnd, 2),
			DroppedAttributes:    rnd.IntN(3) * rnd.IntN(1000),
			DroppedEvents:        rnd.IntN(2),
			DroppedLinks:         rnd.IntN(2) * math.MaxInt32 * 4,
			ChildSpanCount:       rnd.IntN(3),
			Resource:             resources[rnd.IntN(len(resources))],
			InstrumentationScope: scopes[rnd.IntN(len(scopes))],
		}
		if rnd.IntN(3) > 0 {
			s.Parent = randomSpanContext(rnd)
		}
		switch rnd.IntN(4) {
		case 1:
			s.Status = sdktrace.Status{Code: codes.Error, Description: randomString(rnd)}
		case 2:
			s.Status = sdktrace.Status{Code: codes.Ok}
		case 3:
			s.Status = sdktrace.Status{Code: codes.Unset, Description: "ignored"}
		}
		for range rnd.IntN(4) {
			s.Events = append(s.Events, sdktrace.Event{Name: randomString(rnd), Time: randomTime(rnd),
				Attributes: randomAttrs(rnd, 1), DroppedAttributeCount: rnd.IntN(2)})
		}
		for range rnd.IntN(20) * rnd.IntN(2) {
			s.Links = append(s.Links, sdktrace.Link{SpanContext: randomSpanContext(rnd),
				Attributes: randomAttrs(rnd, 1), DroppedAttributeCount: rnd.IntN(2)})
		}
		out[i] = s.Snapshot()
	}
	return out
}

func randomSpanContext(rnd *rand.Rand) trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	if rnd.IntN(10) > 0 {
		for i := range tid {
			tid[i] = byte(rnd.Uint32())
		}
		for i := range sid {
			sid[i] = byte(rnd.Uint32())
		}
	}
	cfg := trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(rnd.Uint32()), Remote: rnd.IntN(2) == 0}
	if rnd.IntN(4) == 0 {
		ts, err := trace.ParseTraceState(fmt.Sprintf("vendor=v%d,other=x", rnd.IntN(100)))
		if err == nil {
			cfg.TraceState = ts
		}
	}
	return trace.NewSpanContext(cfg)
}

func randomTime(rnd *rand.Rand) time.Time {
	switch rnd.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		return time.Unix(-int64(rnd.IntN(1e9)), 0)
	}
	return time.Unix(0, rnd.Int64N(math.MaxInt64))
}

func randomString(rnd *rand.Rand) string {
	switch rnd.IntN(200) {
	case 0, 1, 2, 3, 4:
		return ""
	case 5, 6, 7:
		return strings.Repeat("é", 40+rnd.IntN(100)) // lengths over 127
	case 8:
		return strings.Repeat("x", 16384+rnd.IntN(100)) // a three-byte length
	case 9, 10, 11, 12, 13, 14, 15, 16, 17, 18:
		return strings.Repeat("ab", 30+rnd.IntN(40))
	}
	return fmt.Sprintf("name-%d", rnd.IntN(1000))
}

func randomAttrs(rnd *rand.Rand, depth int) []attribute.KeyValue {
	var kvs []attribute.KeyValue
	for i := range rnd.IntN(7) {
		kvs = append(kvs, attribute.KeyValue{Key: attribute.Key(fmt.Sprintf("k%d.%d", i, rnd.IntN(3))),
			Value: randomValue(rnd, depth)})
	}
	if rnd.IntN(8) == 0 {
		kvs = append(kvs, attribute.KeyValue{Key: "", Value: attribute.StringValue("keyless")})
	}
	return kvs
}

func randomValue(rnd *rand.Rand, depth int) attribute.Value {
	switch rnd.IntN(12) {
	case 0:
		return attribute.BoolValue(rnd.IntN(2) == 0)
	case 1:
		return attribute.Int64Value(rnd.Int64() - math.MaxInt64/2)
	case 2:
		return attribute.Float64Value(rnd.NormFloat64())
	case 3:
		return attribute.BoolSliceValue([]bool{true, false, rnd.IntN(2) == 0})
	case 4:
		return attribute.Int64SliceValue([]int64{-1, 0, rnd.Int64()})
	case 5:
		return attribute.Float64SliceValue([]float64{math.Inf(1), 0, rnd.Float64()})
	case 6:
		return attribute.StringSliceValue([]string{"", randomString(rnd)})
	case 7:
		return attribute.ByteSliceValue([]byte(randomString(rnd)))
	case 8:
		if depth > 0 {
			return attribute.SliceValue(randomValue(rnd, depth-1), randomValue(rnd, depth-1))
		}
	case 9:
		if depth > 0 {
			return attribute.MapValue(randomAttrs(rnd, depth-1)...)
		}
	case 10:
		return attribute.Value{}
	}
	return attribute.StringValue(randomString(rnd))
}
