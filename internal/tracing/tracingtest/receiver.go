// Package tracingtest is an in-process OTLP trace receiver for tests and
// the bench: a real gRPC TraceService and a real HTTP /v1/traces endpoint on
// loopback listeners of their own, decoding what exporters send as OTLP
// protobuf. It stands where a collector would, so that a test proves what
// reaches the wire, not what the SDK recorded in memory.
package tracingtest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource and scope.
type Span struct {
	*tracepb.Span
	// Resource holds the resource's attributes, as Value renders them.
	Resource map[string]string
	// Scope is the instrumentation scope's name.
	Scope string
}

// TraceIDHex is the span's trace id in hex.
func (s Span) TraceIDHex() string { return hex.EncodeToString(s.GetTraceId()) }

// SpanIDHex is the span's id in hex.
func (s Span) SpanIDHex() string { return hex.EncodeToString(s.GetSpanId()) }

// ParentIDHex is the span's parent id in hex ("" for a root).
func (s Span) ParentIDHex() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attr returns the span attribute key as Value renders it.
func (s Span) Attr(key string) (string, bool) { return attr(s.GetAttributes(), key) }

// Event returns the span's first event called name.
func (s Span) Event(name string) (*tracepb.Span_Event, bool) {
	for _, e := range s.GetEvents() {
		if e.GetName() == name {
			return e, true
		}
	}
	return nil, false
}

// EventAttr returns an attribute of an event, as Value renders it.
func EventAttr(e *tracepb.Span_Event, key string) (string, bool) { return attr(e.GetAttributes(), key) }

func attr(kvs []*commonpb.KeyValue, key string) (string, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return Value(kv.GetValue()), true
		}
	}
	return "", false
}

// Value renders an attribute value: strings as they are, numbers and
// booleans in Go syntax, anything else through its protobuf text.
func Value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Options tune a Receiver.
type Options struct {
	// CountOnly keeps no span, only the counts (a bench receives millions).
	CountOnly bool
}

// Receiver receives OTLP traces over gRPC and HTTP. Its methods are safe
// for concurrent use.
type Receiver struct {
	// GRPCEndpoint is the gRPC listener as an endpoint URL (http://host:port).
	GRPCEndpoint string
	// HTTPEndpoint is the HTTP listener as a base endpoint URL
	// (http://host:port); spans are posted to its /v1/traces.
	HTTPEndpoint string

	opts    Options
	grpcSrv *grpc.Server
	httpSrv *http.Server
	done    sync.WaitGroup

	// bufMu guards buf, the body of a CountOnly export.
	bufMu sync.Mutex
	buf   []byte

	mu       sync.Mutex
	spans    []Span
	count    int
	requests int
	changed  chan struct{} // closed and replaced whenever spans arrive
}

// Start listens on two loopback ports and serves until Close (ctx bounds
// the listening only).
func Start(ctx context.Context, opts Options) (*Receiver, error) {
	r := &Receiver{opts: opts, changed: make(chan struct{})}
	var lc net.ListenConfig
	gl, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("tracingtest: listen: %w", err)
	}
	hl, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("tracingtest: listen: %w", err)
	}
	r.GRPCEndpoint = "http://" + gl.Addr().String()
	r.HTTPEndpoint = "http://" + hl.Addr().String()
	r.grpcSrv = grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(r.grpcSrv, grpcService{r: r})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	r.done.Add(2)
	go func() { defer r.done.Done(); _ = r.grpcSrv.Serve(gl) }()
	go func() { defer r.done.Done(); _ = r.httpSrv.Serve(hl) }()
	return r, nil
}

