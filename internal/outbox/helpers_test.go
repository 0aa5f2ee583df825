package outbox

import (
	"context"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testlog"

	"github.com/platformd/platformd/internal/query"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/session"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"), // amqp091 heartbeat reader of a closing conn
	)
}

// bundle is one service database with the platform migrations, the test's
// own exchange and queue on the broker, and relays built on them.
type bundle struct {
	t        testing.TB
	dsn      string
	db       *pgxpool.Pool // the relays' sessions
	check    *pgxpool.Pool // the test's own queries
	exchange string
	queue    string
	url      string // the broker, with the bundle's vhost if any
	vhost    string
	broker   *broker.Conn
	metrics  *metrics.Metrics
	logs     *testlog.Buffer
	logger   *slog.Logger
	amqpConn *amqp.Connection
	ch       *amqp.Channel
}

// setupOpt changes a bundle before it connects.
type setupOpt func(*bundle)

// withVhost gives the bundle a RabbitMQ vhost of its own, deleted in
// cleanup, so that a test may force-close every connection on it.
func withVhost(b *bundle) {
	b.vhost = "outbox-" + uuid.NewString()[:8]
	rabbitmqctl(b.t, "add_vhost", b.vhost)
	b.t.Cleanup(func() { rabbitmqctl(b.t, "delete_vhost", b.vhost) })
	rabbitmqctl(b.t, "set_permissions", "-p", b.vhost, "guest", ".*", ".*", ".*")
	b.url = strings.TrimSuffix(testenv.AMQPURL(), "/") + "/" + b.vhost
}

func rabbitmqctl(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %v: %v: %s", args, err, out)
	}
}

func setup(t testing.TB, opts ...setupOpt) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{t: t, logs: &testlog.Buffer{}, metrics: metrics.New(), url: testenv.AMQPURL()}
	for _, o := range opts {
		o(b)
	}
	b.logger = slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b.dsn = testdb.New(t, "outbox")
	require.NoError(t, migrate.Apply(ctx, b.dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}}, b.logger))
	var err error
	b.db, err = dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(b.db.Close)
	b.check, err = dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{MaxConns: 4, ApplicationName: "outbox-test"})
	require.NoError(t, err)
	t.Cleanup(b.check.Close)

	id := uuid.NewString()[:8]
	b.exchange, b.queue = "outbox-test-"+id, "outbox-test-"+id
	b.amqpConn, err = amqp.Dial(b.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.amqpConn.Close() })
	b.ch, err = b.amqpConn.Channel()
	require.NoError(t, err)
	require.NoError(t, b.ch.ExchangeDeclare(b.exchange, amqp.ExchangeTopic, false, true, false, false, nil))
	_, err = b.ch.QueueDeclare(b.queue, false, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if ch, err := b.amqpConn.Channel(); err == nil {
			_, _ = ch.QueueDelete(b.queue, false, false, false)
			_ = ch.ExchangeDelete(b.exchange, false, false)
			// What a relay keeping unroutable events declared.
			_, _ = ch.QueueDelete(broker.UnroutableQueue(b.exchange), false, false, false)
			_ = ch.ExchangeDelete(broker.UnroutableExchange(b.exchange), false, false)
			_ = ch.Close()
		}
	})
	b.bind("test.#")
	b.broker = broker.NewConn([]string{b.url}, "outbox-test-"+id, nil, b.logger)
	t.Cleanup(b.broker.Close)
	return b
}

// bind binds the test queue with key.
func (b *bundle) bind(key string) {
	b.t.Helper()
	require.NoError(b.t, b.ch.QueueBind(b.queue, key, b.exchange, false, nil))
}

// relay returns a started relay on the bundle, stopped in cleanup.
func (b *bundle) relay(mod func(*Config)) *Relay {
	b.t.Helper()
	return b.relayWith(mod, nil)
}

