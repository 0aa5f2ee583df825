package tracing

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cleanEnv unsets every variable that could turn tracing on or change it,
// so that a test sees only what it sets.
func cleanEnv(t *testing.T) {
	for _, k := range []string{envSDKDisabled, envTracesExporter, envEndpoint, envTracesEndpoint, envProtocol, envTracesProtocol,
		envSampler, "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_BSP_SCHEDULE_DELAY", envLinkCountLimit, envSamplerArg} {
		t.Setenv(k, "")
	}
}

// countExporters counts the exporters New creates.
func countExporters(t *testing.T) *atomic.Int32 {
	var n atomic.Int32
	orig := newExporter
	newExporter = func(ctx context.Context, s settings) (sdktrace.SpanExporter, error) {
		n.Add(1)
		return orig(ctx, s)
	}
	t.Cleanup(func() { newExporter = orig })
	return &n
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ratio(r float64) *float64 { return &r }

// Without an endpoint nothing is created, whatever else the environment
// says, and the instrumentation gets a nil tracer (its cue to do nothing).
func TestOffWithoutEndpoint(t *testing.T) {
	cleanEnv(t)
	made := countExporters(t)
	rcv := tracingtest.New(t)
	t.Setenv(envProtocol, ProtocolGRPC)
	t.Setenv("OTEL_SERVICE_NAME", "stock-consumer")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")

	p, err := New(context.Background(), Config{Protocol: ProtocolHTTP, SamplerRatio: ratio(1), Logger: quiet()})
	require.NoError(t, err)
	require.False(t, p.Enabled())
	require.Nil(t, p.Tracer())
	_, span := p.TracerProvider().Tracer("x").Start(context.Background(), "nothing")
	require.False(t, span.IsRecording())
	span.End()
	require.NoError(t, p.ForceFlush(context.Background()))
	p.Stop()
	require.Zero(t, made.Load(), "an exporter was created with no endpoint set")
	require.Zero(t, rcv.Requests())
}

// OTEL_SDK_DISABLED and OTEL_TRACES_EXPORTER=none turn tracing off even with
// an endpoint.
func TestOffByEnvironment(t *testing.T) {
	for _, kv := range [][2]string{{envSDKDisabled, "true"}, {envTracesExporter, "none"}} {
		t.Run(kv[0], func(t *testing.T) {
			cleanEnv(t)
			made := countExporters(t)
			t.Setenv(kv[0], kv[1])
			t.Setenv(envEndpoint, "http://127.0.0.1:4318")
			p, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:4318", Logger: quiet()})
			require.NoError(t, err)
			require.False(t, p.Enabled())
			require.Zero(t, made.Load())
		})
	}
}

// Bad settings stop the start with what is wrong.
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		cfg  Config
		want string
	}{
		{"protocol", nil, Config{Endpoint: "http://127.0.0.1:4318", Protocol: "http/json"}, `OTLP protocol "http/json"`},
		{"env protocol", map[string]string{envTracesProtocol: "udp"}, Config{Endpoint: "http://127.0.0.1:4318"}, `OTLP protocol "udp"`},
		{"endpoint", nil, Config{Endpoint: "127.0.0.1:4317"}, "must be an http:// or https:// URL"},
		{"env endpoint", map[string]string{envEndpoint: "collector:4317"}, Config{}, "OTEL_EXPORTER_OTLP_ENDPOINT=\"collector:4317\""},
		{"exporter", map[string]string{envTracesExporter: "zipkin"}, Config{Endpoint: "http://127.0.0.1:4318"}, "platformd exports otlp"},
		{"disabled", map[string]string{envSDKDisabled: "maybe"}, Config{}, "must be true or false"},
		{"ratio", nil, Config{Endpoint: "http://127.0.0.1:4318", SamplerRatio: ratio(1.5)}, "within 0..1"},
		// The SDK would log these and fall back to its default sampler.
		{"env sampler", map[string]string{envSampler: "jaeger_remote"}, Config{Endpoint: "http://127.0.0.1:4318"}, `OTEL_TRACES_SAMPLER="jaeger_remote"`},
		{"env sampler arg", map[string]string{envSampler: "parentbased_traceidratio", envSamplerArg: "1.5"}, Config{Endpoint: "http://127.0.0.1:4318"},
			`OTEL_TRACES_SAMPLER_ARG="1.5"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			tc.cfg.Logger = quiet()
			_, err := New(context.Background(), tc.cfg)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// exportOne starts and ends one root span and shuts p down, which flushes.
func exportOne(t *testing.T, p *Provider, name string) {
	t.Helper()
	require.True(t, p.Enabled())
	_, span := p.Tracer().Start(context.Background(), name)
	span.End()
	p.Stop()
}

// The config's endpoint works over both protocols; the resource names the
// service, its version and the host.
func TestExportsOverBothProtocols(t *testing.T) {
	for _, proto := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(proto, func(t *testing.T) {
			cleanEnv(t)
			rcv := tracingtest.New(t)
			endpoint := rcv.HTTPEndpoint
			if proto == ProtocolGRPC {
				endpoint = rcv.GRPCEndpoint
			}
			p, err := New(context.Background(), Config{Endpoint: endpoint, Protocol: proto, Logger: quiet()})
			require.NoError(t, err)
			exportOne(t, p, "hello "+proto)
			spans := rcv.Spans()
			require.Len(t, spans, 1)
			require.Equal(t, "hello "+proto, spans[0].GetName())
			require.Equal(t, ServiceNameDefault, spans[0].Resource["service.name"])
			require.Equal(t, Version(), spans[0].Resource["service.version"])
			require.NotEmpty(t, spans[0].Resource["host.name"])
			require.Equal(t, ScopeName, spans[0].Scope)
		})
	}
}

// The environment wins over the config: its endpoint, protocol, service
// name and sampler replace the config's.
func TestEnvironmentWinsOverConfig(t *testing.T) {
	cleanEnv(t)
	rcv := tracingtest.New(t)
	t.Setenv(envEndpoint, rcv.GRPCEndpoint)
	t.Setenv(envProtocol, ProtocolGRPC)
	t.Setenv("OTEL_SERVICE_NAME", "stock-consumer")
	t.Setenv(envSampler, "always_on")
	// The config points at a closed port over the other protocol and
	// samples nothing: were it used, no span would arrive.
	p, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:1", Protocol: ProtocolHTTP, SamplerRatio: ratio(0), Logger: quiet()})
	require.NoError(t, err)
	exportOne(t, p, "from env")
	spans := rcv.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "stock-consumer", spans[0].Resource["service.name"])
}

// The config's sampler ratio applies when the environment names no
// sampler: ratio 0 samples no root span.
func TestConfigSamplerRatio(t *testing.T) {
	cleanEnv(t)
	rcv := tracingtest.New(t)
	p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, SamplerRatio: ratio(0), Logger: quiet()})
	require.NoError(t, err)
	_, span := p.Tracer().Start(context.Background(), "dropped")
	require.False(t, span.IsRecording())
	span.End()
	exportOne(t, p, "also dropped")
	require.Zero(t, rcv.Count())
}

// A span keeps up to the largest batch's links, where the SDK's default
// would keep 128: a batch span links every delivery it ran. Unless
// OTEL_SPAN_LINK_COUNT_LIMIT says otherwise.
func TestBatchSpanKeepsEveryLink(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want int
	}{{"", 1000}, {"5", 5}} {
		t.Run("limit="+tc.env, func(t *testing.T) {
			cleanEnv(t)
			if tc.env != "" {
				t.Setenv(envLinkCountLimit, tc.env)
			} else {
				require.NoError(t, os.Unsetenv(envLinkCountLimit))
			}
			rcv := tracingtest.New(t)
			p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, Logger: quiet()})
			require.NoError(t, err)
			_, span := p.Tracer().Start(context.Background(), "dedup batch")
			for i := range 1000 {
				span.AddLink(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: trace.TraceID{byte(i), byte(i >> 8), 1}, SpanID: trace.SpanID{byte(i), byte(i >> 8), 2}})})
			}
			span.End()
			p.Stop()
			spans := rcv.Spans()
			require.Len(t, spans, 1)
			links := len(spans[0].GetLinks()) // not require.Len: it would print a thousand links
			require.Equal(t, tc.want, links)
			require.EqualValues(t, 1000-tc.want, spans[0].GetDroppedLinksCount())
		})
	}
}

// Spans wait for OTEL_BSP_SCHEDULE_DELAY, and Stop flushes them: the last
// spans of a daemon that stops are not lost.
func TestStopFlushes(t *testing.T) {
	cleanEnv(t)
	rcv := tracingtest.New(t)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "3600000") // an hour
	p, err := New(context.Background(), Config{Endpoint: rcv.HTTPEndpoint, Logger: quiet()})
	require.NoError(t, err)
	for range 3 {
		_, span := p.Tracer().Start(context.Background(), "pending")
		span.End()
	}
	require.Zero(t, rcv.Requests(), "exported before the schedule delay")
	start := time.Now()
	p.Stop()
	require.Less(t, time.Since(start), ShutdownTimeoutDefault)
	require.Equal(t, 3, rcv.Count())
	p.Stop() // twice is safe
	require.NoError(t, p.Shutdown(context.Background()))
}

// A collector that is down costs the stop at most ShutdownTimeoutDefault.
func TestStopBoundedWhenCollectorDown(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the shutdown timeout")
	}
	cleanEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
	p, err := New(context.Background(), Config{Endpoint: "http://127.0.0.1:1", Logger: quiet()})
	require.NoError(t, err)
	_, span := p.Tracer().Start(context.Background(), "lost")
	span.End()
	start := time.Now()
	p.Stop()
	require.Less(t, time.Since(start), ShutdownTimeoutDefault+2*time.Second)
}

// The environment's sampler is the SDK's, built by platformd: each
// standard name with its argument, the config's ratio when
// it names none. A bad sampler variable of a tracing that is off stops
// nothing.
func TestSamplerOf(t *testing.T) {
	for _, tc := range []struct {
		name, arg, want string
		drops           bool
	}{
		{"", "", "ParentBased{root:TraceIDRatioBased{0.25}", true},
		{"always_on", "", "AlwaysOnSampler", false},
		{"ALWAYS_OFF", "", "AlwaysOffSampler", true},
		{"traceidratio", "0.5", "TraceIDRatioBased{0.5}", true},
		{"traceidratio", "", "TraceIDRatioBased{1}", false},
		{"parentbased_traceidratio", "0.1", "ParentBased{root:TraceIDRatioBased{0.1}", true},
		{"parentbased_traceidratio", "1", "ParentBased{root:TraceIDRatioBased{1}", false},
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler", false},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler", true},
	} {
		s, drops, err := samplerOf(tc.name, tc.arg, 0.25)
		require.NoError(t, err)
		require.Contains(t, s.Description(), tc.want, "%s %s", tc.name, tc.arg)
		require.Equal(t, tc.drops, drops, "%s %s", tc.name, tc.arg)
	}
	cleanEnv(t)
	t.Setenv(envSampler, "nonsense")
	p, err := New(context.Background(), Config{Logger: quiet()})
	require.NoError(t, err)
	require.False(t, p.Enabled())
}
