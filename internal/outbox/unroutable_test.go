package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/metrics"
)

// outboxRow is a row as the test wrote it.
type outboxRow struct {
	name, payload string
}

// writeRows publishes n rows of event name through platform.publish, with
// a payload of their own and headers, and returns them by event id.
func (b *bundle) writeRows(name string, n int) map[string]outboxRow {
	b.t.Helper()
	ctx := context.Background()
	rows, err := b.check.Query(ctx, `SELECT platform.publish($1, jsonb_build_object('i', g, 'price', 12.50), '{"h": "v", "n": 7}')::text
		FROM generate_series(1, $2) g`, name, n)
	require.NoError(b.t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(b.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(b.t, rows.Err())
	got := make(map[string]outboxRow, n)
	for _, id := range ids {
		var payload string
		require.NoError(b.t, b.check.QueryRow(ctx, `SELECT payload::text FROM platform.outbox WHERE event_id = $1`, id).Scan(&payload))
		got[id] = outboxRow{name: name, payload: payload}
	}
	return got
}

// consumeQueue returns the deliveries of queue, acked as they arrive.
func (b *bundle) consumeQueue(queue string) <-chan amqp.Delivery {
	b.t.Helper()
	ch, err := b.amqpConn.Channel()
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = ch.Close() })
	d, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(b.t, err)
	return d
}

// queueExists reports whether queue is declared on the broker.
func (b *bundle) queueExists(queue string) bool {
	b.t.Helper()
	ch, err := b.amqpConn.Channel()
	require.NoError(b.t, err)
	defer func() { _ = ch.Close() }()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return err == nil
}

// TestRelayKeepsUnroutableRows: with the default (hold), the rows of event
// names no queue is bound for (a producer shipped before its consumers)
// leave the outbox, and the broker keeps them in the exchange's unroutable
// queue, body, headers and routing key intact; a bound event still goes to
// its queue; the warnings are one line per event name, not one per row.
func TestRelayKeepsUnroutableRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deliveries := b.consume()
	n := 300
	if testing.Short() {
		n = 60
	}
	want := b.writeRows("loyalty.points.awarded.v1", n)
	for id, rw := range b.writeRows("loyalty.tier.changed.v1", n/6) {
		want[id] = rw
	}
	bound := b.writeRows("test.bound.v1", 5)

	b.relay(func(c *Config) { c.BatchSize = 50 }) // Unroutable unset: the default
	got := receive(t, deliveries, len(bound), 20*time.Second)
	for id := range bound {
		require.Len(t, got[id], 1, "the bound event reaches its queue once")
	}
	waitFor(t, 30*time.Second, "every row to leave the outbox", func() bool { return b.pending() == 0 })

	kept := map[string]amqp.Delivery{}
	unroutable := b.consumeQueue(broker.UnroutableQueue(b.exchange))
	deadline := time.After(20 * time.Second)
	for len(kept) < len(want) {
		select {
		case d := <-unroutable:
			kept[d.MessageId] = d
		case <-deadline:
			t.Fatalf("%d of %d unroutable events in %s", len(kept), len(want), broker.UnroutableQueue(b.exchange))
		}
	}
	quiet(t, deliveries, 300*time.Millisecond)
	for id, rw := range want {
		d, ok := kept[id]
		require.True(t, ok, id)
		require.Equal(t, rw.name, d.RoutingKey, "the routing key is the event name, for a replay")
		require.Equal(t, broker.UnroutableExchange(b.exchange), d.Exchange)
		require.Equal(t, "application/json", d.ContentType)
		require.Equal(t, amqp.Persistent, d.DeliveryMode)
		env, err := envelope.Decode(d.Body, 0)
		require.NoError(t, err)
		require.Equal(t, id, env.EventID.String())
		require.Equal(t, rw.name, env.EventName)
		require.Equal(t, rw.payload, string(env.Payload), "the payload byte for byte")
		require.Equal(t, amqp.Table{"h": "v", "n": int64(7)}, d.Headers, "the row's headers, only them")
	}

	m := b.metrics.Outbox
	require.InDelta(t, len(want), testutil.ToFloat64(m.Unroutable.WithLabelValues("svc", metrics.UnroutableKept)), 0)
	require.InDelta(t, 0, testutil.ToFloat64(m.Unroutable.WithLabelValues("svc", metrics.UnroutableDropped)), 0)
	require.InDelta(t, len(want)+len(bound), testutil.ToFloat64(m.Published.WithLabelValues("svc")), 0)
	require.Equal(t, 2, b.logs.Count("keeps them in the unroutable queue"), "one line per event name per minute:\n%s", b.logs.String())
	require.Zero(t, b.logs.Count("row held back"))
}

