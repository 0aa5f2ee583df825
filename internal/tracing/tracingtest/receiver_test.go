package tracingtest

import (
	"bytes"
	"context"
	"net/http"
	"strings"
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

// A counting receiver reads each export into one reused buffer: exports of
// different sizes, the smaller after the larger, are all counted.
func TestCountOnlyOverHTTP(t *testing.T) {
	r, err := Start(context.Background(), Options{CountOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer http.DefaultClient.CloseIdleConnections()
	want := 0
	for _, n := range []int{50, 3, 20} {
		ss := &tracepb.ScopeSpans{}
		for k := range n {
			ss.Spans = append(ss.Spans, &tracepb.Span{Name: strings.Repeat("s", k), TraceId: make([]byte, 16), SpanId: make([]byte, 8)})
		}
		b, err := proto.Marshal(&collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(r.HTTPEndpoint+"/v1/traces", "application/x-protobuf", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		want += n
	}
	if got := r.Count(); got != want || r.Requests() != 3 {
		t.Fatalf("counted %d spans in %d requests; want %d in 3", got, r.Requests(), want)
	}
}
