package tracingtest

import (
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countSpans agrees with a full decode.
func TestCountSpans(t *testing.T) {
	req := &collectortrace.ExportTraceServiceRequest{}
	want := 0
	for r := range 3 {
		rs := &tracepb.ResourceSpans{SchemaUrl: "x"}
		for s := range r + 1 {
			ss := &tracepb.ScopeSpans{SchemaUrl: "y"}
			for k := range s + 2 {
				ss.Spans = append(ss.Spans, &tracepb.Span{Name: "s", TraceId: make([]byte, 16), SpanId: []byte{byte(k), 1, 2, 3, 4, 5, 6, 7},
					Events: []*tracepb.Span_Event{{Name: "e"}}, Links: []*tracepb.Span_Link{{TraceId: make([]byte, 16)}}})
				want++
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		req.ResourceSpans = append(req.ResourceSpans, rs)
	}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := countSpans(b)
	if err != nil || n != want {
		t.Fatalf("countSpans = %d, %v; want %d", n, err, want)
	}
	if _, err := countSpans(b[:len(b)-3]); err == nil {
		t.Fatal("a truncated request must not count")
	}
}
