package workers

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/metrics"
)

// daemon is a second pool on the bundle's queue and database, with
// connections, metrics and logs of its own: another daemon of the service.
type daemon struct {
	pool    *Pool
	metrics *metrics.Metrics
	mu      sync.Mutex
	logs    bytes.Buffer
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.Write(p)
}

func (d *daemon) logText() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.logs.String()
}

func (b *bundle) startDaemon(handlers ...string) *daemon {
	b.t.Helper()
	d := &daemon{metrics: metrics.New()}
	logger := slog.New(slog.NewTextHandler(d, &slog.HandlerOptions{Level: slog.LevelWarn}))
	routes, err := dedup.RoutesFor(b.reg, handlers)
	require.NoError(b.t, err)
	consume, publish := broker.NewConn([]string{b.url}, "test-consume-2", d.metrics, logger), broker.NewConn([]string{b.url}, "test-publish-2", d.metrics, logger)
	p, err := NewPool(b.cfg, Deps{
		Processor: dedup.NewProcessor(b.db, dedup.ProcessorConfig{
			Routes: routes, Observer: NewConflictObserver(d.metrics, b.cfg.Service, b.cfg.Name, logger),
		}),
		DB: b.db, Consume: consume, Publish: publish, Metrics: d.metrics, Logger: logger,
	})
	require.NoError(b.t, err)
	initSignals(b.t, p)
	require.NoError(b.t, p.Start(b.ctx))
	b.t.Cleanup(func() { p.Stop(); consume.Close(); publish.Close() })
	p.testSignals.Connected.WaitUntil("second daemon connected", func() bool { return p.connected.Load() == int64(b.cfg.Concurrency) })
	d.pool = p
	return d
}

// Two daemons, each partitioned, on one hot state-copy workload (60
// orders, 40 versions each, a tenth republished): every order ends at its
// newest version, every event applied once, no deadlock (sorted locks).
func TestTwoDaemonsOnHotKeysKeepTheNewestVersion(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Bindings = []string{shop.EventOrderStatusChanged}
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.Prefetch = 2, 50, 200
	b.cfg.PartitionKey = "/order_id"
	first := b.start(shop.HandlerShippingTrack)
	second := b.startDaemon(shop.HandlerShippingTrack)
	const orders, versions = 60, 40
	deadlocks := func() int {
		return b.count(`SELECT deadlocks::int FROM pg_stat_database WHERE datname = current_database()`)
	}
	before := deadlocks()
	ids := make([]uuid.UUID, orders)
	for i := range ids {
		ids[i] = uuid.New()
	}
	sent := 0
	for v := 1; v <= versions; v++ {
		for _, id := range ids {
			payload, err := json.Marshal(shop.OrderStatusChanged{OrderID: id, Status: "s" + string(rune('a'+v%26)), Version: int32(v)})
			require.NoError(t, err)
			env := envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderStatusChanged, OccurredAt: time.Now().UTC(), Payload: payload}
			b.publishEnv(env, nil)
			if sent%10 == 0 {
				b.publishEnv(env, nil) // a relay republish
			}
			sent++
		}
	}
	b.waitFor("all applied", func() bool {
		return b.count(`SELECT count(*) FROM processed_event`) == sent && b.queueDepth(b.queue) == 0
	})
	b.stop()
	second.pool.Stop()
	require.Equal(t, orders, b.count(`SELECT count(*) FROM order_status WHERE version = $1`, versions), "every order at its newest version")
	require.Equal(t, sent, b.count(`SELECT count(*) FROM processed_event`))
	require.Equal(t, sent, int(b.poolInfoAfterStop.Processed+second.pool.Info().Processed), "each event processed once across both daemons")
	require.Equal(t, before, deadlocks(), "no deadlock")
	_ = first
}

// Two daemons whose handler locks two rows in opposite orders for two
// events deadlock on purpose: the conflict is counted by SQLSTATE in the
// victim daemon's metrics, said at warn level, and its batch tried again
// at once (after a few milliseconds of jitter): both events processed,
// none retried through a delay queue.
func TestDeadlocksBetweenDaemonsAreCountedAndSaid(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.Concurrency, b.cfg.BatchSize, b.cfg.Prefetch = 1, 1, 1
	_, err := b.check.Exec(b.ctx, `CREATE TABLE lockme (k int PRIMARY KEY); INSERT INTO lockme VALUES (1), (2)`)
	require.NoError(t, err)
	var firstLocks sync.WaitGroup
	firstLocks.Add(2)
	var calls atomic.Int32
	b.reg.MustRegister(consumer.Registration{
		Name: "test.lock_pair", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			var o shop.OrderPlaced
			if err := json.Unmarshal(ev.Payload, &o); err != nil {
				return err
			}
			first, second := 1, 2
			if o.Lines[0].Quantity == "2.000" { // the reverse event
				first, second = 2, 1
			}
			if _, err := tx.Exec(ctx, `SELECT 1 FROM lockme WHERE k = $1 FOR UPDATE`, first); err != nil {
				return err
			}
			if calls.Add(1) <= 2 { // both first locks taken before either second one: a deadlock
				firstLocks.Done()
				firstLocks.Wait()
			}
			_, err := tx.Exec(ctx, `SELECT 1 FROM lockme WHERE k = $1 FOR UPDATE`, second)
			return err
		}),
	})
	var logs bytes.Buffer
	var logMu sync.Mutex
	b.logger = slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	one := b.start("test.lock_pair")
	two := b.startDaemon("test.lock_pair")
	forward, _ := b.order(1)
	reverse, o := b.order(1)
	o.Lines[0].Quantity = "2.000"
	reverse.Payload, err = json.Marshal(o)
	require.NoError(t, err)
	b.publishEnv(forward, nil)
	b.publishEnv(reverse, nil)
	b.waitFor("both processed", func() bool { return one.Info().Processed+two.pool.Info().Processed == 2 })
	logMu.Lock()
	t.Logf("logs of the first daemon:\n%s\nof the second:\n%s", logs.String(), two.logText())
	logMu.Unlock()
	conflicts := testutil.ToFloat64(b.metrics.TxConflicts.WithLabelValues(b.cfg.Service, b.cfg.Name, "40P01")) +
		testutil.ToFloat64(two.metrics.TxConflicts.WithLabelValues(b.cfg.Service, b.cfg.Name, "40P01"))
	// One deadlock by construction; the victim's try again may, rarely,
	// meet the survivor once more (the jitter before it makes that rare).
	require.GreaterOrEqual(t, conflicts, 1.0, "the deadlock is counted by its victim")
	logMu.Lock()
	said := logs.String() + two.logText()
	logMu.Unlock()
	require.Contains(t, said, "aborted by lock conflicts")
	require.Contains(t, said, "sqlstate_40P01=")
	require.Zero(t, one.Info().Retried+two.pool.Info().Retried, "tried again at once, not through a delay queue")
	require.LessOrEqual(t, strings.Count(said, "aborted by lock conflicts"), 2, "one line per daemon at most, rate-limited")
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
