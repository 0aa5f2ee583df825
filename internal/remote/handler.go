package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/batchscope"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/sqlhandler"
)

// TimeoutDefault is a call's timeout when Config.Timeout is zero.
const TimeoutDefault = 5 * time.Second

// MaxAnswerBytes bounds an answer's body: a larger one is a bad answer.
const MaxAnswerBytes = 64 << 20

// Config configures a Handler.
type Config struct {
	// Service names the service the handler belongs to (the request's
	// "service", the metrics' label).
	Service string
	// Name is the handler's name.
	Name string
	// URL is the http or https URL POSTed to.
	URL string
	// Timeout bounds each call (default TimeoutDefault).
	Timeout time.Duration
	// Headers are sent with every call.
	Headers map[string]string
	// CAFile, CertFile and KeyFile are optional PEM files: the CAs trusted
	// for the handler's certificate, and a client certificate (mTLS).
	CAFile, CertFile, KeyFile string
	// Statements are the handler's named statements (sqlhandler.ParseRemote).
	Statements map[string]string
	// MaxConns is how many calls may be in flight at once (the
	// concurrency of the pools running the handler): the connections
	// kept alive (default 4).
	MaxConns int
	// MaxInFlight, when positive, bounds the calls at once in this daemon
	// across every pool running the handler (max_in_flight; limit.go).
	MaxInFlight int
	// Adaptive makes that bound follow the handler's answers (AIMD; at
	// most MaxInFlight when set): concurrency: adaptive.
	Adaptive bool
}

// Handler is a remote handler (docs/remote-handlers.md): a
// consumer.BatchHandler that POSTs a batch's new events to a process of
// the service's own and applies the effects it answers, in the batch's
// transaction. Its configuration never changes and its instruments change
// through atomics: it is safe for concurrent use.
type Handler struct {
	service, name string
	url           string
	timeout       time.Duration
	headers       http.Header
	client        *http.Client
	stmts         map[string]*sqlhandler.Statement
	// batches are the statements' batch forms (sqlhandler.RemoteBatch),
	// those that have one; each runs once Prepare found it may.
	batches map[string]*sqlhandler.RemoteBatch
	// names lists the statements' names, sorted (Prepare's order).
	names []string
	inst  atomic.Pointer[instruments]
	// lim bounds the calls at once; nil (no max_in_flight, not adaptive)
	// costs nothing.
	lim *callLimiter
	// testSignals are the handler's test signals (testsignals.go); the
	// limiter reports through them too.
	testSignals HandlerTestSignals
}

var _ consumer.BatchHandler = (*Handler)(nil)

// instruments are the handler's metrics and tracer, set by Instrument.
type instruments struct {
	up       prometheus.Gauge
	calls    map[string]prometheus.Counter
	duration prometheus.Observer
	tracer   trace.Tracer
}

// New returns the handler cfg describes. Its statements must parse
// (ParseRemote) and its TLS files load; the error says which does not.
func New(cfg Config) (*Handler, error) {
	h := &Handler{
		service: cfg.Service, name: cfg.Name, url: cfg.URL,
		timeout: cfg.Timeout, headers: http.Header{}, stmts: map[string]*sqlhandler.Statement{},
		batches: map[string]*sqlhandler.RemoteBatch{},
	}
	if h.timeout <= 0 {
		h.timeout = TimeoutDefault
	}
	h.lim = newCallLimiter(cfg.MaxInFlight, cfg.Adaptive)
	if h.lim != nil {
		h.lim.signals = &h.testSignals
	}
	for k, v := range cfg.Headers {
		h.headers.Set(k, v)
	}
	h.headers.Set("Content-Type", "application/json")
	if len(cfg.Statements) == 0 {
		return nil, fmt.Errorf("remote handler %s: no statement", cfg.Name)
	}
	for name, src := range cfg.Statements {
		s, err := sqlhandler.ParseRemote(src)
		if err != nil {
			return nil, &StatementError{Name: name, Err: err}
		}
		h.stmts[name] = s
		h.names = append(h.names, name)
		if rb, _ := s.RemoteBatch(); rb != nil {
			h.batches[name] = rb
		}
	}
	slices.Sort(h.names)
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("remote handler %s: %w", cfg.Name, err)
	}
	conns := cfg.MaxConns
	if conns <= 0 {
		conns = 4
	}
	// Every call of the pools may be in flight at once: keep that many
	// connections alive (the default keeps 2 per host, and every other
	// call would open a new one).
	tr := &http.Transport{
		Proxy:                 nil,
		MaxIdleConns:          conns,
		MaxIdleConnsPerHost:   conns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   h.timeout,
		ResponseHeaderTimeout: 0, // the call's context bounds it
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       tlsCfg,
	}
	h.client = &http.Client{
		Transport: tr,
		// A redirect is an answer not of the contract's shape.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	h.inst.Store(&instruments{})
	return h, nil
}

