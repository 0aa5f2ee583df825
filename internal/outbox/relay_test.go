package outbox

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/session"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/testsignal"
)

func TestRelayLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := New(Config{Service: "svc", DB: b.db, Broker: b.broker, Exchange: b.exchange, Metrics: b.metrics, Logger: b.logger})
	require.NoError(t, err)
	require.Equal(t, BatchSizeDefault, r.cfg.BatchSize)
	require.Equal(t, PollDefault, r.cfg.Poll)
	r.Stop() // before Start
	r.Stop()
	require.ErrorIs(t, r.Start(context.Background()), startstop.ErrStopped)

	r = b.relay(nil)
	require.ErrorIs(t, r.Start(context.Background()), startstop.ErrStarted)
	waitActive(t, r, true)
	r.Stop()
	r.Stop()
	require.False(t, r.Active())
	// The lifecycle contract: concurrent stops wait for the same one.
	r = b.relay(nil)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(r.Stop)
	}
	wg.Wait()

	_, err = New(Config{Service: "svc"})
	require.Error(t, err)
}

// TestRelayPublishesCommittedRows writes rows with every kind of writer,
// commits some and rolls others back, and checks what arrives: every
// committed row, as the contract's envelope, and no rolled-back one.
func TestRelayPublishesCommittedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()

	// A payload whose numbers a float64 round trip would change.
	const exact = `{"big": 12345678901234567890123, "dec": 0.10000000000000000555, "s": "é\"\\"}`
	want := map[string]string{} // event id -> event name
	tx, err := b.check.Begin(ctx)
	require.NoError(t, err)
	id, err := consumer.Publish(ctx, tx, consumer.Message{Name: "test.go.v1", Payload: json.RawMessage(exact),
		Headers: map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "n": 42, "f": 1.5, "ok": true,
			"nested": map[string]any{"a": "b"}, "list": []any{1, "x"}}})
	require.NoError(t, err)
	want[id.String()] = "test.go.v1"
	var sqlID uuid.UUID
	require.NoError(t, tx.QueryRow(ctx, `SELECT platform.publish('test.sql.v1', $1::jsonb)`, exact).Scan(&sqlID))
	want[sqlID.String()] = "test.sql.v1"
	plainID, err := uuid.NewV7()
	require.NoError(t, err)
	occurred := time.Date(2024, 2, 29, 23, 59, 58, 123456000, time.FixedZone("x", 3600))
	_, err = tx.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, occurred_at, payload) VALUES ($1, 'test.plain.v1', $2, '{"a": [1, 2.50]}')`,
		plainID, occurred)
	require.NoError(t, err)
	want[plainID.String()] = "test.plain.v1"
	require.NoError(t, tx.Commit(ctx))

	var rolledBack []string
	tx, err = b.check.Begin(ctx)
	require.NoError(t, err)
	for range 3 {
		id, err := consumer.Publish(ctx, tx, consumer.Message{Name: "test.rolled.back", Payload: map[string]int{"x": 1}})
		require.NoError(t, err)
		rolledBack = append(rolledBack, id.String())
	}
	require.NoError(t, tx.Rollback(ctx))

	r := b.relay(nil)
	got := receive(t, deliveries, len(want), 20*time.Second)
	quiet(t, deliveries, 500*time.Millisecond)
	for _, id := range rolledBack {
		_, ok := got[id]
		require.False(t, ok, "rolled-back row %s published", id)
	}
	for id, name := range want {
		require.Len(t, got[id], 1, id)
		d := got[id][0]
		require.Equal(t, name, d.RoutingKey)
		require.Equal(t, b.exchange, d.Exchange)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		env, err := envelope.Decode(d.Body, 0)
		require.NoError(t, err)
		require.Equal(t, id, env.EventID.String())
		require.Equal(t, name, env.EventName)
	}
	// The payload exactly as PostgreSQL renders the jsonb: no number
	// rewritten.
	var rendered string
	require.NoError(t, b.check.QueryRow(ctx, `SELECT $1::jsonb::text`, exact).Scan(&rendered))
	for _, id := range []string{id.String(), sqlID.String()} {
		env, err := envelope.Decode(got[id][0].Body, 0)
		require.NoError(t, err)
		require.Equal(t, rendered, string(env.Payload))
		require.Contains(t, string(env.Payload), "12345678901234567890123")
		require.Contains(t, string(env.Payload), "0.10000000000000000555")
	}
	plain := got[plainID.String()][0]
	require.Contains(t, string(plain.Body), `"occurred_at":"2024-02-29T22:59:58.123456Z"`)
	require.Contains(t, string(plain.Body), `"payload":{"a": [1, 2.50]}`)
	require.Empty(t, plain.Headers)

	h := got[id.String()][0].Headers
	require.Equal(t, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", h["traceparent"])
	require.Equal(t, int64(42), h["n"])
	require.InDelta(t, 1.5, h["f"], 0)
	require.Equal(t, true, h["ok"])
	require.Equal(t, amqp.Table{"a": "b"}, h["nested"])
	require.Equal(t, []any{int64(1), "x"}, h["list"])
	require.NotContains(t, h, "x-platformd-publish-id", "only the row's headers")

	waitFor(t, 5*time.Second, "published rows to be deleted", func() bool { return b.pending() == 0 })
	require.InDelta(t, 3, testutil.ToFloat64(b.metrics.Outbox.Published.WithLabelValues("svc")), 0)
	require.True(t, r.Active())
}

// TestRelayNoHighWaterMark commits a row with a lower id after a row with a
// higher one went out: it must still be published.
func TestRelayNoHighWaterMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	b.relay(nil)

	low, err := uuid.NewV7()
	require.NoError(t, err)
	high, err := uuid.NewV7()
	require.NoError(t, err)
	require.Less(t, low.String(), high.String())

	slow, err := b.check.Begin(ctx)
	require.NoError(t, err)
	_, err = slow.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, 'test.low', '{}')`, low)
	require.NoError(t, err)
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, 'test.high', '{}')`, high)
	require.NoError(t, err)
	receiveIDs(t, deliveries, 10*time.Second, high.String())
	require.NoError(t, slow.Commit(ctx))
	receiveIDs(t, deliveries, 10*time.Second, low.String()) // a row committed late with a lower id still goes out
}

// TestRelayWakesOnNotify: with a poll far longer than the test, only the
// trigger's notification can wake the relay.
func TestRelayWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	// The relay may take its lease and make its first pass on the pool
	// before the control session LISTENs: a notification sent before the
	// LISTEN is lost, and with this poll nothing else would wake it.
	var listening *testsignal.Signal[struct{}]
	r := b.relayWith(func(c *Config) { c.Poll = time.Hour }, func(_ *Relay, ctl *session.Session) {
		listening = &ctl.TestSignals().Listening
		listening.Init(t)
	})
	waitActive(t, r, true)
	listening.WaitOrTimeout() // the control session LISTENs
	for i := range 3 {
		start := time.Now()
		var id uuid.UUID
		require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.notify', '{}')`).Scan(&id))
		receiveIDs(t, deliveries, 10*time.Second, id.String())
		t.Logf("commit %d to delivery: %s", i, time.Since(start))
	}
}

