package config

import (
	"net/url"
)

// Tracing protocols (tracing.protocol).
const (
	// TracingProtocolGRPC is OTLP over gRPC.
	TracingProtocolGRPC = "grpc"
	// TracingProtocolHTTP is OTLP over HTTP with protobuf bodies.
	TracingProtocolHTTP = "http/protobuf"
)

// Tracing defaults.
const (
	// TracingProtocolDefault is the default tracing.protocol, the
	// OpenTelemetry specification's.
	TracingProtocolDefault = TracingProtocolHTTP
	// TracingSamplerRatioDefault is the default tracing.sampler_ratio:
	// every trace that starts in platformd is sampled.
	TracingSamplerRatioDefault = 1.0
)

// TracingConfig configures OpenTelemetry traces (docs/tracing.md, "Tracing
// (OpenTelemetry)"). Tracing is off unless an endpoint is named here or in
// the environment; the standard OTEL_* variables win over these keys.
type TracingConfig struct {
	// Endpoint is the OTLP endpoint, a base URL as OTEL_EXPORTER_OTLP_ENDPOINT
	// is: http://host:port (https for TLS); "" (default) leaves tracing off
	// unless OTEL_EXPORTER_OTLP_ENDPOINT or _TRACES_ENDPOINT is set.
	Endpoint string `yaml:"endpoint"`
	// Protocol is TracingProtocolHTTP (default) or TracingProtocolGRPC.
	Protocol string `yaml:"protocol"`
	// SamplerRatio is the share of traces sampled where a delivery carries
	// no sampling decision of its producer, 0..1 (default 1).
	SamplerRatio float64 `yaml:"sampler_ratio"`
}

// applyTracingDefaults fills the tracing keys isSet reports absent.
func applyTracingDefaults(t *TracingConfig, isSet func(path string) bool) {
	if !isSet("tracing.protocol") {
		t.Protocol = TracingProtocolDefault
	}
	if !isSet("tracing.sampler_ratio") {
		t.SamplerRatio = TracingSamplerRatioDefault
	}
}

func (v *validator) tracing() {
	t := v.c.Tracing
	if t.Endpoint != "" {
		if msg := CheckOTLPEndpoint(t.Endpoint); msg != "" {
			v.ps.add("tracing.endpoint", "%s (got %q)", msg, RedactURL(t.Endpoint))
		}
	}
	oneOf(v.ps, "tracing.protocol", t.Protocol, TracingProtocolHTTP, TracingProtocolGRPC)
	if t.SamplerRatio < 0 || t.SamplerRatio > 1 {
		v.ps.add("tracing.sampler_ratio", "must be between 0 and 1 (got %v)", t.SamplerRatio)
	}
}

// CheckOTLPEndpoint returns what is wrong with an OTLP endpoint, "" when it
// is an http:// or https:// URL with a host (the form
// OTEL_EXPORTER_OTLP_ENDPOINT takes; http means no TLS). The tracing
// package checks the environment's with it too.
func CheckOTLPEndpoint(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318"
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "must not carry a query, a fragment or user information"
	}
	return ""
}
