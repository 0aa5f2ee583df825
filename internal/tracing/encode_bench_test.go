package tracing

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkEncode compares platformd's encoder with the OTLP exporter's
// transform and marshal on an export of 512 delivery spans as the
// workers end them (the contract's eight attributes).
func BenchmarkEncode(b *testing.B) {
	res := resource.NewSchemaless(attribute.String("service.name", "platformd"), attribute.String("host.name", "bench"))
	spans := make([]sdktrace.ReadOnlySpan, 512)
	now := time.Now()
	for i := range spans {
		spans[i] = tracetest.SpanStub{
			Name: "process stock.events",
			SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
				SpanID: trace.SpanID{byte(i), 1, 2, 3, 4, 5, 6, 7}, TraceFlags: trace.FlagsSampled}),
			SpanKind: trace.SpanKindConsumer, StartTime: now, EndTime: now.Add(time.Millisecond),
			Attributes: []attribute.KeyValue{attribute.String("messaging.system", "rabbitmq"), attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", "stock.events"), attribute.String("platformd.service", "stock"),
				attribute.String("platformd.pool", "stock-events"), attribute.String("messaging.rabbitmq.destination.routing_key", "order.order.placed.v1"),
				attribute.String("messaging.message.id", "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), attribute.String("platformd.outcome", "processed")},
			Resource: res, InstrumentationScope: instrumentation.Scope{Name: ScopeName, Version: "v1"},
		}.Snapshot()
	}
	b.Run("platformd", func(b *testing.B) {
		exp, _ := newOTLPExporter(context.Background(), &captureClient{})
		for b.Loop() {
			_ = exp.ExportSpans(context.Background(), spans)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
	b.Run("otlptrace", func(b *testing.B) {
		exp, _ := otlptrace.New(context.Background(), &captureClient{})
		for b.Loop() {
			_ = exp.ExportSpans(context.Background(), spans)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	})
}
