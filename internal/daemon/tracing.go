package daemon

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/internal/tracing"
	"github.com/platformd/platformd/internal/workers"
)

// startTracing sets up the tracer provider from the config's tracing block
// and the OTEL_* environment (which wins). On, it also becomes the
// process's global provider and propagator, so that handler code tracing
// through otel's globals joins the same pipeline and the deliveries'
// traces. Off, nothing is set and the pools get no tracer.
func (d *Daemon) startTracing(ctx context.Context) error {
	t := d.cfg.Tracing
	ratio := t.SamplerRatio
	p, err := tracing.New(ctx, tracing.Config{Endpoint: t.Endpoint, Protocol: t.Protocol, SamplerRatio: &ratio, Logger: d.log})
	if err != nil {
		return err
	}
	d.tracing = p
	if p.Enabled() {
		otel.SetTracerProvider(p.TracerProvider())
		otel.SetTextMapPropagator(propagation.TraceContext{})
	}
	return nil
}

// tracer is the pools' tracer, nil when tracing is off.
func (d *Daemon) tracer() trace.Tracer { return d.tracing.Tracer() }

// batchTraceAttributes name a pool's service and pool on its batch spans,
// as its delivery spans do.
func batchTraceAttributes(service, pool string) []attribute.KeyValue {
	return []attribute.KeyValue{workers.AttrService.String(service), workers.AttrPool.String(pool)}
}
