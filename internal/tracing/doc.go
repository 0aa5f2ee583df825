// Package tracing sets up platformd's OpenTelemetry traces (docs/tracing.md): the SDK's tracer provider, with its batch
// span processor and the OTel exporters' OTLP exporter (otlptracegrpc or
// otlptracehttp, by OTEL_EXPORTER_OTLP_PROTOCOL or tracing.protocol),
// configured by the standard OTEL_* environment variables and, below
// them, by the config file's tracing block. platformd adds nothing to the
// SDK but its settings: the sampler it builds from the same variables,
// the span link limit and the resource.
//
// Tracing is off unless an OTLP endpoint is named (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or tracing.endpoint): then no exporter
// exists, Provider.Tracer returns nil and the hot path skips every tracing
// step, so that tracing off costs nothing.
//
// The environment wins over the config, as the OpenTelemetry specification
// says: an endpoint, protocol or sampler set in the environment replaces the
// config's. Everything else the SDK reads from the environment stands as it
// reads it (OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE,
// _CERTIFICATE, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME...). A span keeps
// up to the largest batch's links (LinkCountLimitDefault) unless
// OTEL_SPAN_LINK_COUNT_LIMIT says otherwise: a batch span links every
// delivery it ran.
//
// What the spans say is the business of the packages that make them
// (internal/workers, internal/dedup); this package only provides the
// tracer and exports them. Package tracingtest is an in-process OTLP
// receiver for their tests.
package tracing
