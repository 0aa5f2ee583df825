package workers

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTraceSpans measures what tracing adds per delivery to a batch
// of 100, without broker or database: the delivery spans' start, settle
// and end, and their export over OTLP/HTTP to an in-process receiver that
// only counts (the SDK's batching and the exporter run in the
// background: cpu-ns/msg is the process's CPU per delivery, theirs
// included). Off, on at ratio 1 and at 0.1.
func BenchmarkTraceSpans(b *testing.B) {
	rcv, err := tracingtest.Start(tracingtest.Options{CountOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	for _, tc := range []struct {
		name  string
		ratio float64
	}{{"off", 0}, {"ratio=1", 1}, {"ratio=0.1", 0.1}} {
		b.Run(tc.name, func(b *testing.B) {
			var tp *sdktrace.TracerProvider
			var tr trace.Tracer
			if tc.ratio > 0 {
				exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(rcv.HTTPEndpoint+"/v1/traces"))
				if err != nil {
					b.Fatal(err)
				}
				tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.ratio))))
				tr = tp.Tracer("bench")
			}
			p := &Pool{cfg: PoolConfig{Name: "stock-events", Service: "stock", Topology: Topology{Queue: "stock.events",
				RetryDelays: []time.Duration{time.Second}}}}
			w := &worker{pool: p, tr: newTracer(p.cfg, tr)}
			const size = 100
			batch := make([]message, size)
			events := make([]consumer.Event, size)
			ids := make([]uuid.UUID, size)
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7())
			}
			start := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				for i := range batch {
					batch[i] = message{d: amqp.Delivery{RoutingKey: "order.order.placed.v1", Headers: amqp.Table{}},
						ev: consumer.Event{ID: ids[i]}}
				}
				now := time.Now()
				w.startSpans(batch, events, now)
				for i := range batch {
					batch[i].s = settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}
				}
				w.stampCopies(batch)
				w.endSpans(batch, nil, true)
			}
			if tp != nil {
				_ = tp.Shutdown(context.Background())
			}
			b.ReportMetric(float64(cpuTime()-start)/float64(b.N*size), "cpu-ns/msg")
		})
	}
}
