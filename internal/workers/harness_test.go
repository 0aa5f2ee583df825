package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), // amqp091 heartbeat reader of a closing conn
	)
}

// bundle is one pool under test: its own scratch database, exchange and
// queue names (and optionally its own vhost), and a test handler.
type bundle struct {
	t        testing.TB
	ctx      context.Context
	dsn      string
	db       *pgxpool.Pool // the pool's own sessions (application_name platformd)
	check    *pgxpool.Pool // the test's queries: faults aimed at platformd's sessions miss them
	url      string
	exchange string
	queue    string
	cfg      Config
	reg      *consumer.Registry
	metrics  *metrics.Metrics
	logger   *slog.Logger
	consume  *broker.Conn
	publish  *broker.Conn
	pool     *Pool
	pubConn  *amqp.Connection
	pubCh    *amqp.Channel
	tracer   trace.Tracer // nil: tracing off

	poolInfoAfterStop Info

	mu       sync.Mutex
	attempts map[uuid.UUID][]int       // attempts seen by test.probe per event
	calls    map[uuid.UUID][]time.Time // when test.probe was called, per event
	failN    map[uuid.UUID]int         // fail this many times
	failPerm map[uuid.UUID]bool

	hold    atomic.Pointer[chan struct{}] // set: test.probe waits until it is closed
	holding atomic.Int32                  // test.probe calls waiting on hold
}

type bundleOpt func(*bundle)

func withVhost(b *bundle) {
	vhost := "t-" + uuid.NewString()[:8]
	rabbitmqctl(b.t, "add_vhost", vhost)
	rabbitmqctl(b.t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	b.t.Cleanup(func() { rabbitmqctl(b.t, "delete_vhost", vhost) })
	b.url = strings.TrimSuffix(testenv.AMQPURL(), "/") + "/" + vhost
}

func rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
	return string(out)
}

func newBundle(t testing.TB, opts ...bundleOpt) *bundle {
	t.Helper()
	ctx := context.Background()
	suffix := uuid.NewString()[:8]
	b := &bundle{
		t: t, ctx: ctx, url: testenv.AMQPURL(),
		exchange: "t.events." + suffix, queue: "t.stock." + suffix,
		reg:      consumer.NewRegistry(),
		metrics:  metrics.New(),
		logger:   slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		attempts: map[uuid.UUID][]int{}, calls: map[uuid.UUID][]time.Time{}, failN: map[uuid.UUID]int{}, failPerm: map[uuid.UUID]bool{},
	}
	for _, o := range opts {
		o(b)
	}
	require.NoError(t, shop.Register(b.reg))
	b.reg.MustRegister(consumer.Registration{Name: "test.probe", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(b.probe)})
	b.dsn = testdb.New(t, t.Name())
	sets, err := migrate.Sets(b.reg, []string{shop.HandlerStockReserve, shop.HandlerShippingTrack})
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, b.dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	b.db, err = dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(b.db.Close)
	b.check, err = pgxpool.New(ctx, b.dsn)
	require.NoError(t, err)
	t.Cleanup(b.check.Close)

	b.cfg = Config{
		Name: "stock-" + suffix, Service: "stock",
		Topology: broker.Topology{
			Exchange: b.exchange, Queue: b.queue, QueueType: "classic",
			Bindings: []string{shop.EventOrderPlaced}, RetryDelays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond},
		},
		Concurrency: 2, Prefetch: 100, BatchSize: 20, BatchWait: 2 * time.Millisecond,
		SoftStopTimeout: 10 * time.Second, StatePollInterval: 200 * time.Millisecond,
	}
	b.pubConn, err = amqp.Dial(b.url)
	require.NoError(t, err)
	b.pubCh, err = b.pubConn.Channel()
	require.NoError(t, err)
	require.NoError(t, b.pubCh.Confirm(false))
	t.Cleanup(func() {
		if ch, err := b.pubConn.Channel(); err == nil {
			// The shared delay queues stay: other tests use them.
			for _, q := range []string{b.queue, broker.FailedQueue(b.queue)} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			_ = ch.ExchangeDelete(b.exchange, false, false)
		}
		_ = b.pubConn.Close()
	})
	return b
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// start builds and starts the pool with the given handlers, and waits
// until its workers consume.
func (b *bundle) start(handlers ...string) *Pool {
	b.t.Helper()
	return b.startPool(true, handlers...)
}

