package workers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/broker/brokertest"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// A broker that stops answering without closing anything (a partition, a
// host gone without a RST) while a batch is in its handlers: the batch
// commits, its ack cannot reach the broker, and Stop must still return
// rather than hang on the cancels and closes that wait for answers: at
// the end of its soft stop (the pool drops the connection) or when the
// library's heartbeat finds the broker dead (its reads time out after 1.5
// intervals), whichever comes first. Nothing is lost or applied twice: a
// pool started afterwards finds the unacked deliveries again, and the
// committed ones are duplicates.
func TestPoolStopReturnsOnABlackHoledBroker(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	node, direct := b.commitBehindAFault(t, (*brokertest.Node).Hole)

	start := time.Now()
	b.pool.Stop()
	b.consume.Close()
	b.publish.Close()
	b.pool = nil
	stopped := time.Since(start)
	t.Logf("stopped in %v on a black-holed broker", stopped.Round(time.Millisecond))
	require.Less(t, stopped, min(b.cfg.SoftStopTimeout, broker.HeartbeatDefault*3/2)+3*time.Second,
		"Stop must end at its soft stop or once the heartbeat finds the broker dead")
	node.Heal()

	b.requireEachOnceAfterRestart(direct)
}

// A broker node that answers nothing but heartbeats (cut off from its
// cluster before it pauses, or stuck), while a batch is in its handlers:
// no read deadline ever fires, and without the pool dropping the
// connection at the end of its soft stop its Stop waited on the
// consumers' cancels until the node recovered (over 60 s, unbounded).
// Stop must return within the soft stop and the closes within their
// bound; nothing is lost or applied twice.
func TestPoolStopReturnsOnAStalledBroker(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.cfg.SoftStopTimeout = 2 * time.Second
	node, direct := b.commitBehindAFault(t, (*brokertest.Node).Stall)

	start := time.Now()
	done := make(chan struct{})
	go func() { b.pool.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.cfg.SoftStopTimeout + 10*time.Second):
		node.Unstall() // let the blocked Stop end, to fail rather than hang
		<-done
		t.Fatalf("Stop still blocked %v after its soft stop timed out", 10*time.Second)
	}
	stopped := time.Since(start)
	b.consume.Close()
	b.publish.Close()
	closed := time.Since(start) - stopped
	b.pool = nil
	t.Logf("stopped in %v, connections closed in %v, on a stalled broker", stopped.Round(time.Millisecond), closed.Round(time.Millisecond))
	require.Less(t, stopped, b.cfg.SoftStopTimeout+3*time.Second, "Stop must end once its soft stop times out")
	require.Less(t, closed, 2*broker.CloseTimeoutDefault+2*time.Second, "each Close is bounded")
	node.Unstall()

	b.requireEachOnceAfterRestart(direct)
}

// faultEvents is how many events the stop tests publish.
const faultEvents = 30

// commitBehindAFault starts b's pool through a stub node (the test still
// publishes directly), publishes faultEvents events and, once a batch is in
// its handlers, applies fault to the node and lets the batch commit: its
// ack cannot reach the broker. It returns the node and the broker's direct
// URL, for the restart.
func (b *bundle) commitBehindAFault(t *testing.T, fault func(*brokertest.Node)) (*brokertest.Node, string) {
	t.Helper()
	node := brokertest.NewNode(t, brokertest.Target(t))
	direct := b.url
	b.url = node.URL()
	b.start(shop.HandlerStockReserve, "test.probe")
	release := b.holdHandlers()
	for range faultEvents {
		env, _ := b.order(1)
		b.publishEnv(env, nil)
	}
	b.waitFor("a batch in its handlers", func() bool { return b.holding.Load() > 0 })
	fault(node)
	release()
	b.waitFor("the held batch committed", func() bool { return b.count(`SELECT count(*) FROM processed_event`) > 0 })
	return node, direct
}

// requireEachOnceAfterRestart starts b's pool again on url and requires
// every one of the faultEvents events applied once.
func (b *bundle) requireEachOnceAfterRestart(url string) {
	b.t.Helper()
	b.url = url
	b.start(shop.HandlerStockReserve, "test.probe")
	b.waitFor("every event processed after the restart", func() bool {
		return b.count(`SELECT count(*) FROM processed_event`) == faultEvents && b.queueDepth(b.queue) == 0 && b.pool.Info().InFlight == 0
	})
	require.Equal(b.t, faultEvents, b.reservations(), "each event applied once")
}
