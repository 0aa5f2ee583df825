package broker

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Shared delay queues are named by the delay in Go duration syntax; the
// old per-pool names stay known for draining.
func TestDelayQueueNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "platformd.retry.1m0s", DelayQueue(time.Minute))
	require.Equal(t, "platformd.retry.10s", DelayQueue(10*time.Second))
	require.Equal(t, "platformd.retry.1.5s", DelayQueue(1500*time.Millisecond))
	require.Equal(t, "platformd.retry.100ms", DelayQueue(100*time.Millisecond))
	require.Equal(t, "stock.events.retry.10s", OldRetryQueue("stock.events", 10*time.Second))
	require.Equal(t, "stock.events.retry.1m", OldRetryQueue("stock.events", time.Minute))
	require.Equal(t, "stock.events.retry.250ms", OldRetryQueue("stock.events", 250*time.Millisecond))
}

// uniqueDelays returns base's delays plus a random millisecond offset no
// other test uses, so that the test owns their shared delay queues; it
// deletes them, and their exchanges, when the test ends.
func uniqueDelays(t *testing.T, base ...time.Duration) []time.Duration {
	t.Helper()
	off := time.Duration(1+rand.IntN(899)) * time.Millisecond
	out := make([]time.Duration, len(base))
	for i, b := range base {
		out[i] = b + off
	}
	t.Cleanup(func() { deleteDelays(t, out) })
	return out
}

// Two pools that share a delay, one on quorum queues and one on classic,
// each declare their delays without a 406: the first declaration sets the
// shared queue's type, the second uses it as it is and says so once. A
// retry published to a delay's exchange with a pool's queue as routing key
// comes back to that queue after the delay.
func TestDeclareDelaysSharedAcrossQueueTypes(t *testing.T) {
	t.Parallel()
	conn, ctx := localConn(t, "test-delays")
	ch, err := conn.Channel(ctx)
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	d := uniqueDelays(t, 200*time.Millisecond, 300*time.Millisecond, 400*time.Millisecond)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	quorum := Topology{QueueType: amqp.QueueTypeQuorum, RetryDelays: []time.Duration{d[0], d[1]}}
	classic := Topology{QueueType: amqp.QueueTypeClassic, RetryDelays: []time.Duration{d[0], d[2], d[0]}}
	require.NoError(t, quorum.DeclareDelays(ctx, conn, log))
	require.NoError(t, classic.DeclareDelays(ctx, conn, log))
	require.NoError(t, classic.DeclareDelays(ctx, conn, log), "declaring again is idempotent")
	require.Equal(t, 1, strings.Count(logs.String(), "shared delay queue exists with other arguments"), "logged once: %s", logs.String())
	require.Contains(t, logs.String(), "found_type=quorum")

	// The shared queue of d[0] is the quorum one: its own arguments are
	// accepted again, the classic ones are not.
	probe, err := conn.Channel(ctx)
	require.NoError(t, err)
	_, err = probe.QueueDeclare(DelayQueue(d[0]), true, false, false, false, DelayQueueArgs(amqp.QueueTypeQuorum, d[0]))
	require.NoError(t, err)
	_, err = probe.QueueDeclare(DelayQueue(d[0]), true, false, false, false, DelayQueueArgs(amqp.QueueTypeClassic, d[0]))
	require.True(t, isPreconditionFailed(err), "%v", err)

	// Back by the routing key, after the delay.
	target, err := ch.QueueDeclare("t.delays."+uuid.NewString()[:8], false, true, true, false, nil)
	require.NoError(t, err)
	pub := NewPublisher(conn, 4)
	defer pub.Close()
	for _, delay := range d {
		sent := time.Now()
		errs := pub.Publish(ctx, []Outgoing{{Exchange: DelayQueue(delay), RoutingKey: target.Name,
			Msg: amqp.Publishing{Body: []byte(delay.String()), Headers: amqp.Table{HeaderOriginalRoutingKey: "order.order.placed.v1"}}}})
		require.NoError(t, errs[0])
		var got amqp.Delivery
		require.Eventually(t, func() bool {
			var ok bool
			got, ok, err = ch.Get(target.Name, true)
			require.NoError(t, err)
			return ok
		}, 10*time.Second, 5*time.Millisecond)
		require.GreaterOrEqual(t, time.Since(sent), delay, "waited its delay")
		require.Equal(t, delay.String(), string(got.Body))
		require.Equal(t, target.Name, got.RoutingKey)
		require.Equal(t, "order.order.placed.v1", OriginalRoutingKey(&got))
	}
}

// deleteDelays deletes the shared delay queues and exchanges of delays, on
// a connection of its own (the test's are closed by then).
func deleteDelays(t *testing.T, delays []time.Duration) {
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	for _, d := range delays {
		_, err := ch.QueueDelete(DelayQueue(d), false, false, false)
		require.NoError(t, err)
		require.NoError(t, ch.ExchangeDelete(DelayQueue(d), false, false))
	}
}
