package workers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/procstat"
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
	rcv := startBenchReceiver(b)
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
			bw := newBenchWorker(tr)
			start, sent := procstat.Self(), rcv.Count()
			b.ResetTimer()
			for b.Loop() {
				bw.batch(0)
			}
			if tp != nil {
				_ = tp.Shutdown(context.Background())
			}
			reportTraceCost(b, rcv, start, sent, b.N*benchBatchSize)
		})
	}
}

// startBenchReceiver starts a counting OTLP receiver for b, and gives the
// export queue room for every span: the loop ends spans faster than the
// export sends them, and at the default queue (2048) about half of them
// were dropped uncounted (exported/msg 0.43-0.51 at ratio 1), their export
// missing from cpu-ns/msg. A daemon's deliveries come slower than that: the
// drains of the bench export every span.
func startBenchReceiver(b *testing.B) *tracingtest.Receiver {
	b.Helper()
	b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1000000")
	rcv, err := tracingtest.Start(context.Background(), tracingtest.Options{CountOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rcv.Close)
	return rcv
}

// benchBatchSize is the deliveries of a benchmark's batch.
const benchBatchSize = 100

// benchWorker is a worker of the sample stock pool traced by tr (nil: off),
// with a batch of its own.
type benchWorker struct {
	w      *worker
	msgs   []message
	events []consumer.Event
	ids    []uuid.UUID
}

func newBenchWorker(tr trace.Tracer) *benchWorker {
	p := &Pool{cfg: Config{Name: "stock-events", Service: "stock", Topology: broker.Topology{Queue: "stock.events",
		RetryDelays: []time.Duration{time.Second}}}}
	bw := &benchWorker{w: &worker{pool: p, tr: newTracer(p.cfg, tr)}, msgs: make([]message, benchBatchSize),
		events: make([]consumer.Event, benchBatchSize), ids: make([]uuid.UUID, benchBatchSize)}
	for i := range bw.ids {
		bw.ids[i] = uuid.Must(uuid.NewV7())
	}
	return bw
}

// batch traces one batch as a worker does: its spans started, pause (its
// transaction), every delivery acked as processed, its spans ended.
func (bw *benchWorker) batch(pause time.Duration) {
	for i := range bw.msgs {
		bw.msgs[i] = message{d: amqp.Delivery{RoutingKey: "order.order.placed.v1"},
			ev: consumer.Event{ID: bw.ids[i], Delivery: consumer.Delivery{RoutingKey: "order.order.placed.v1"}}}
	}
	bw.w.startSpans(bw.msgs, bw.events, time.Now())
	if pause > 0 {
		time.Sleep(pause) //nolint:forbidigo // the scenario: the batch's transaction takes this long
	}
	for i := range bw.msgs {
		bw.msgs[i].s = settlement{kind: settleAck, outcome: metrics.OutcomeProcessed}
	}
	bw.w.stampCopies(context.Background(), bw.msgs)
	bw.w.endSpans(bw.msgs, nil, true)
}

// reportTraceCost reports the process's CPU per delivery since start, and
// the spans the receiver got per delivery since sent (below the ratio,
// spans were dropped, and their export's cost is not in cpu-ns/msg).
func reportTraceCost(b *testing.B, rcv *tracingtest.Receiver, start time.Duration, sent, deliveries int) {
	b.ReportMetric(float64(procstat.Self()-start)/float64(deliveries), "cpu-ns/msg")
	b.ReportMetric(float64(rcv.Count()-sent)/float64(deliveries), "exported/msg")
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

// BenchmarkTraceSpansPaced is BenchmarkTraceSpans as a daemon's deliveries
// come: four workers, each starting a batch's spans, waiting a
// millisecond (its transaction) and ending them, so that the export's
// goroutine empties the queue between batches and is woken by the next
// ones, where BenchmarkTraceSpans keeps it busy. Sampler ratio 1, every
// span exported; cpu-ns/msg is the process's CPU per delivery.
func BenchmarkTraceSpansPaced(b *testing.B) {
	rcv := startBenchReceiver(b)
	tp := newBenchProvider(b, rcv, 1)
	const workers = 4
	batches := make(chan struct{}, workers)
	start, sent := procstat.Self(), rcv.Count()
	var done sync.WaitGroup
	for range workers {
		bw := newBenchWorker(tp.Tracer())
		done.Go(func() {
			for range batches {
				bw.batch(time.Millisecond)
			}
		})
	}
	n := 0
	for b.Loop() {
		batches <- struct{}{}
		n++
	}
	close(batches)
	done.Wait()
	_ = tp.Shutdown(context.Background())
	reportTraceCost(b, rcv, start, sent, n*benchBatchSize)
}
