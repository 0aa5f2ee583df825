package tracing

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// exporter is an OTLP span exporter: the OTel exporters' own clients
// (otlptracegrpc, otlptracehttp: their connection, TLS, headers,
// compression, timeout, retries and every OTEL_EXPORTER_OTLP_* variable)
// with platformd's encoder in place of otlptrace.Exporter's transform. The
// encoder's bytes travel as the unknown fields of otherwise empty
// ResourceSpans messages, which protobuf marshals verbatim: on the wire
// they are the ResourceSpans a collector decodes. Its methods are safe for
// concurrent use; exports run one at a time, as the SDK's batch processor
// calls them.
type exporter struct {
	client otlptrace.Client

	mu  sync.Mutex
	enc encoder

	stop    sync.Once
	stopErr error
}

// newOTLPExporter starts client and returns the exporter over it.
func newOTLPExporter(ctx context.Context, client otlptrace.Client) (*exporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &exporter{client: client}, nil
}

// ExportSpans encodes spans and uploads them in one request.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	bodies := e.enc.encode(spans)
	for _, s := range spans {
		if d, ok := s.(*Span); ok {
			d.release()
		}
	}
	if len(bodies) == 0 {
		return nil
	}
	rs := make([]*tracepb.ResourceSpans, len(bodies))
	for i, body := range bodies {
		rs[i] = &tracepb.ResourceSpans{}
		rs[i].ProtoReflect().SetUnknown(protoreflect.RawFields(body))
	}
	// The client is done with the bytes when it returns (its retries run
	// within the call): the encoder's buffer is free again then.
	if err := e.client.UploadTraces(ctx, rs); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// Shutdown stops the client (once; later calls return the first's error).
func (e *exporter) Shutdown(ctx context.Context) error {
	e.stop.Do(func() { e.stopErr = e.client.Stop(ctx) })
	return e.stopErr
}
