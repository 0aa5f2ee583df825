package tracingtest

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// NewProvider returns an SDK tracer provider that samples every span and
// exports it to r over OTLP/HTTP with a real exporter, whatever the
// environment says (the tests of instrumentation need no OTEL_* variable).
// Spans leave within a few milliseconds of their end; the provider is shut
// down when t ends.
func NewProvider(t TB, r *Receiver) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(r.HTTPEndpoint+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(5*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("platformd-test"))))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	})
	return tp
}
