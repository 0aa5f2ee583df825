package workers

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// BenchmarkTraceSpans measures what tracing adds per delivery to a batch
// of 100, without broker or database: the delivery spans' start, settle
// and end, and their export over OTLP/HTTP to an in-process receiver that
// only counts (the SDK's batching and the exporter run in the
// background: cpu-ns/msg is the process's CPU per delivery, theirs
// included). Off, and on at ratio 1, 0.1 and 0 (every span sampled out:
// the cost of the sampling decision alone). The machine's noise is large:
// compare runs interleaved, with -count.
func BenchmarkTraceSpans(b *testing.B) {
	rcv, err := tracingtest.Start(context.Background(), tracingtest.Options{CountOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	for _, tc := range []struct {
		name  string
		on    bool
		ratio float64
	}{{"off", false, 0}, {"ratio=1", true, 1}, {"ratio=0.1", true, 0.1}, {"ratio=0", true, 0}} {
		b.Run(tc.name, func(b *testing.B) {
			var tp *tracing.Provider
			var tr trace.Tracer
			if tc.on {
				tp = newBenchProvider(b, rcv, tc.ratio)
				tr = tp.Tracer()
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
			start := tracingtest.CPUTime()
			b.ResetTimer()
			for b.Loop() {
				for i := range batch {
					batch[i] = message{d: amqp.Delivery{RoutingKey: "order.order.placed.v1"},
						ev: consumer.Event{ID: ids[i], Delivery: consumer.Delivery{RoutingKey: "order.order.placed.v1"}}}
				}
				now := time.Now()
				w.startSpans(batch, events, now)
				for i := range batch {
					batch[i].s = settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}
				}
				w.stampCopies(context.Background(), batch)
				w.endSpans(batch, nil, true)
			}
			if tp != nil {
				_ = tp.Shutdown(context.Background())
			}
			b.ReportMetric(float64(tracingtest.CPUTime()-start)/float64(b.N*size), "cpu-ns/msg")
		})
	}
}

// newBenchProvider is the daemon's tracing (tracing.New: its sampler,
// batching and exporter) exporting to r over OTLP/HTTP at ratio. The
// caller shuts it down before reading CPUTime, so that the export's CPU is
// counted.
func newBenchProvider(b *testing.B, r *tracingtest.Receiver, ratio float64) *tracing.Provider {
	b.Helper()
	p, err := tracing.New(context.Background(), tracing.Config{Endpoint: r.HTTPEndpoint, SamplerRatio: &ratio,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return p
}
