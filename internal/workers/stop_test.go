package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/examples/shop"
)

// A broker that stops answering without closing anything (a partition, a
// host gone without a RST) while a batch is in its handlers: the batch
// commits, its ack cannot reach the broker, and Stop must still return,
// bounded by the library's heartbeat (its reads time out and end the
// connection; amqp091-go writes and closes without a deadline of their
// own) rather than hang on the cancels and closes that wait for answers.
// Nothing is lost or applied twice: a pool started afterwards finds the
// unacked deliveries again, and the committed ones are duplicates.
func TestPoolStopReturnsOnABlackHoledBroker(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	node := newStubNode(t, brokerTarget(t))
	direct := b.url
	b.url = node.url() // the pool's connections; the test publishes directly
	b.start(shop.HandlerStockReserve, "test.probe")
	release := b.holdHandlers()
	const n = 30
	for range n {
		env, _ := b.order(1)
		b.publishEnv(env, nil)
	}
	b.waitFor("a batch in its handlers", func() bool { return b.holding.Load() > 0 })
	node.hole()
	release()
	b.waitFor("the held batch committed", func() bool { return b.count(`SELECT count(*) FROM processed_event`) > 0 })

	start := time.Now()
	b.pool.Stop()
	b.consume.Close()
	b.publish.Close()
	b.pool = nil
	stopped := time.Since(start)
	t.Logf("stopped in %v on a black-holed broker", stopped.Round(time.Millisecond))
	require.Less(t, stopped, HeartbeatDefault*3/2+5*time.Second,
		"Stop must end once the heartbeat finds the broker dead (1.5 intervals)")
	node.heal()

	b.url = direct
	b.start(shop.HandlerStockReserve, "test.probe")
	b.waitFor("every event processed after the restart", func() bool {
		return b.count(`SELECT count(*) FROM processed_event`) == n && b.queueDepth(b.queue) == 0 && b.pool.Info().InFlight == 0
	})
	require.Equal(t, n, b.reservations(), "each event applied once")
}