// TestRelayDropsUnroutableRows: with outbox.unroutable drop, the rows no
// queue is bound for are deleted and counted, nothing is kept, a bound
// event still goes to its queue, and one line is logged per event name.
func TestRelayDropsUnroutableRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deliveries := b.consume()
	n := 300
	if testing.Short() {
		n = 60
	}
	b.writeRows("loyalty.points.awarded.v1", n)
	bound := b.writeRows("test.bound.v1", 5)

	b.relay(func(c *Config) {
		c.BatchSize = 50
		c.Unroutable = config.OutboxUnroutableDrop
	})
	got := receive(t, deliveries, len(bound), 20*time.Second)
	for id := range bound {
		require.Len(t, got[id], 1)
	}
	waitFor(t, 30*time.Second, "every row to leave the outbox", func() bool { return b.pending() == 0 })
	quiet(t, deliveries, 300*time.Millisecond)

	m := b.metrics.Outbox
	require.InDelta(t, n, testutil.ToFloat64(m.Unroutable.WithLabelValues("svc", metrics.UnroutableDropped)), 0)
	require.InDelta(t, 0, testutil.ToFloat64(m.Unroutable.WithLabelValues("svc", metrics.UnroutableKept)), 0)
	require.False(t, b.queueExists(broker.UnroutableQueue(b.exchange)), "drop keeps nothing")
	require.Equal(t, 1, b.logs.Count("their rows were deleted"), "one line per event name per minute:\n%s", b.logs.String())
}

// TestRelayUnroutableQueueDeclaredAgain: an operator deleted the unroutable
// queue while the relay ran. The next unroutable row's copy comes back
// too: the row is held (it stays in the outbox), the queue is declared
// again, and the row is kept there at its next try.
func TestRelayUnroutableQueueDeclaredAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := broker.UnroutableQueue(b.exchange)
	kept := b.metrics.Outbox.Unroutable.WithLabelValues("svc", metrics.UnroutableKept)
	b.writeRows("nobody.listens.v1", 1)
	b.relay(nil)
	waitFor(t, 20*time.Second, "the first row to be kept", func() bool { return testutil.ToFloat64(kept) == 1 })
	_, err := b.ch.QueueDelete(q, false, false, false)
	require.NoError(t, err)

	second := b.writeRows("nobody.listens.v1", 1)
	waitFor(t, 20*time.Second, "the second row to be kept", func() bool { return testutil.ToFloat64(kept) == 2 })
	require.GreaterOrEqual(t, testutil.ToFloat64(b.metrics.Outbox.Held.WithLabelValues("svc", metrics.HeldReturned)), 1.0,
		"held while the queue was missing")
	require.Zero(t, b.pending())
	d := receive(t, b.consumeQueue(q), 1, 10*time.Second)
	for id := range second {
		require.Len(t, d[id], 1, "the second row, in the queue declared again")
	}
}

func TestRelayUnroutableConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := New(Config{Service: "svc", DB: b.db, Broker: b.broker, Exchange: b.exchange, Metrics: b.metrics, Logger: b.logger})
	require.NoError(t, err)
	require.Equal(t, config.OutboxUnroutableDefault, r.cfg.Unroutable)
	require.Equal(t, config.OutboxUnroutableHold, r.cfg.Unroutable, "a producer that ships before its consumers loses nothing")
	require.Equal(t, WarnEveryDefault, r.cfg.WarnEvery)
	_, err = New(Config{Service: "svc", DB: b.db, Broker: b.broker, Exchange: b.exchange, Metrics: b.metrics, Logger: b.logger, Unroutable: "keep"})
	require.ErrorContains(t, err, `unroutable must be hold or drop (got "keep")`)
}

// TestWarnLimiter: one line per key per interval, carrying the count of
// the events since the previous line.
func TestWarnLimiter(t *testing.T) {
	t.Parallel()
	w := warnLimiter{every: time.Minute}
	t0 := time.Now()
	n, ok := w.note("a", t0)
	require.True(t, ok)
	require.Equal(t, 1, n)
	for i := range 99 {
		_, ok = w.note("a", t0.Add(time.Duration(i)*100*time.Millisecond))
		require.False(t, ok)
	}
	n, ok = w.note("b", t0.Add(time.Second))
	require.True(t, ok, "another key has its own interval")
	require.Equal(t, 1, n)
	n, ok = w.note("a", t0.Add(time.Minute))
	require.True(t, ok)
	require.Equal(t, 100, n, "the 99 held back and this one")
	_, ok = w.note("a", t0.Add(time.Minute+time.Second))
	require.False(t, ok)

	// The keys remembered stay bounded; a forgotten key logs at once.
	for i := range 3 * warnKeysMax {
		w.note(uuid.NewString(), t0.Add(time.Duration(i)*time.Minute))
	}
	require.LessOrEqual(t, len(w.keys), warnKeysMax+1)
}
