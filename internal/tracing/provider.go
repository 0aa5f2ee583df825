package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/platformd/platformd/internal/config"
)

// Defaults.
const (
	// ServiceNameDefault is the resource's service.name unless
	// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
	// otherwise.
	ServiceNameDefault = "platformd"
	// ShutdownTimeoutDefault bounds Stop's flush of the spans not yet
	// exported: a collector that is down must not hold the daemon's exit.
	ShutdownTimeoutDefault = 5 * time.Second
	// LinkCountLimitDefault is the most links a span keeps unless
	// OTEL_SPAN_LINK_COUNT_LIMIT says otherwise: the largest batch, whose
	// span links each of its deliveries.
	LinkCountLimitDefault = config.BatchSizeMax
	// ScopeName is the instrumentation scope of platformd's spans.
	ScopeName = "github.com/platformd/platformd"
)

// errorLogEvery bounds how often the SDK's errors (an unreachable collector
// fails every export) are logged.
const errorLogEvery = time.Minute

// Config is the config file's tracing block. The zero Config turns tracing
// on only when the environment names an endpoint.
type Config struct {
	// Endpoint is the OTLP endpoint, a base URL as OTEL_EXPORTER_OTLP_ENDPOINT
	// is (http://host:port; https for TLS); "" leaves tracing off unless the
	// environment names one. The environment's endpoint wins.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP ("": ProtocolDefault); the
	// environment's OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL wins.
	Protocol string
	// SamplerRatio is the share of traces sampled where a delivery carries
	// no sampling decision of its producer (a parent-based trace-id ratio
	// sampler); nil means 1. OTEL_TRACES_SAMPLER wins.
	SamplerRatio *float64
	// Logger receives the set-up line and the SDK's errors (rate-limited);
	// nil means slog.Default().
	Logger *slog.Logger
}

// Provider is platformd's tracer provider: an OpenTelemetry SDK provider
// with a batch span processor and an OTLP exporter when tracing is on,
// nothing at all when off. Its methods are safe for concurrent use.
type Provider struct {
	sdk    *sdktrace.TracerProvider // nil when off
	tracer trace.Tracer             // nil when off
	log    *slog.Logger
	once   sync.Once
}

// newExporter creates the OTLP exporter for the protocol, the OTel
// exporters' own (a variable so that a test can see whether New creates
// one at all).
var newExporter = func(ctx context.Context, s settings) (sdktrace.SpanExporter, error) {
	if s.protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if s.endpointURL != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(s.endpointURL))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if s.endpointURL != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(s.endpointURL))
	}
	return otlptracehttp.New(ctx, opts...)
}

// New returns the Provider that cfg and the environment describe. Off (no
// endpoint named, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none), it
// creates no exporter and starts nothing. On, it also routes the SDK's
// errors to cfg.Logger (otel.SetErrorHandler, process-wide). A bad
// protocol, endpoint or exporter name is an error.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s, err := resolve(cfg, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if !s.on {
		log.InfoContext(ctx, "tracing: off", slog.String("reason", s.why))
		return &Provider{log: log}, nil
	}
	exp, err := newExporter(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP %s exporter: %w", s.protocol, err)
	}
	otel.SetErrorHandler(&errorLog{log: log})
	bsp := sdktrace.NewBatchSpanProcessor(exp)
	// The SDK's limits, from the environment or its defaults, but for the
	// link limit: a batch's span links every delivery it ran (docs/tracing.md),
	// and the SDK's default of 128 links would keep the last 128 of a
	// larger batch and drop the others' links silently.
	limits := sdktrace.NewSpanLimits()
	if !s.linkLimitSet {
		limits.LinkCountLimit = LinkCountLimitDefault
	}
	// The sampler in force is built from the environment or the config
	// (resolve): the environment's standard samplers, or a parent-based
	// ratio of the config's.
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bsp), sdktrace.WithResource(newResource(ctx, log)),
		sdktrace.WithRawSpanLimits(limits), sdktrace.WithSampler(s.sampler))
	p := &Provider{sdk: sdk, log: log, tracer: sdk.Tracer(ScopeName, trace.WithInstrumentationVersion(Version()))}
	log.InfoContext(ctx, "tracing: exporting spans over OTLP", slog.String("endpoint", s.endpoint), slog.String("protocol", s.protocol),
		slog.String("sampler", s.sampler.Description()))
	return p, nil
}

// newResource describes this process: service.name (ServiceNameDefault),
// service.version (Version), the host, the SDK, and whatever
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say, which win.
func newResource(ctx context.Context, log *slog.Logger) *resource.Resource {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceNameDefault), semconv.ServiceVersion(Version())),
		resource.WithHost(), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		// A partial resource (a detector failed, a bad
		// OTEL_RESOURCE_ATTRIBUTES entry) still names the service.
		log.WarnContext(ctx, "tracing: resource incomplete", slog.Any("error", err))
	}
	if res == nil {
		res = resource.Default()
	}
	return res
}

// Version is the module version of the running binary (from its build
// information): a tag for a released build, else the VCS revision, else
// "(devel)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			return s.Value
		}
	}
	return "(devel)"
}

// Enabled reports whether spans are exported.
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// Tracer returns platformd's tracer, the SDK's, or nil when tracing is off:
// the hot path checks for nil and then does no tracing work at all.
func (p *Provider) Tracer() trace.Tracer {
	if !p.Enabled() {
		return nil
	}
	return p.tracer
}

// TracerProvider returns the SDK provider, or a no-op provider when tracing
// is off.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if !p.Enabled() {
		return noop.NewTracerProvider()
	}
	return p.sdk
}

// ForceFlush exports every span ended so far.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Shutdown flushes the spans not yet exported and stops the exporter,
// within ctx. Spans ended afterwards are dropped. Only the first call does
// anything; later ones return nil.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	var err error
	p.once.Do(func() { err = p.sdk.Shutdown(ctx) })
	if err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// Stop is Shutdown bounded by ShutdownTimeoutDefault, for the daemon's stop
// order (internal/startstop's Stopper); it logs a failed flush.
func (p *Provider) Stop() {
	if !p.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeoutDefault)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		p.log.Warn("tracing: flush at shutdown failed; spans lost", slog.Any("error", err))
	}
}

// errorLog is the SDK's error handler: a warning at most once per
// errorLogEvery, with the count of the errors left out since.
type errorLog struct {
	log        *slog.Logger
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Handle logs err unless another error was logged less than errorLogEvery
// ago.
func (e *errorLog) Handle(err error) {
	e.mu.Lock()
	now := time.Now()
	if !e.last.IsZero() && now.Sub(e.last) < errorLogEvery {
		e.suppressed++
		e.mu.Unlock()
		return
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	e.mu.Unlock()
	e.log.Warn("tracing: OpenTelemetry SDK error (spans may be lost)", slog.Any("error", err), slog.Int("suppressed", n))
}
