package broker

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// When the AMQP channel dies during a Publish (its node lost mid-batch),
// the library closes the returns channel: Publish must still return, with
// an error for every copy not confirmed, instead of reading the closed
// channel forever (found by the chaos cluster phase: workers spun at 100%
// CPU holding their deliveries, and the daemon never stopped).
func TestPublisherReturnsWhenItsChannelDies(t *testing.T) {
	t.Parallel()
	conn, ctx := localConn(t, "test-publisher-dies")
	c, err := conn.Get(ctx)
	require.NoError(t, err)
	setup, err := c.Channel()
	require.NoError(t, err)
	q, err := setup.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)

	pub := NewPublisher(conn, 1)
	defer pub.Close()
	errs := pub.Publish(ctx, []Outgoing{{RoutingKey: q.Name, Msg: amqp.Publishing{Body: []byte("one")}}})
	require.NoError(t, errs[0])
	// The channel the library closes on a channel error: its returns
	// channel is closed, as after a node's loss.
	closed := make(chan amqp.Return)
	close(closed)
	pub.returns = closed
	done := make(chan []error, 1)
	go func() {
		done <- pub.Publish(ctx, []Outgoing{{RoutingKey: q.Name, Msg: amqp.Publishing{Body: []byte("two")}}})
	}()
	select {
	case errs = <-done:
		require.NoError(t, errs[0], "confirmed before the returns channel was read")
	case <-time.After(10 * time.Second):
		t.Fatal("Publish never returned: it spins on the closed returns channel")
	}
	require.NoError(t, setup.Close())
}
