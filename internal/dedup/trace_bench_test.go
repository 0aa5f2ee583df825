package dedup

import (
	"context"
	"log/slog"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// BenchmarkTraceBatch measures what tracing adds per event to the dedup
// step of a batch of 100, without the database: the batch span with its
// links to the deliveries' spans, the insert, one handler and the commit
// span, and their export over OTLP/HTTP to an in-process receiver that
// only counts. cpu-ns/event is the process's CPU per event, the SDK's
// batching and export included; add BenchmarkTraceSpans (internal/workers)
// for a delivery's whole cost.
func BenchmarkTraceBatch(b *testing.B) {
	rcv, err := tracingtest.Start(context.Background(), tracingtest.Options{CountOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rcv.Close()
	// Room for every span: the loop ends them faster than the export
	// sends them (workers' BenchmarkTraceSpans).
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1000000")
	const size = 100
	events := make([]consumer.Event, size)
	results := make([]Result, size)
	for i := range events {
		events[i].SpanContext = trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{byte(i + 1), 1}, SpanID: trace.SpanID{byte(i + 1), 2}, TraceFlags: trace.FlagsSampled})
		results[i] = Result{Outcome: OutcomeProcessed}
	}
	for _, ratio := range []float64{1, 0.1, 0} {
		b.Run("ratio="+formatRatio(ratio), func(b *testing.B) {
			tp, err := tracing.New(context.Background(), tracing.Config{Endpoint: rcv.HTTPEndpoint, SamplerRatio: &ratio,
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			tr := newTracer(ProcessorConfig{Tracer: tp.Tracer()})
			start, sent := procstat.Self(), rcv.Count()
			for b.Loop() {
				ctx, batch := tr.startBatch(context.Background(), events)
				_, insert := tr.start(ctx, SpanInsert, insertAttrs...)
				endInsert(insert, size, nil)
				_, handler := tr.startHandler(ctx, "stock.reserve", size)
				endSpan(handler, nil)
				endSpan(tr.startCommit(ctx), nil)
				tr.endBatch(batch, size, results, nil)
			}
			_ = tp.Shutdown(context.Background())
			b.ReportMetric(float64(procstat.Self()-start)/float64(b.N*size), "cpu-ns/event")
			b.ReportMetric(float64(rcv.Count()-sent)/float64(b.N), "exported/batch") // 4 spans each when sampled
		})
	}
}

func formatRatio(r float64) string {
	switch r {
	case 1:
		return "1"
	case 0.1:
		return "0.1"
	}
	return "0"
}