// tlsConfig loads cfg's TLS files; nil when there are none.
func tlsConfig(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" && cfg.CertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pool, err := config.LoadCertPool(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// Name returns the handler's name.
func (h *Handler) Name() string { return h.name }

// Instrument sets the handler's metrics (m may be nil: none) and tracer
// (nil: no spans). A daemon calls it when it starts the pools that run
// the handler; safe to call again.
func (h *Handler) Instrument(m *metrics.Metrics, tracer trace.Tracer) {
	in := &instruments{tracer: tracer}
	if m != nil {
		in.up = m.Remote.Up.WithLabelValues(h.service, h.name)
		in.duration = m.Remote.CallDuration.WithLabelValues(h.service, h.name)
		in.calls = map[string]prometheus.Counter{}
		for _, r := range []string{metrics.RemoteOK, metrics.RemoteUnavailable, metrics.RemoteTimeout, metrics.RemoteBadAnswer} {
			in.calls[r] = m.Remote.Calls.WithLabelValues(h.service, h.name, r)
		}
		if h.lim != nil {
			h.lim.setGauge(m.Limits.RemoteLimit.WithLabelValues(h.service, h.name))
		}
	}
	h.inst.Store(in)
}

// CallLimit returns the calls allowed at once now (max_in_flight, or the
// adaptive limit), 0 when there is no limit.
func (h *Handler) CallLimit() int {
	if h.lim == nil {
		return 0
	}
	return h.lim.Limit()
}

// Close closes the handler's idle connections.
func (h *Handler) Close() { h.client.CloseIdleConnections() }

// StatementError is a named statement that does not parse or prepare.
type StatementError struct {
	// Name is the statement's name in the config.
	Name string
	// Err is why: a *sqlhandler.SyntaxError or *sqlhandler.PrepareError.
	Err error
}

// Error returns "statement NAME: ...".
func (e *StatementError) Error() string { return "statement " + e.Name + ": " + e.Err.Error() }

// Unwrap returns the cause.
func (e *StatementError) Unwrap() error { return e.Err }

// Prepare asks PostgreSQL to prepare every statement on conn (nothing is
// executed), so that a statement naming a missing column stops the start
// instead of failing its first event. It returns a *StatementError
// wrapping a *sqlhandler.PrepareError for the first that does not. Then
// it turns on the batch form of each statement that may run once per
// batch (an INSERT of a query that reads no table: the SQL handlers'
// rule, batch.go of package sqlhandler); BatchStatements tells which.
func (h *Handler) Prepare(ctx context.Context, conn *pgconn.PgConn) error {
	for _, name := range h.names {
		if err := sqlhandler.PrepareStatements(ctx, conn, []*sqlhandler.Statement{h.stmts[name]}); err != nil {
			var perr *sqlhandler.PrepareError
			if errors.As(err, &perr) {
				return &StatementError{Name: name, Err: err}
			}
			return fmt.Errorf("prepare statement %s: %w", name, err)
		}
	}
	for _, name := range h.names {
		if rb := h.batches[name]; rb != nil {
			if _, err := rb.Check(ctx, conn); err != nil {
				return fmt.Errorf("check the batch form of statement %s: %w", name, err)
			}
		}
	}
	return nil
}

// BatchStatements returns the names of the statements that run once per
// batch when every event of a batch asks for that statement alone.
func (h *Handler) BatchStatements() []string {
	var out []string
	for _, name := range h.names {
		if rb := h.batches[name]; rb != nil && rb.On() {
			out = append(out, name)
		}
	}
	return out
}

// memoKey is where an event's answer is kept in the batch's scope.
type memoKey struct {
	h  *Handler
	id uuid.UUID
}

// HandleBatch asks the handler about the events it was not asked about in
// this batch yet (one call), then applies every event's effects and
// outbox rows, in order, as one pipeline. An event whose answer is an
// error fails the batch, which the dedup step then replays event by event
// through Handle: the answers are kept in the batch's scope and applied
// again without a second call.
func (h *Handler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	answers, err := h.answers(ctx, evs)
	if err != nil {
		return err
	}
	for i := range answers {
		if answers[i].err != nil {
			return fmt.Errorf("event %s: %w", evs[i].ID, answers[i].err)
		}
	}
	return h.apply(ctx, tx, evs, answers)
}

// Handle applies one event's answer: the one this batch's call gave, or
// a call of its own.
func (h *Handler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	evs := []consumer.Event{ev}
	answers, err := h.answers(ctx, evs)
	if err != nil {
		return err
	}
	if answers[0].err != nil {
		return answers[0].err
	}
	return h.apply(ctx, tx, evs, answers)
}

// answers returns one answer per event: kept from an earlier call of this
// batch, or from one call for the others. A call that fails as a whole
// returns its error (an *UnavailableError, or a bad answer's).
func (h *Handler) answers(ctx context.Context, evs []consumer.Event) ([]*answer, error) {
	scope := batchscope.From(ctx)
	out := make([]*answer, len(evs))
	var ask []int
	for i := range evs {
		if v, ok := scope.Load(memoKey{h, evs[i].ID}); ok {
			out[i] = v.(*answer)
			continue
		}
		ask = append(ask, i)
	}
	if len(ask) == 0 {
		return out, nil
	}
	call := evs
	if len(ask) < len(evs) {
		call = make([]consumer.Event, len(ask))
		for k, i := range ask {
			call[k] = evs[i]
		}
	}
	got, err := h.call(ctx, call)
	if err != nil {
		return nil, err
	}
	for k, i := range ask {
		out[i] = got[k]
		scope.Store(memoKey{h, evs[i].ID}, got[k])
	}
	return out, nil
}
