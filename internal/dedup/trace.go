package dedup

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
)

// Span names of a batch's trace. A batch is one trace of its own, its
// root linked to the span of every delivery it ran (the deliveries' spans
// belong to their producers' traces): the insert, each handler and each
// commit are its children, so a batch costs a handful of spans whatever
// its size.
const (
	SpanBatch   = "dedup batch"
	SpanInsert  = "dedup insert"
	SpanHandler = "handle " // + the handler's name
	SpanCommit  = "commit"
	// SpanReplay is the second transaction of a batch whose handler
	// failed: its events one by one, each in a savepoint.
	SpanReplay = "dedup replay"
)

// Attributes of the batch's spans (platformd's own namespace).
const (
	attrBatchSize  = attribute.Key("platformd.batch.size")
	attrProcessed  = attribute.Key("platformd.batch.processed")
	attrDuplicates = attribute.Key("platformd.batch.duplicates")
	attrFailed     = attribute.Key("platformd.batch.failed")
	attrInserted   = attribute.Key("platformd.dedup.inserted")
	attrHandler    = attribute.Key("platformd.handler")
	attrEvents     = attribute.Key("platformd.handler.events")
)

// tracer is a Processor's tracing: nil tracer when tracing is off, and then
// every method returns at once, allocating nothing.
type tracer struct {
	t     trace.Tracer
	attrs []attribute.KeyValue // set on every batch span
}

func newTracer(cfg ProcessorConfig) tracer {
	if cfg.Tracer == nil {
		return tracer{}
	}
	return tracer{t: cfg.Tracer, attrs: append([]attribute.KeyValue{semconv.DBSystemNamePostgreSQL}, cfg.TraceAttributes...)}
}

// startBatch starts the batch span, linked to the delivery span of every
// event (consumer.Event.SpanContext), and returns ctx carrying it. The
// links are added once the span is known to be sampled: a batch the
// sampler drops costs no link.
func (tr tracer) startBatch(ctx context.Context, events []consumer.Event) (context.Context, trace.Span) {
	if tr.t == nil {
		return ctx, nil
	}
	ctx, span := tr.t.Start(ctx, SpanBatch)
	if !span.IsRecording() {
		return ctx, span
	}
	for i := range events {
		if sc := events[i].SpanContext; sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return ctx, span
}

// endBatch ends the batch span of size events with their outcomes; err
// (the batch's outcome is unknown) is its error.
func (tr tracer) endBatch(span trace.Span, size int, results []Result, err error) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		var processed, dups, failed int
		for _, r := range results {
			switch r.Outcome {
			case OutcomeProcessed:
				processed++
			case OutcomeDuplicate:
				dups++
			case OutcomeFailed:
				failed++
			}
		}
		attrs := make([]attribute.KeyValue, 0, len(tr.attrs)+4)
		attrs = append(attrs, tr.attrs...)
		span.SetAttributes(append(attrs, attrBatchSize.Int(size), attrProcessed.Int(processed),
			attrDuplicates.Int(dups), attrFailed.Int(failed))...)
	}
	endSpan(span, err)
}

// start starts a child of the span in ctx (nil when tracing is off).
func (tr tracer) start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if tr.t == nil {
		return ctx, nil
	}
	return tr.t.Start(ctx, name, trace.WithAttributes(attrs...))
}

// startHandler starts the span of one handler's calls in a batch.
func (tr tracer) startHandler(ctx context.Context, name string, events int) (context.Context, trace.Span) {
	if tr.t == nil {
		return ctx, nil
	}
	return tr.t.Start(ctx, SpanHandler+name, trace.WithAttributes(attrHandler.String(name), attrEvents.Int(events)))
}

// startCommit starts the commit span (its end is the commit's answer).
func (tr tracer) startCommit(ctx context.Context) trace.Span {
	if tr.t == nil {
		return nil
	}
	_, span := tr.t.Start(ctx, SpanCommit, trace.WithAttributes(semconv.DBOperationName("COMMIT")))
	return span
}

// endInsert ends the insert span with how many ids were new.
func endInsert(span trace.Span, inserted int, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attrInserted.Int(inserted))
	endSpan(span, err)
}

// endSpan ends span (nil: tracing off), with status Error when err is set.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// insertAttrs are the insert span's attributes.
var insertAttrs = []attribute.KeyValue{semconv.DBOperationName("INSERT"), semconv.DBCollectionName("processed_event")}