// TestRelayHoldsInvalidRows: rows a consumer would reject or the broker
// refuse, written by plain INSERTs, are held, not published, and the rows
// after them go out: a payload that is not an object, an occurred_at of
// 'infinity' (which once failed every select: nothing went out) and
// headers too large for one AMQP frame (which once made the broker close
// the connection at every try).
func TestRelayHoldsInvalidRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	_, err := b.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, 'test.bad', '[1]')`, uuid.Must(uuid.NewV7()))
	require.NoError(t, err)
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload, occurred_at) VALUES ($1, 'test.bad', '{}', 'infinity')`, uuid.Must(uuid.NewV7()))
	require.NoError(t, err)
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload, headers) VALUES ($1, 'test.bad', '{}', jsonb_build_object('big', repeat('x', 200000)))`, uuid.Must(uuid.NewV7()))
	require.NoError(t, err)
	var good uuid.UUID
	require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.good', '{}')`).Scan(&good))
	b.relay(nil)
	receiveIDs(t, deliveries, 10*time.Second, good.String())
	held := b.metrics.Outbox.Held.WithLabelValues("svc", metrics.HeldInvalid)
	waitFor(t, 10*time.Second, "the three invalid rows to be held twice", func() bool { return testutil.ToFloat64(held) >= 6 })
	quiet(t, deliveries, 300*time.Millisecond)
	require.Equal(t, 3, b.pending())
	require.Zero(t, b.logs.Count("relay pass failed"), "no select failed, no connection closed")
}

