package broker

import (
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// TestDeclareUnroutable: the declaration can be repeated (every daemon
// makes it), and whatever reaches the unroutable exchange, whatever its
// routing key, waits in the queue with that routing key and its headers.
func TestDeclareUnroutable(t *testing.T) {
	t.Parallel()
	exchange := "unroutable-test-" + uuid.NewString()[:8]
	require.Equal(t, exchange+".unroutable", UnroutableExchange(exchange))
	require.Equal(t, exchange+".unroutable", UnroutableQueue(exchange))
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = ch.QueueDelete(UnroutableQueue(exchange), false, false, false)
		_ = ch.ExchangeDelete(UnroutableExchange(exchange), false, false)
	})
	require.NoError(t, DeclareUnroutable(ch, exchange))
	require.NoError(t, DeclareUnroutable(ch, exchange), "idempotent")

	require.NoError(t, ch.Confirm(false))
	for _, key := range []string{"a.b.c.v1", "other.v2"} {
		c, err := ch.PublishWithDeferredConfirm(UnroutableExchange(exchange), key, true, false,
			amqp.Publishing{Body: []byte(key), Headers: amqp.Table{"h": key}, DeliveryMode: amqp.Persistent})
		require.NoError(t, err)
		ok, err := c.WaitContext(t.Context())
		require.NoError(t, err)
		require.True(t, ok)
	}
	for _, key := range []string{"a.b.c.v1", "other.v2"} {
		var d amqp.Delivery
		require.Eventually(t, func() bool {
			var ok bool
			d, ok, err = ch.Get(UnroutableQueue(exchange), true)
			require.NoError(t, err)
			return ok
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, key, d.RoutingKey)
		require.Equal(t, key, string(d.Body))
		require.Equal(t, key, d.Headers["h"])
	}
}
