package tracing

import (
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/platformd/platformd/internal/config"
)

// OTLP protocols.
const (
	// ProtocolGRPC is OTLP over gRPC (collectors listen on 4317).
	ProtocolGRPC = config.TracingProtocolGRPC
	// ProtocolHTTP is OTLP over HTTP with protobuf bodies (collectors listen
	// on 4318, path /v1/traces).
	ProtocolHTTP = config.TracingProtocolHTTP
	// ProtocolDefault is the protocol when neither the environment nor the
	// config names one: the specification's default.
	ProtocolDefault = config.TracingProtocolDefault
)

// The standard environment variables this package reads itself; the SDK and
// the exporters read the others.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envSampler        = "OTEL_TRACES_SAMPLER"
	envSamplerArg     = "OTEL_TRACES_SAMPLER_ARG"
	envLinkCountLimit = "OTEL_SPAN_LINK_COUNT_LIMIT"
)

// tracesPath is the OTLP/HTTP path of traces, appended to a base endpoint.
const tracesPath = "/v1/traces"

// settings is what New does, resolved from the environment and the config.
type settings struct {
	// on is false when no endpoint is named, or the environment turns the
	// SDK or its trace exporter off.
	on bool
	// why says why tracing is off (for the log).
	why string
	// protocol is ProtocolGRPC or ProtocolHTTP.
	protocol string
	// endpointURL is the config's endpoint as the exporter's full URL; empty
	// when the environment names the endpoint (the exporter reads it).
	endpointURL string
	// endpoint is where spans go, for the log.
	endpoint string
	// sampler is the sampler in force: the environment's, else
	// parent-based at ratio.
	sampler sdktrace.Sampler
	// linkLimitSet is true when OTEL_SPAN_LINK_COUNT_LIMIT is set: the
	// SDK's link limit is then the environment's, not platformd's.
	linkLimitSet bool
}

// resolve decides what New does from cfg and the environment (lookup).
func resolve(cfg Config, lookup func(string) (string, bool)) (settings, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	if v := get(envSDKDisabled); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return settings{}, fmt.Errorf("tracing: %s=%q: must be true or false", envSDKDisabled, v)
		}
		if disabled {
			return settings{why: envSDKDisabled + " is true"}, nil
		}
	}
	if v := get(envTracesExporter); v != "" {
		switch strings.ToLower(v) {
		case "otlp":
		case "none":
			return settings{why: envTracesExporter + " is none"}, nil
		default:
			return settings{}, fmt.Errorf("tracing: %s=%q: platformd exports otlp (or none)", envTracesExporter, v)
		}
	}
	ratio := 1.0
	if cfg.SamplerRatio != nil {
		ratio = *cfg.SamplerRatio
	}
	if ratio < 0 || ratio > 1 {
		return settings{}, fmt.Errorf("tracing: sampler ratio %v: must be within 0..1", ratio)
	}
	s := settings{on: true, protocol: ProtocolDefault}
	for _, p := range []string{get(envTracesProtocol), get(envProtocol), cfg.Protocol} {
		if p != "" {
			s.protocol = p
			break
		}
	}
	if s.protocol != ProtocolGRPC && s.protocol != ProtocolHTTP {
		return settings{}, fmt.Errorf("tracing: OTLP protocol %q: must be %s or %s", s.protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if err := s.resolveEndpoint(cfg, get); err != nil {
		return settings{}, err
	}
	if !s.on {
		return s, nil
	}
	// Read only when tracing is on: a variable of a tracing that is off
	// stops nothing.
	var err error
	if s.sampler, _, err = samplerOf(get(envSampler), get(envSamplerArg), ratio); err != nil {
		return settings{}, err
	}
	_, s.linkLimitSet = lookup(envLinkCountLimit)
	return s, nil
}

// resolveEndpoint sets where spans go: the environment's endpoint, else
// the config's (a base URL, whose traces path it appends for HTTP); with
// neither, tracing is off.
func (s *settings) resolveEndpoint(cfg Config, get func(string) string) error {
	for _, k := range []string{envTracesEndpoint, envEndpoint} {
		if v := get(k); v != "" {
			if msg := config.CheckOTLPEndpoint(v); msg != "" {
				return fmt.Errorf("tracing: %s=%q: %s", k, v, msg)
			}
			s.endpoint = v
			return nil
		}
	}
	if cfg.Endpoint == "" {
		*s = settings{why: "no OTLP endpoint is set"}
		return nil
	}
	if msg := config.CheckOTLPEndpoint(cfg.Endpoint); msg != "" {
		return fmt.Errorf("tracing: endpoint %q: %s", cfg.Endpoint, msg)
	}
	s.endpoint, s.endpointURL = cfg.Endpoint, cfg.Endpoint
	if s.protocol == ProtocolHTTP {
		// A base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: the signal's path
		// is appended to it.
		u, _ := url.Parse(cfg.Endpoint)
		u.Path = path.Join("/", u.Path, tracesPath)
		s.endpointURL = u.String()
		s.endpoint = s.endpointURL
	}
	return nil
}

// samplerOf is the sampler OTEL_TRACES_SAMPLER (name) and its argument
// name, as the SDK reads them, or parent-based at ratio when name is
// empty, and whether it drops any span without a parent. platformd builds
// it itself, and gives it to the SDK, so that a name or argument the SDK
// would ignore (falling back to its default with a logged error) stops the
// start instead.
func samplerOf(name, arg string, ratio float64) (sdktrace.Sampler, bool, error) {
	lower := strings.ToLower(name)
	if lower == "" {
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), ratio < 1, nil
	}
	base, parentBased := strings.CutPrefix(lower, "parentbased_")
	var root sdktrace.Sampler
	var drops bool
	switch base {
	case "always_on":
		root = sdktrace.AlwaysSample()
	case "always_off":
		root, drops = sdktrace.NeverSample(), true
	case "traceidratio":
		r := 1.0
		if arg != "" {
			v, err := strconv.ParseFloat(arg, 64)
			if err != nil || v < 0 || v > 1 {
				return nil, false, fmt.Errorf("tracing: %s=%q: must be a ratio within 0..1", envSamplerArg, arg)
			}
			r = v
		}
		root, drops = sdktrace.TraceIDRatioBased(r), r < 1
	default:
		return nil, false, fmt.Errorf("tracing: %s=%q: must be always_on, always_off, traceidratio or parentbased_ of one of them", envSampler, name)
	}
	if parentBased {
		return sdktrace.ParentBased(root), drops, nil
	}
	return root, drops, nil
}