// startPool builds and starts the pool with the given handlers; with wait
// it waits until the workers consume (or sit paused on a live channel).
func (b *bundle) startPool(wait bool, handlers ...string) *Pool {
	b.t.Helper()
	routes, err := dedup.RoutesFor(b.reg, handlers)
	require.NoError(b.t, err)
	b.consume = broker.NewConn([]string{b.url}, "test-consume", b.metrics, b.logger)
	b.publish = broker.NewConn([]string{b.url}, "test-publish", b.metrics, b.logger)
	p, err := NewPool(b.cfg, Deps{
		Processor: dedup.NewProcessor(b.db, dedup.ProcessorConfig{
			Routes: routes, Observer: NewConflictObserver(b.metrics, b.cfg.Service, b.cfg.Name, b.logger), Tracer: b.tracer,
			ResolvedBy: b.cfg.Name,
		}),
		DB: b.db, Consume: b.consume, Publish: b.publish, Metrics: b.metrics, Logger: b.logger, Tracer: b.tracer,
	})
	require.NoError(b.t, err)
	initSignals(b.t, p)
	require.NoError(b.t, p.Start(b.ctx))
	b.pool = p
	b.t.Cleanup(b.stop)
	// The workers declare the topology: wait until they consume (or sit
	// paused on a live channel) before publishing.
	if wait {
		p.testSignals.Connected.WaitUntil("pool connected", func() bool { return p.connected.Load() == int64(b.cfg.Concurrency) })
	} else if err := p.DeclareTopology(b.ctx); err != nil {
		b.t.Fatalf("declare topology: %v", err)
	}
	return p
}

func (b *bundle) stop() {
	if b.pool == nil {
		return
	}
	b.pool.Stop()
	b.poolInfoAfterStop = b.pool.Info()
	b.consume.Close()
	b.publish.Close()
	b.pool = nil
}

func (b *bundle) probe(ctx context.Context, _ pgx.Tx, ev consumer.Event) error {
	if h := b.hold.Load(); h != nil {
		b.holding.Add(1)
		select {
		case <-*h:
		case <-ctx.Done():
		}
		b.holding.Add(-1)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.attempts[ev.ID] = append(b.attempts[ev.ID], ev.Attempt)
	b.calls[ev.ID] = append(b.calls[ev.ID], time.Now())
	if b.failPerm[ev.ID] {
		return consumer.Permanent(fmt.Errorf("permanently bad %s", ev.ID))
	}
	if b.failN[ev.ID] > 0 {
		b.failN[ev.ID]--
		return fmt.Errorf("transient failure of %s", ev.ID)
	}
	return nil
}

// holdHandlers makes every call of test.probe wait, its batch's transaction
// open, until the returned release is called.
func (b *bundle) holdHandlers() (release func()) {
	h := make(chan struct{})
	b.hold.Store(&h)
	return func() {
		b.hold.Store(nil)
		close(h)
	}
}

func (b *bundle) order(lines int) (envelope.Envelope, shop.OrderPlaced) {
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
	for range lines {
		o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: "1.000"})
	}
	payload, err := json.Marshal(o)
	require.NoError(b.t, err)
	return envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced,
		OccurredAt: time.Now().UTC().Truncate(time.Millisecond), Payload: payload}, o
}

// publishEnv publishes an envelope through the exchange, as a producer would.
func (b *bundle) publishEnv(env envelope.Envelope, headers amqp.Table) {
	b.t.Helper()
	body, err := envelope.Encode(env)
	require.NoError(b.t, err)
	b.publishRaw(env.EventName, body, headers)
}

func (b *bundle) publishRaw(routingKey string, body []byte, headers amqp.Table) {
	b.t.Helper()
	dc, err := b.pubCh.PublishWithDeferredConfirmWithContext(b.ctx, b.exchange, routingKey, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body, Headers: headers})
	require.NoError(b.t, err)
	ok, err := dc.WaitContext(b.ctx)
	require.NoError(b.t, err)
	require.True(b.t, ok)
}

func (b *bundle) count(query string, args ...any) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.check.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

// waitFor polls cond until true or 30s pass: for state outside the pool
// (rows in PostgreSQL, messages in a queue). The pool's own state is
// waited for on its test signals (waitSettled and initSignals).
func (b *bundle) waitFor(what string, cond func() bool) {
	b.t.Helper()
	require.Eventually(b.t, cond, 30*time.Second, 20*time.Millisecond, what)
}

