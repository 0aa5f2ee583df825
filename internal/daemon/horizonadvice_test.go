package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// mintedAt is a UUID v7 whose time is at (to the millisecond).
func mintedAt(at time.Time) uuid.UUID {
	id := uuid.Must(uuid.NewV7())
	ms := uint64(at.UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id
}

// ageEnv is a service stock (pool stock-events on a classic queue) whose
// daemons are started from one config file.
type ageEnv struct {
	path, dsn, exchange, queue string
	db                         *pgxpool.Pool
	ch                         *amqp.Channel
}

func newAgeEnv(t *testing.T, name, extra string) *ageEnv {
	t.Helper()
	suffix := fmt.Sprint(time.Now().UnixNano())
	e := &ageEnv{path: filepath.Join(t.TempDir(), "platformd.yaml"), dsn: testdb.New(t, name),
		exchange: "age." + suffix, queue: "age.stock." + suffix}
	require.NoError(t, os.WriteFile(e.path, []byte(fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: %s}
services:
  - name: stock
    database: %q
    min_horizon: 1m
    pools:
      - name: stock-events
        queue: %s
        queue_type: classic
        bindings: [%s]
        handlers: [%s]
%s`, e.exchange, e.dsn, e.queue, shop.EventOrderPlaced, shop.HandlerStockReserve, extra)), 0o600))
	cfg, full, _ := loadShop(t, e.path)
	require.NoError(t, Migrate(context.Background(), cfg, full, false, slog.New(slog.DiscardHandler)))
	db, err := pgxpool.New(context.Background(), e.dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	e.db = db
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	e.ch, err = conn.Channel()
	require.NoError(t, err)
	require.NoError(t, e.ch.Confirm(false))
	return e
}

// start starts a daemon of the env's config and waits until stock is up.
func (e *ageEnv) start(t *testing.T) *Daemon {
	t.Helper()
	cfg, full, _ := loadShop(t, e.path)
	d, err := start(context.Background(), cfg, full, Options{}, map[string]bool{"stock": true}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	require.Eventually(t, func() bool {
		for _, s := range d.serviceList() {
			if s.name == "stock" && s.up.Load() {
				if p, ok := s.pool("stock-events"); ok && p.Info().State == "running" {
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 20*time.Millisecond, "stock up")
	return d
}

// processed marks id processed in stock, so that every delivery of it is
// a duplicate.
func (e *ageEnv) processed(t *testing.T, id uuid.UUID) {
	t.Helper()
	_, err := e.db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())`, id)
	require.NoError(t, err)
}

// publish publishes an order.placed envelope of id through the exchange
// with headers, and waits for its confirm.
func (e *ageEnv) publish(t *testing.T, id uuid.UUID, headers amqp.Table) {
	t.Helper()
	ctx := context.Background()
	body, err := envelope.Encode(envelope.Envelope{EventID: id, EventName: shop.EventOrderPlaced, OccurredAt: time.Now().UTC(),
		Payload: json.RawMessage(fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": []}`, uuid.New(), uuid.New()))})
	require.NoError(t, err)
	c, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, e.exchange, shop.EventOrderPlaced, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body, Headers: headers})
	require.NoError(t, err)
	ok, err := c.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)
}

// duplicates is the duplicates the daemons' stock-events pools counted.
func duplicates(t *testing.T, ds ...*Daemon) uint64 {
	t.Helper()
	var n uint64
	for _, d := range ds {
		pools, err := (&backend{d: d}).ListPools(context.Background(), "stock")
		require.NoError(t, err)
		for _, p := range pools {
			n += p.Duplicates
		}
	}
	return n
}

// Duplicates of known ages, one per source: an id minted 30 s before its
// copy is redelivered by the broker, one minted 2 h before it is
// republished, one minted 3 days before an x-replay copy. Two daemons
// share the pool; both stop (each writes what it noted) and a third
// starts: its advice reports each source's max within a second of the
// truth, and the day's rows say the same to SQL.
func TestHorizonAdviceKnownAges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newAgeEnv(t, "horizon_ages", "")
	a := e.start(t)
	minted := map[string]time.Time{
		"redelivery": time.Now().Add(-30 * time.Second),
		"republish":  time.Now().Add(-2 * time.Hour),
		"replay":     time.Now().Add(-72 * time.Hour),
	}
	ids := map[string]uuid.UUID{}
	for src, at := range minted {
		ids[src] = mintedAt(at)
		e.processed(t, ids[src])
	}
	sent := map[string]time.Time{}

	// The redelivery: the pool paused, the copy taken from its queue and
	// requeued by us, so the broker hands it back flagged redelivered.
	ab := &backend{d: a}
	_, err := ab.PausePool(ctx, "stock-events", "test", "ops")
	require.NoError(t, err)
	sent["redelivery"] = time.Now()
	e.publish(t, ids["redelivery"], nil)
	var got amqp.Delivery
	require.Eventually(t, func() bool {
		var ok bool
		got, ok, err = e.ch.Get(e.queue, false)
		require.NoError(t, err)
		return ok
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, got.Nack(false, true))
	_, err = ab.ResumePool(ctx, "stock-events", "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return duplicates(t, a) == 1 }, 30*time.Second, 10*time.Millisecond)
	done := map[string]time.Time{"redelivery": time.Now()}

	// A second daemon; the republish and the replay copy go to either.
	b := e.start(t)
	sent["republish"] = time.Now()
	e.publish(t, ids["republish"], nil)
	sent["replay"] = time.Now()
	e.publish(t, ids["replay"], amqp.Table{broker.HeaderReplay: "test-replay"})
	require.Eventually(t, func() bool { return duplicates(t, a, b) == 3 }, 30*time.Second, 10*time.Millisecond)
	done["republish"], done["replay"] = time.Now(), time.Now()
	bySource := func(ad admin.HorizonAdvice) map[string]admin.DuplicateAgeSource {
		out := map[string]admin.DuplicateAgeSource{}
		for _, s := range ad.Sources {
			out[s.Source] = s
		}
		return out
	}
	within := func(src string, max time.Duration) {
		t.Helper()
		lo, hi := sent[src].Sub(minted[src])-time.Second, done[src].Sub(minted[src])+time.Second
		require.True(t, max >= lo && max <= hi, "%s: max %s not within a second of [%s, %s]", src, max, lo+time.Second, hi-time.Second)
	}

	a.Stop()
	b.Stop()
	var rows int
	require.NoError(t, e.db.QueryRow(ctx, `SELECT count(*) FROM platform.duplicate_age WHERE pool = 'stock-events' AND count = 1`).Scan(&rows))
	require.Equal(t, 3, rows, "one row per source, each duplicate counted once, written on stop")
	for src := range minted {
		var maxAge float64
		require.NoError(t, e.db.QueryRow(ctx, `SELECT max_age_seconds FROM platform.duplicate_age WHERE source = $1`, src).Scan(&maxAge))
		within(src, time.Duration(maxAge*float64(time.Second)))
	}

	c := e.start(t)
	advice, err := (&backend{d: c}).AdviseHorizon(ctx, "stock", admin.AdviseWindowDefault, false)
	require.NoError(t, err)
	srcs := bySource(advice)
	require.Len(t, srcs, 3)
	for src := range minted {
		s := srcs[src]
		require.Equal(t, int64(1), s.Count, src)
		within(src, s.Max)
		require.LessOrEqual(t, s.P99, s.Max)
		require.LessOrEqual(t, s.P999, s.Max)
	}
	// 3 days and a margin: 4 days (the retries and min_horizon need less).
	require.Equal(t, 4*day, advice.Advised)
	require.Contains(t, advice.Reasons[0], "replay")
}

// SetHorizon to 1 hour after a 2-hour-old duplicate (min_horizon is 1m,
// so only the duplicate refuses it): FailedPrecondition naming the age and
// the source; with force it is applied and the audit says what it is under.
func TestSetHorizonUnderADuplicatesAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newAgeEnv(t, "horizon_guard", "")
	d := e.start(t)
	b := &backend{d: d}
	id := mintedAt(time.Now().Add(-2 * time.Hour))
	e.processed(t, id)
	e.publish(t, id, nil)
	require.Eventually(t, func() bool { return duplicates(t, d) == 1 }, 30*time.Second, 10*time.Millisecond)

	_, err := b.SetHorizon(ctx, "stock", time.Hour, false, "ops")
	require.ErrorIs(t, err, admin.ErrFailedPrecondition)
	require.Contains(t, err.Error(), "republish")
	require.Contains(t, err.Error(), "2h0m")
	h, err := b.GetHorizon(ctx, "stock")
	require.NoError(t, err)
	require.Equal(t, 336*time.Hour, h.Horizon, "unchanged")

	// Above it: no objection.
	_, err = b.SetHorizon(ctx, "stock", 3*time.Hour, false, "ops")
	require.NoError(t, err)

	h, err = b.SetHorizon(ctx, "stock", time.Hour, true, "ops")
	require.NoError(t, err)
	require.Equal(t, time.Hour, h.Horizon)
	var detail map[string]any
	require.NoError(t, e.db.QueryRow(ctx, `SELECT detail FROM platform.audit_log WHERE action = 'horizon.set' ORDER BY id DESC LIMIT 1`).Scan(&detail))
	require.Equal(t, "republish", detail["duplicate_source"])
	require.Equal(t, true, detail["force"])
	require.Contains(t, detail["under_duplicate_age"], "2h0m")
}

// A producer whose 30-day archive holds events stock's pool is bound to
// reaches stock (horizon 14 days): the advice names it and the gap, and
// advises at least 30 days unless ignore_archive. processed_event, never
// analysed, is counted exactly; the advice's cost in bytes per day is
// within 20% of what the table grows by with one more day of rows.
func TestHorizonAdviceArchiveReachAndCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	orderDSN := testdb.New(t, "horizon_order")
	e := newAgeEnv(t, "horizon_reach", fmt.Sprintf("  - name: order\n    database: %q\n    outbox: {archive: 720h, poll: 50ms}\n", orderDSN))
	d := e.start(t)
	b := &backend{d: d}
	order, err := pgxpool.New(ctx, orderDSN)
	require.NoError(t, err)
	t.Cleanup(order.Close)
	require.Eventually(t, func() bool {
		for _, s := range d.serviceList() {
			if !s.up.Load() {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "order up")
	const events = 3
	for range events {
		_, err := order.Exec(ctx, `SELECT platform.publish('order.order.placed.v1', jsonb_build_object(
			'order_id', gen_random_uuid(), 'customer_id', gen_random_uuid(),
			'lines', jsonb_build_array(jsonb_build_object('product_id', gen_random_uuid(), 'quantity', '1.000'))))`)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return count(t, order, `SELECT count(*) FROM platform.outbox_archive`) == events &&
			count(t, e.db, `SELECT count(*) FROM processed_event`) == events
	}, 30*time.Second, 20*time.Millisecond, "archived and processed")

	// Five days of rows, 2000 a day, as consumers write them: in time
	// order, each id's first 48 bits its time in ms (as a UUID v7's).
	const perDay = 2000
	fill := func(from, span time.Duration, n int) {
		_, err := e.db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
			SELECT (lpad(to_hex((extract(epoch FROM t.at) * 1000)::bigint), 12, '0')
				|| substr(replace(gen_random_uuid()::text, '-', ''), 13))::uuid, t.at
			FROM (SELECT now() + make_interval(secs => $1::float8 + $2::float8 * g / $3::float8) AS at
				FROM generate_series(1, $3::int) g) t`, from.Seconds(), span.Seconds(), n)
		require.NoError(t, err)
	}
	fill(-5*day, 5*day, 5*perDay)
	advice, err := b.AdviseHorizon(ctx, "stock", admin.AdviseWindowDefault, false)
	require.NoError(t, err)
	require.Equal(t, int64(5*perDay+events), advice.ProcessedEventRows, "exact: the table was never analysed")
	require.InEpsilon(t, perDay, advice.RowsPerDay, 0.05)
	var before, after int64
	require.NoError(t, e.db.QueryRow(ctx, `SELECT pg_total_relation_size('processed_event')`).Scan(&before))
	require.Equal(t, before, advice.ProcessedEventBytes)

	require.Equal(t, 336*time.Hour, advice.Horizon)
	require.Equal(t, []admin.ArchiveReach{{Producer: "order", Archive: 720 * time.Hour, Pools: []string{"stock-events"}}}, advice.Archives)
	require.GreaterOrEqual(t, advice.Advised, 720*time.Hour)
	var named bool
	for _, r := range advice.Reasons {
		if strings.Contains(r, "order") && strings.Contains(r, "16 days") {
			named = true
		}
	}
	require.True(t, named, "a reason names the producer and the gap: %q", advice.Reasons)

	// One more day of rows: what the table really grows by in a day.
	fill(0, day, perDay) // the day after
	require.NoError(t, e.db.QueryRow(ctx, `SELECT pg_total_relation_size('processed_event')`).Scan(&after))
	perDayBytes := float64(advice.AdvisedBytes) / (advice.Advised.Hours() / 24)
	require.InEpsilon(t, float64(after-before), perDayBytes, 0.2, "advised bytes per day %.0f, grown %d", perDayBytes, after-before)
	t.Logf("advised %s: %d rows, %d bytes (%.0f a day; the table grew %d in a day of rows)",
		days(advice.Advised), advice.AdvisedRows, advice.AdvisedBytes, perDayBytes, after-before)

	ignored, err := b.AdviseHorizon(ctx, "stock", admin.AdviseWindowDefault, true)
	require.NoError(t, err)
	require.Less(t, ignored.Advised, 720*time.Hour)
	require.Len(t, ignored.Archives, 1, "still reported")

	_, err = b.AdviseHorizon(ctx, "nope", admin.AdviseWindowDefault, false)
	require.ErrorIs(t, err, admin.ErrNotFound)
}