// relayWith is relay with before called on the relay and its control
// session before either starts: where a test initialises the test
// signals it waits on.
func (b *bundle) relayWith(mod func(*Config), before func(*Relay, *session.Session)) *Relay {
	b.t.Helper()
	cfg := Config{
		Service: "svc", DB: b.db, Broker: b.broker, Exchange: b.exchange,
		Poll: 200 * time.Millisecond, LockRetry: 100 * time.Millisecond,
		HoldMin: 50 * time.Millisecond, HoldMax: 200 * time.Millisecond,
		Metrics: b.metrics, Logger: b.logger,
	}
	if mod != nil {
		mod(&cfg)
	}
	// As the daemon runs it: notifications and the relay's small
	// statements on a control session of its own.
	ctl := session.New(session.Config{DB: b.db, Logger: b.logger})
	if cfg.ControlFunc == nil {
		cfg.ControlFunc = func(ctx context.Context, fn func(context.Context, query.Querier) error) error {
			return ctl.Do(ctx, func(ctx context.Context, q query.Querier) error { return fn(ctx, q) })
		}
	}
	r, err := New(cfg)
	require.NoError(b.t, err)
	r.TestSignals().Active.Init(b.t) // waitActive's
	ctl.Subscribe(Channel, func(context.Context, query.Querier, string) { r.Wake() })
	if before != nil {
		before(r, ctl)
	}
	require.NoError(b.t, ctl.Start(context.Background()))
	require.NoError(b.t, r.Start(context.Background()))
	b.t.Cleanup(ctl.Stop)
	b.t.Cleanup(r.Stop)
	return r
}

// consume returns the deliveries of the test queue.
func (b *bundle) consume() <-chan amqp.Delivery {
	b.t.Helper()
	ch, err := b.amqpConn.Channel()
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = ch.Close() })
	d, err := ch.Consume(b.queue, "", true, false, false, false, nil)
	require.NoError(b.t, err)
	return d
}

// receive collects deliveries until n distinct event ids arrived or the
// timeout passes; it returns every delivery (copies included) by id.
func receive(t testing.TB, d <-chan amqp.Delivery, n int, timeout time.Duration) map[string][]amqp.Delivery {
	t.Helper()
	got := map[string][]amqp.Delivery{}
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case m := <-d:
			got[m.MessageId] = append(got[m.MessageId], m)
		case <-deadline:
			t.Fatalf("received %d of %d distinct messages within %s", len(got), n, timeout)
		}
	}
	return got
}

// receiveIDs collects deliveries until every id arrived (copies of others
// allowed) or the timeout passes.
func receiveIDs(t testing.TB, d <-chan amqp.Delivery, timeout time.Duration, ids ...string) map[string][]amqp.Delivery {
	t.Helper()
	got := map[string][]amqp.Delivery{}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	deadline := time.After(timeout)
	for len(want) > 0 {
		select {
		case m := <-d:
			got[m.MessageId] = append(got[m.MessageId], m)
			delete(want, m.MessageId)
		case <-deadline:
			t.Fatalf("%d of %d ids not received within %s", len(want), len(ids), timeout)
		}
	}
	return got
}

// quiet requires that nothing more arrives for a while.
func quiet(t testing.TB, d <-chan amqp.Delivery, wait time.Duration) {
	t.Helper()
	select {
	case m := <-d:
		t.Fatalf("unexpected message %s %s", m.RoutingKey, m.MessageId)
	case <-time.After(wait):
	}
}

// pending counts the outbox rows.
func (b *bundle) pending() int {
	b.t.Helper()
	n, _, err := Stats(context.Background(), b.check)
	require.NoError(b.t, err)
	return int(n)
}

// waitActive waits on the relay's Active signal until the relay is
// active (want) or not: each state change signals, so the loop wakes on
// every one and stops at the first that leaves the relay as wanted.
func waitActive(t testing.TB, r *Relay, want bool) {
	t.Helper()
	for r.Active() != want {
		r.TestSignals().Active.WaitOrTimeout()
	}
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) //nolint:forbidigo // the package's one bounded poll helper, for state in PostgreSQL and the broker
	}
}

// crash is a relay's Test.AfterConfirmFunc that kills the relay's sessions
// (the pass's among them, as if the process died) right after the first
// batch's confirms, before their delete; inFlight then returns that
// batch's ids. each, when set, runs at every batch's confirms first.
type crash struct {
	b       *bundle
	t       testing.TB
	each    func(ids []uuid.UUID)
	crashed atomic.Bool
	mu      sync.Mutex
	ids     []uuid.UUID
}

func (c *crash) afterConfirm(ids []uuid.UUID) {
	if c.each != nil {
		c.each(ids)
	}
	if !c.crashed.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	c.ids = append([]uuid.UUID(nil), ids...)
	c.mu.Unlock()
	_, err := c.b.check.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'platformd%'`)
	if err != nil {
		c.t.Error(err)
	}
}

// inFlight returns the ids of the batch the crash cut.
func (c *crash) inFlight() []uuid.UUID {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids
}
