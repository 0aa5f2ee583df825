package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/internal/workers"
)

// limitsEnv is a reloadEnv with a publisher on its exchange and the
// service database open.
type limitsEnv struct {
	*reloadEnv
	db   *pgxpool.Pool
	conn *amqp.Connection
	ch   *amqp.Channel
	// depthEvery is the daemons' queue depth refresh (0: the default).
	depthEvery time.Duration
}

func newLimitsEnv(t *testing.T, name string) *limitsEnv {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, name)
	e := newReloadEnv(t, dsn)
	e.write(t, "", "")
	db, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return &limitsEnv{reloadEnv: e, db: db, conn: conn, ch: ch}
}

// publish publishes n new order.placed events, confirmed, and returns
// their ids.
func (e *limitsEnv) publish(t *testing.T, n int) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	ids := make([]uuid.UUID, n)
	confirms := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
		payload := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1"}]}`, uuid.New(), uuid.New(), uuid.New())
		body, err := envelope.Encode(envelope.Envelope{EventID: ids[i], EventName: shop.EventOrderPlaced,
			OccurredAt: time.Now().UTC(), Payload: json.RawMessage(payload)})
		require.NoError(t, err)
		c, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, "reload."+e.suffix, shop.EventOrderPlaced, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		confirms = append(confirms, c)
	}
	for _, c := range confirms {
		ok, err := c.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	return ids
}

// windowRate is the rate of the events processed after the first skip
// (by processed_at).
func (e *limitsEnv) windowRate(t *testing.T, skip int) float64 {
	t.Helper()
	var n int
	var span float64
	require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*), coalesce(extract(epoch FROM max(processed_at) - min(processed_at))::float8, 0)
		FROM (SELECT processed_at FROM processed_event ORDER BY processed_at OFFSET $1) w`, skip).Scan(&n, &span))
	return float64(n-1) / span
}

// processedIDs returns the ids processed so far.
func (e *limitsEnv) processedIDs(t *testing.T) []uuid.UUID {
	t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT event_id FROM processed_event`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

func (e *limitsEnv) processed(t *testing.T) int {
	t.Helper()
	return count(t, e.db, `SELECT count(*) FROM processed_event`)
}

// The kill switch: PauseAll stops every pool; a daemon that starts while
// it holds consumes nothing (its pools read it before their workers
// start); ResumeAll lets the backlog drain, once.
func TestPauseAllHoldsAcrossARestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "limits_pause_all")
	d := e.start(t)
	b := &backend{d: d}
	e.publish(t, 5)
	require.Eventually(t, func() bool { return e.processed(t) == 5 }, 30*time.Second, 20*time.Millisecond)

	sw, err := b.PauseAll(ctx, "", "incident 42", "ops")
	require.NoError(t, err)
	require.Len(t, sw, 1)
	require.True(t, sw[0].Paused)
	pools, err := b.ListPools(ctx, "")
	require.NoError(t, err)
	require.Equal(t, admin.PoolStatePaused, pools[0].State)
	require.Contains(t, pools[0].PausedReason, "incident 42")
	ks, err := b.KillSwitches(ctx)
	require.NoError(t, err)
	require.Len(t, ks, 1)

	// The daemon goes; another starts while the switch holds.
	d.Stop()
	e.publish(t, 20)
	d2 := e.start(t)
	t.Cleanup(d2.Stop)
	b2 := &backend{d: d2}
	require.Eventually(t, func() bool {
		p, err := b2.ListPools(ctx, "")
		return err == nil && len(p) == 1 && p[0].State == admin.PoolStatePaused
	}, 30*time.Second, 20*time.Millisecond)
	// Its queue holds the 20: nothing consumed.
	q, err := e.ch.QueueDeclarePassive("reload.stock."+e.suffix, false, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 20, q.Messages, "a daemon started under the kill switch consumes nothing")
	require.Equal(t, 5, e.processed(t))

	// A pool resumed on its own stays held by the kill switch.
	info, err := b2.ResumePool(ctx, "stock-events", "ops")
	require.NoError(t, err)
	require.Contains(t, info.PausedReason, "incident 42")

	_, err = b2.ResumeAll(ctx, "", "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.processed(t) == 25 }, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 2, count(t, e.db, `SELECT count(*) FROM platform.audit_log WHERE action IN ('service.pause', 'service.resume')`))
}