// TestRelayCrashBetweenConfirmAndDelete ends the relay's session after a
// batch was confirmed and before its delete: the batch is published again
// by the next session, every row arrives, and the copies are exactly the
// rows that were not deleted.
func TestRelayCrashBetweenConfirmAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	const n = 50
	for range n {
		_, err := b.check.Exec(ctx, `SELECT platform.publish('test.crash', '{}')`)
		require.NoError(t, err)
	}
	cr := &crash{b: b, t: t}
	b.relay(func(c *Config) {
		c.BatchSize = 20
		c.Test.AfterConfirmFunc = cr.afterConfirm
	})
	got := receive(t, deliveries, n, 30*time.Second)
	waitFor(t, 10*time.Second, "every row to be deleted", func() bool { return b.pending() == 0 })
	quiet(t, deliveries, 300*time.Millisecond)
	inFlight := cr.inFlight()
	require.Len(t, inFlight, 20)
	copies := map[string]bool{}
	for id, ds := range got {
		require.LessOrEqual(t, len(ds), 2, id)
		if len(ds) == 2 {
			copies[id] = true
		}
	}
	want := map[string]bool{}
	for _, id := range inFlight {
		want[id.String()] = true
	}
	require.Equal(t, want, copies, "the copies are the confirmed rows that were not deleted")
	require.GreaterOrEqual(t, b.logs.Count("relay pass failed"), 1)
}

// TestRelayOneActive runs two relays on one service database: one is
// active; when it stops, the other takes over and nothing is lost.
func TestRelayOneActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	r1 := b.relay(nil)
	waitActive(t, r1, true)
	// A second service entry on the same database: the outbox table is
	// the database's, so it stands by too.
	r2 := b.relayWith(func(c *Config) { c.Service = "svc-alias" }, func(r *Relay, _ *session.Session) {
		r.lease.TestSignals().TurnedAway.Init(t)
	})
	for range 3 { // three tries of the second relay, each turned away
		r2.lease.TestSignals().TurnedAway.WaitOrTimeout()
	}
	require.False(t, r2.Active(), "one active relay per database")

	publish := func(k int) []string {
		var ids []string
		for range k {
			var id uuid.UUID
			require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.ha', '{}')`).Scan(&id))
			ids = append(ids, id.String())
		}
		return ids
	}
	receiveIDs(t, deliveries, 10*time.Second, publish(10)...)
	r1.Stop()
	start := time.Now()
	waitActive(t, r2, true)
	t.Logf("takeover after %s", time.Since(start))
	receiveIDs(t, deliveries, 10*time.Second, publish(10)...)
	quiet(t, deliveries, 300*time.Millisecond) // a graceful stop deletes what it confirmed: no copy
}

// TestRelayDatabaseFault: the relay's sessions are terminated repeatedly
// while rows are written; every row still arrives.
func TestRelayDatabaseFault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	r := b.relay(func(c *Config) { c.BatchSize = 10 })
	var ids []string
	for i := range 100 {
		err := pgx.BeginFunc(ctx, b.check, func(tx pgx.Tx) error {
			id, err := consumer.Publish(ctx, tx, consumer.Message{Name: "test.fault", Payload: map[string]int{"i": i}})
			ids = append(ids, id.String())
			return err
		})
		require.NoError(t, err)
		if i%25 == 10 {
			_, err := b.check.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'platformd%'`)
			require.NoError(t, err)
		}
	}
	receiveIDs(t, deliveries, 60*time.Second, ids...)
	waitFor(t, 20*time.Second, "the outbox to empty", func() bool { return b.pending() == 0 })
	waitActive(t, r, true)
}

// TestRelayBrokerFault force-closes every broker connection of the test's
// vhost twice while rows are written: the relay reconnects and every row
// reaches the queue.
func TestRelayBrokerFault(t *testing.T) {
	t.Parallel()
	b := setup(t, withVhost)
	ctx := context.Background()
	r := b.relay(func(c *Config) { c.BatchSize = 20 })
	waitActive(t, r, true)
	var ids []string
	for i := range 150 {
		var id uuid.UUID
		require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.broker', '{}')`).Scan(&id))
		ids = append(ids, id.String())
		if i == 50 || i == 100 {
			rabbitmqctl(t, "close_all_connections", "-p", b.vhost, "outbox test: forced close")
		}
		time.Sleep(2 * time.Millisecond) //nolint:forbidigo // the writers' pace, so that the forced closes land mid-stream: the scenario
	}
	waitFor(t, 60*time.Second, "the outbox to empty", func() bool { return b.pending() == 0 })
	// Read the queue on a fresh connection (the test's was closed too).
	conn, err := amqp.Dial(b.url)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	got := map[string]int{}
	for {
		d, ok, err := ch.Get(b.queue, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		got[d.MessageId]++
	}
	var missing []string
	for _, id := range ids {
		if got[id] == 0 {
			missing = append(missing, id)
		}
	}
	require.Empty(t, missing, "rows lost across broker faults")
	require.GreaterOrEqual(t, b.logs.Count("broker reconnected"), 1, "the faults were seen")
}