// initSignals initialises every test signal of p for t: the pool's
// internal events are waited for, never polled.
func initSignals(t testing.TB, p *Pool) {
	t.Helper()
	s := p.TestSignals()
	s.Connected.Init(t)
	s.ConsumerStarted.Init(t)
	s.Paused.Init(t)
	s.Quiesced.Init(t)
	s.Resumed.Init(t)
	s.BatchSettled.Init(t)
	s.DatabaseError.Init(t)
	s.OldRetryDrained.Init(t)
}

// waitSettled waits until cond, on the counters of Info, holds: it is
// checked again after every batch b's pool settles.
func (b *bundle) waitSettled(what string, cond func() bool) {
	b.t.Helper()
	b.pool.testSignals.BatchSettled.WaitUntil(what, cond)
}

func (b *bundle) queueDepth(name string) int {
	b.t.Helper()
	conn, err := amqp.Dial(b.url)
	require.NoError(b.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(b.t, err)
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, amqp.Table{amqp.QueueTypeArg: b.cfg.QueueType})
	require.NoError(b.t, err)
	return q.Messages
}

// storedFailure is a row of platform.failed_event as the tests read it.
type storedFailure struct {
	ID                            uuid.UUID
	Pool, EventName, RoutingKey   string
	EventID                       *uuid.UUID
	Headers                       map[string]any
	Body                          []byte
	Reason, Error, Handler, State string
	Attempt, Copies               int
	FirstFailedAt, FailedAt       time.Time
	SequenceKey                   *string
}

// getFailed reads every row of the pool's failure store, oldest first.
func (b *bundle) getFailed() []storedFailure {
	b.t.Helper()
	rows, err := b.check.Query(b.ctx, `SELECT id, pool, event_name, routing_key, event_id, headers, body, reason, error,
		handler, state, attempt, copies, first_failed_at, failed_at, sequence_key
		FROM platform.failed_event WHERE pool = $1 ORDER BY id`, b.cfg.Name)
	require.NoError(b.t, err)
	defer rows.Close()
	var out []storedFailure
	for rows.Next() {
		var f storedFailure
		require.NoError(b.t, rows.Scan(&f.ID, &f.Pool, &f.EventName, &f.RoutingKey, &f.EventID, &f.Headers, &f.Body, &f.Reason,
			&f.Error, &f.Handler, &f.State, &f.Attempt, &f.Copies, &f.FirstFailedAt, &f.FailedAt, &f.SequenceKey))
		out = append(out, f)
	}
	require.NoError(b.t, rows.Err())
	return out
}

func encodeForTest(t testing.TB, env envelope.Envelope) ([]byte, error) {
	t.Helper()
	return envelope.Encode(env)
}

func uuidV4(t *testing.T) uuid.UUID {
	t.Helper()
	return uuid.New()
}

// publishResilient publishes n distinct orders (and republishes a share),
// like an outbox relay: a publish that fails or is not confirmed is sent
// again on a fresh connection. It returns the number of distinct events.
func (b *bundle) publishResilient(n int, dupShare float64) int {
	var conn *amqp.Connection
	var ch *amqp.Channel
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	send := func(body []byte) {
		for attempt := 0; attempt < 200; attempt++ {
			if ch == nil || ch.IsClosed() {
				if conn != nil {
					_ = conn.Close()
				}
				var err error
				if conn, err = amqp.Dial(b.url); err != nil {
					time.Sleep(50 * time.Millisecond) //nolint:forbidigo // a redial's pace while the broker is cut off (bounded by attempt)
					continue
				}
				if ch, err = conn.Channel(); err != nil || ch.Confirm(false) != nil {
					ch = nil
					continue
				}
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(b.ctx, b.exchange, shop.EventOrderPlaced, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			if err == nil {
				if ok, werr := dc.WaitContext(b.ctx); werr == nil && ok {
					return
				}
			}
			ch = nil
		}
		b.t.Error("publishResilient: gave up")
	}
	every := 0
	if dupShare > 0 {
		every = int(1 / dupShare)
	}
	for i := range n {
		env, _ := b.order(1)
		body, err := envelope.Encode(env)
		if err != nil {
			b.t.Error(err)
			return i
		}
		send(body)
		if every > 0 && i%every == 0 {
			send(body)
		}
	}
	return n
}