// TB is the part of testing.TB that New needs.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// New starts a Receiver closed when t ends.
func New(t TB) *Receiver {
	t.Helper()
	r, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// Close stops both servers and waits for them.
func (r *Receiver) Close() {
	r.grpcSrv.Stop()
	_ = r.httpSrv.Close()
	r.done.Wait()
}

type grpcService struct {
	collectortrace.UnimplementedTraceServiceServer
	r *Receiver
}

// Export receives one OTLP/gRPC export.
func (g grpcService) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.r.add(req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveHTTP receives one OTLP/HTTP protobuf export.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	var b []byte
	var err error
	if r.opts.CountOnly && body == req.Body && req.ContentLength > 0 {
		// A bench's receiver shares the machine it measures: one read
		// into a reused buffer of the body's length, where ReadAll grows
		// and copies a new one per export.
		r.bufMu.Lock()
		defer r.bufMu.Unlock()
		r.buf = slices.Grow(r.buf[:0], int(req.ContentLength))[:req.ContentLength]
		_, err = io.ReadFull(body, r.buf)
		b = r.buf
	} else {
		b, err = io.ReadAll(body)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.opts.CountOnly {
		n, err := countSpans(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.record(nil, n)
	} else {
		var msg collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg)
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *collectortrace.ExportTraceServiceRequest) {
	var got []Span
	n := 0
	for _, rs := range req.GetResourceSpans() {
		var res map[string]string
		if !r.opts.CountOnly {
			res = map[string]string{}
			for _, kv := range rs.GetResource().GetAttributes() {
				res[kv.GetKey()] = Value(kv.GetValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
			if r.opts.CountOnly {
				continue
			}
			for _, sp := range ss.GetSpans() {
				got = append(got, Span{Span: sp, Resource: res, Scope: ss.GetScope().GetName()})
			}
		}
	}
	r.record(got, n)
}

func (r *Receiver) record(got []Span, n int) {
	r.mu.Lock()
	r.requests++
	r.count += n
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Field numbers of the OTLP trace messages countSpans walks:
// ExportTraceServiceRequest.resource_spans, ResourceSpans.scope_spans and
// ScopeSpans.spans.
const (
	fieldResourceSpans = 1
	fieldScopeSpans    = 2
	fieldSpans         = 2
)

// countSpans counts the spans of an encoded ExportTraceServiceRequest by
// walking its wire format, decoding nothing else: a bench's receiver must
// not cost what a full decode costs, on the machine it measures.
func countSpans(b []byte) (int, error) {
	n := 0
	err := eachField(b, fieldResourceSpans, func(rs []byte) error {
		return eachField(rs, fieldScopeSpans, func(ss []byte) error {
			return eachField(ss, fieldSpans, func([]byte) error { n++; return nil })
		})
	})
	return n, err
}

// eachField calls fn with every length-delimited field num of message b.
func eachField(b []byte, num protowire.Number, fn func([]byte) error) error {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return protowire.ParseError(l)
			}
			if err := fn(v); err != nil {
				return err
			}
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil
}

// Spans returns the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Count returns the number of spans received so far.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Requests returns the number of exports received so far.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// ErrTimeout is returned by Wait when its condition did not hold in time.
var ErrTimeout = errors.New("tracingtest: timed out waiting for spans")

// Wait blocks until cond holds for the spans received so far (checked on
// every arrival) or timeout passes, and returns those spans.
func (r *Receiver) Wait(timeout time.Duration, cond func([]Span) bool) ([]Span, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans := append([]Span(nil), r.spans...)
		changed := r.changed
		r.mu.Unlock()
		if cond(spans) {
			return spans, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return spans, ErrTimeout
		}
	}
}

// Flusher is a tracer provider whose ForceFlush exports every span ended
// so far (the SDK's, platformd's tracing.Provider).
type Flusher interface {
	ForceFlush(ctx context.Context) error
}

// WaitFlushed is Wait for a provider that exports on its own schedule
// (OTEL_BSP_SCHEDULE_DELAY, 5 s by default): it flushes p, then checks
// cond on what arrived, every 10 ms until timeout passes.
func (r *Receiver) WaitFlushed(timeout time.Duration, p Flusher, cond func([]Span) bool) ([]Span, error) {
	deadline := time.Now().Add(timeout)
	for {
		if err := p.ForceFlush(context.Background()); err != nil {
			return nil, err
		}
		spans := r.Spans()
		if cond(spans) {
			return spans, nil
		}
		if time.Now().After(deadline) {
			return spans, fmt.Errorf("%w: %d spans received in %s", ErrTimeout, len(spans), timeout)
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // a bounded poll of what the receiver has collected, under its timeout
	}
}

// Named returns the spans of spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

// WithAttr returns the spans of spans whose attribute key is value.
func WithAttr(spans []Span, key, value string) []Span {
	var out []Span
	for _, s := range spans {
		if v, ok := s.Attr(key); ok && v == value {
			out = append(out, s)
		}
	}
	return out
}