// startDaemons starts n daemons of stock on one config whose
// stock-events pool has extra keys, each with its admin on a port of its
// own.
func (e *limitsEnv) startDaemons(t *testing.T, n int, extra string, sigs ...*TestSignals) []*Daemon {
	t.Helper()
	ctx := context.Background()
	cfgText := fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: reload.%s}
services:
%s`, e.broker, e.suffix,
		serviceYAML("stock", e.dsn, e.poolYAML("stock-events", "stock", shop.EventOrderPlaced, shop.HandlerStockReserve, extra)))
	require.NoError(t, os.WriteFile(e.path, []byte(cfgText), 0o600))
	cfg, full, _ := loadShop(t, e.path)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	ds := make([]*Daemon, n)
	for i := range ds {
		opts := Options{queueDepthEvery: e.depthEvery}
		if i < len(sigs) {
			opts.testSignals = sigs[i]
		}
		d, err := start(ctx, cfg, full, opts, map[string]bool{"stock": true}, logger)
		require.NoError(t, err)
		t.Cleanup(d.Stop)
		ds[i] = d
	}
	return ds
}

// poolOf returns d's stock-events pool, once the service is up.
func poolOf(t *testing.T, d *Daemon) *workers.Pool {
	t.Helper()
	return daemonPool(t, d, "stock-events")
}

// daemonPool returns d's pool called name, once its service is up.
func daemonPool(t *testing.T, d *Daemon, name string) *workers.Pool {
	t.Helper()
	var p *workers.Pool
	require.Eventually(t, func() bool {
		for _, s := range d.serviceList() {
			if s.up.Load() {
				p, _ = s.pool(name)
			}
		}
		return p != nil
	}, 30*time.Second, 10*time.Millisecond)
	return p
}

// drainRate is the rate at which the events with ids were processed,
// from their processed_at: (count - 1) / (last - first).
func (e *limitsEnv) drainRate(t *testing.T, ids []uuid.UUID) float64 {
	t.Helper()
	var n int
	var span float64
	require.NoError(t, e.db.QueryRow(context.Background(), `SELECT count(*), extract(epoch FROM max(processed_at) - min(processed_at))::float8
		FROM processed_event WHERE event_id = ANY($1)`, ids).Scan(&n, &span))
	require.Equal(t, len(ids), n)
	return float64(n-1) / span
}

// limitEvents is how many events the rate tests drain: 3,000 (15 s at
// 200/s), 20,000 with PLATFORMD_LIMITS_FULL=1 (the proof).
func limitEvents() int {
	if os.Getenv("PLATFORMD_LIMITS_FULL") == "1" {
		return 20000
	}
	return 3000
}

// A pool limited to 200/s across two daemons drains its backlog at
// 190-210/s (measured from processed_at), each daemon taking 100/s; a
// third joins and the total holds; one leaves and it still does.
func TestPoolRateSharedAcrossDaemons(t *testing.T) {
	t.Parallel()
	e := newLimitsEnv(t, "limits_rate")
	ds := e.startDaemons(t, 2, "        prefetch: 40\n        batch: {size: 10}\n        limits: {rate: 200, burst: 40}\n")
	pools := []*workers.Pool{poolOf(t, ds[0]), poolOf(t, ds[1])}
	require.Eventually(t, func() bool {
		for _, p := range pools {
			if share, n := p.RateShare(); n != 2 || share != 100 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "each daemon takes half")

	ids := e.publish(t, limitEvents())
	third := len(ids) / 3
	require.Eventually(t, func() bool { return e.processed(t) >= third }, 5*time.Minute, 50*time.Millisecond)
	r2 := e.drainRate(t, e.processedIDs(t))
	t.Logf("two daemons: %.1f/s", r2)
	require.InDelta(t, 200, r2, 10, "the pool's rate across two daemons")

	// A third daemon joins: every one takes a third.
	joined := e.startDaemons(t, 1, "        prefetch: 40\n        batch: {size: 10}\n        limits: {rate: 200, burst: 40}\n")
	pools = append(pools, poolOf(t, joined[0]))
	require.Eventually(t, func() bool {
		for _, p := range pools {
			if _, n := p.RateShare(); n != 3 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "each daemon takes a third")
	before := e.processed(t)
	require.Eventually(t, func() bool { return e.processed(t) >= before+third }, 5*time.Minute, 50*time.Millisecond)
	r3 := e.windowRate(t, before)
	t.Logf("three daemons: %.1f/s", r3)
	// One leaves: the two left take half each again.
	ds[0].Stop()
	before = e.processed(t)
	require.Eventually(t, func() bool { return e.processed(t) == len(ids) }, 5*time.Minute, 50*time.Millisecond)
	t.Logf("two daemons again: %.1f/s", e.windowRate(t, before))
	r := e.drainRate(t, ids)
	t.Logf("2, then 3, then 2 daemons: %d events at %.1f/s", len(ids), r)
	require.InDelta(t, 200, r, 10, "the pool's rate as daemons join and leave")
	require.Equal(t, len(ids), count(t, e.db, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids))
}

// SetPoolLimits under load, from 200/s to 1,000/s and concurrency 4 -> 1:
// the new rate holds within a second, no event is redelivered or applied
// twice, and the pool never stops (the worker kept keeps its consumer, the
// queue never goes without one).
func TestSetPoolLimitsUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "limits_set")
	var pool atomicPool
	sigs := &TestSignals{PoolBuiltFunc: func(p *workers.Pool) {
		p.TestSignals().ConsumerStarted.Init(t)
		pool.Store(p)
	}}
	ds := e.startDaemons(t, 1, "        concurrency: 4\n        prefetch: 400\n        batch: {size: 100}\n        limits: {rate: 200, burst: 40}\n", sigs)
	p := poolOf(t, ds[0])
	for range 4 {
		p.TestSignals().ConsumerStarted.WaitOrTimeout()
	}
	b := &backend{d: ds[0]}

	ids := e.publish(t, 3000)
	require.Eventually(t, func() bool { return e.processed(t) >= 400 }, time.Minute, 20*time.Millisecond)
	consumers := func() int {
		ch, err := e.conn.Channel()
		if err != nil {
			return -1
		}
		defer func() { _ = ch.Close() }()
		q, err := ch.QueueDeclarePassive("reload.stock."+e.suffix, false, false, false, false, nil)
		if err != nil {
			return -1
		}
		return q.Consumers
	}
	const rate, burst, batch = 1000, 100, 100
	l, err := b.SetPoolLimits(ctx, admin.PoolLimitsRequest{Pool: "stock-events", Rate: rate, Burst: burst, Concurrency: 1, Reason: "catch up"}, "ops")
	require.NoError(t, err)
	var changedAt time.Time
	require.NoError(t, e.db.QueryRow(ctx, `SELECT now()`).Scan(&changedAt))
	require.InDelta(t, 1000, l.Rate, 0)
	require.Equal(t, 1, l.Concurrency)
	require.Eventually(t, func() bool { return consumers() == 1 }, 10*time.Second, 10*time.Millisecond, "three workers stopped")
	least := 1
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var n int
			if err := e.db.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&n); err != nil || n >= len(ids) {
				return
			}
			if n := consumers(); n >= 0 {
				least = min(least, n)
			}
		}
	}()
	require.Eventually(t, func() bool { return e.processed(t) == len(ids) }, 2*time.Minute, 20*time.Millisecond)
	<-done
	require.Equal(t, 1, least, "the pool never stopped consuming")
	p.TestSignals().ConsumerStarted.RequireEmpty() // the kept worker kept its consumer tag

	var n int
	var span float64
	require.NoError(t, e.db.QueryRow(ctx, `SELECT count(*), extract(epoch FROM max(processed_at) - min(processed_at))::float8
		FROM processed_event WHERE processed_at >= $1::timestamptz + interval '1 second'`, changedAt).Scan(&n, &span))
	r := float64(n-1) / span
	t.Logf("from a second after SetPoolLimits: %d events at %.1f/s", n, r)
	require.Greater(t, n, 100)
	// The limit is a ceiling: one worker of a race build on a loaded
	// 2-core machine drained at 877/s under 1,000/s (make test, with the
	// nested modules beside it). What proves the new limit in force
	// within a second is a rate far above the old 200/s and not above
	// the new one, as a token bucket bounds it: over span seconds at most
	// rate x span events, plus the burst it may have saved while the
	// worker was slower, plus one batch (processed_at is a batch's start,
	// so the last batch's own time is outside the span).
	ceiling := rate + float64(burst+batch)/span
	require.Greater(t, r, 600.0, "the new rate within a second: far above the old 200/s")
	require.LessOrEqual(t, r, ceiling, "the new rate within a second: not above 1,000/s, its burst and a batch")
	info := p.Info()
	require.Zero(t, info.Duplicates, "no redelivery, no duplicate")
	require.Equal(t, len(ids), count(t, e.db, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids))
	require.Equal(t, 1, info.Concurrency)
	got, err := b.GetPoolLimits(ctx, "stock-events")
	require.NoError(t, err)
	require.Equal(t, "ops", got.UpdatedBy)
	require.Equal(t, 1, count(t, e.db, `SELECT count(*) FROM platform.audit_log WHERE action = 'pool.limits'`))
}

// atomicPool holds the last pool built.
type atomicPool = atomic.Pointer[workers.Pool]

// A remote handler's max_in_flight and concurrency: adaptive reach its
// limiter: a fixed bound, an adaptive one starting under it, none without.
func TestRemoteHandlerLimitsFromConfig(t *testing.T) {
	t.Parallel()
	sc := config.ServiceConfig{Name: "billing", Pools: []config.PoolConfig{{Name: "p", Handlers: []string{"billing.h"}, Concurrency: 8}}}
	hc := config.RemoteHandlerConfig{Name: "billing.h", URL: "http://127.0.0.1:1/handle",
		Statements: map[string]config.SQLStatement{"s": "SELECT @x::int"}}
	for _, tc := range []struct {
		maxInFlight int
		concurrency string
		want        int
	}{{0, "", 0}, {3, "", 3}, {16, config.RemoteConcurrencyAdaptive, 4}, {2, config.RemoteConcurrencyAdaptive, 2}} {
		hc.MaxInFlight, hc.Concurrency = tc.maxInFlight, tc.concurrency
		h, err := newRemoteHandler(sc, hc)
		require.NoError(t, err)
		require.Equal(t, tc.want, h.CallLimit(), "max_in_flight %d, concurrency %q", tc.maxInFlight, tc.concurrency)
		h.Close()
	}
}

// SetPoolLimits through one daemon reaches the other within a second (the
// NOTIFY), concurrency included, and GetPoolLimits there says who set it.
func TestSetPoolLimitsReachesEveryDaemon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "limits_notify")
	ds := e.startDaemons(t, 2, "        concurrency: 3\n")
	a, b := poolOf(t, ds[0]), poolOf(t, ds[1])
	require.Eventually(t, func() bool {
		_, na := a.RateShare()
		_, nb := b.RateShare()
		return na == 2 && nb == 2
	}, 10*time.Second, 20*time.Millisecond)
	start := time.Now()
	_, err := (&backend{d: ds[0]}).SetPoolLimits(ctx, admin.PoolLimitsRequest{Pool: "stock-events", Rate: 50, Concurrency: 2, Reason: "r"}, "ops")
	require.NoError(t, err)
	share, _ := a.RateShare()
	require.InDelta(t, 25, share, 1e-9, "here at once")
	require.Eventually(t, func() bool {
		share, _ := b.RateShare()
		return share == 25 && b.Info().Concurrency == 2
	}, time.Second, 5*time.Millisecond, "the other daemon within a second")
	t.Logf("applied by the other daemon after %s", time.Since(start).Round(time.Millisecond))
	got, err := (&backend{d: ds[1]}).GetPoolLimits(ctx, "stock-events")
	require.NoError(t, err)
	require.Equal(t, "ops", got.UpdatedBy)
	require.InDelta(t, 50, got.Rate, 0)
	// ListPools shows the limit in force, this daemon's share and the
	// daemons sharing it.
	pools, err := (&backend{d: ds[1]}).ListPools(ctx, "")
	require.NoError(t, err)
	require.Len(t, pools, 1)
	require.InDelta(t, 50, pools[0].RateLimit, 0)
	require.InDelta(t, 25, pools[0].RateShare, 1e-9)
	require.Equal(t, 2, pools[0].Daemons)
	require.Equal(t, 2, pools[0].Concurrency)
}
