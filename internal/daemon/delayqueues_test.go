package daemon

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// ListDelayQueues reports the shared delay queue of each distinct delay of
// the daemon's pools, shortest first, with the retries waiting in it and
// the pools using it; a queue gone from the broker is listed with why its
// depth is unknown.
func TestListDelayQueuesReportsDepths(t *testing.T) {
	t.Parallel()
	// Delays no other test uses: the test owns their shared queues.
	off := time.Duration(1+rand.IntN(998)) * time.Millisecond
	short, long := 3*time.Hour+off, 4*time.Hour+off
	e := newReloadEnv(t, testdb.New(t, "delay_queues"))
	pools := e.poolYAML("stock-events", "stock", shop.EventOrderPlaced, shop.HandlerStockReserve, fmt.Sprintf("        retry: {delays: [%s, %s]}\n", short, long)) +
		e.poolYAML("stock-other", "status", shop.EventOrderStatusChanged, shop.HandlerShippingTrack, fmt.Sprintf("        retry: {delays: [%s]}\n", long))
	require.NoError(t, os.WriteFile(e.path, []byte(fmt.Sprintf(`admin: {listen: %s}
metrics: {listen: "-"}
broker: {url: %q, exchange: reload.%s}
services:
%s`, e.admin, e.broker, e.suffix, serviceYAML("stock", e.dsn, pools))), 0o600))
	d := e.start(t)
	defer d.Stop()

	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	t.Cleanup(func() {
		// On a connection of its own: the test's is closed by now.
		conn, err := amqp.Dial(e.broker)
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		require.NoError(t, err)
		for _, d := range []time.Duration{short, long} {
			_, err := ch.QueueDelete(broker.DelayQueue(d), false, false, false)
			require.NoError(t, err)
			require.NoError(t, ch.ExchangeDelete(broker.DelayQueue(d), false, false))
		}
	})
	ctx := context.Background()
	for range 3 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, broker.DelayQueue(short), "reload.stock."+e.suffix, true, false, amqp.Publishing{Body: []byte("{}")})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	b := &backend{d: d}
	got, err := b.ListDelayQueues(ctx)
	require.NoError(t, err)
	require.Equal(t, []admin.DelayQueueInfo{
		{Name: broker.DelayQueue(short), Delay: short, Messages: 3, Pools: []string{"stock-events"}},
		{Name: broker.DelayQueue(long), Delay: long, Pools: []string{"stock-events", "stock-other"}},
	}, got)

	// Gone from the broker: a pool's session that starts late declares
	// it again, so delete it until none does.
	require.Eventually(t, func() bool {
		_, err = ch.QueueDelete(broker.DelayQueue(long), false, false, false)
		require.NoError(t, err)
		got, err = b.ListDelayQueues(ctx)
		require.NoError(t, err)
		return got[1].Error == "queue not declared yet"
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, int64(3), got[0].Messages, "the other queue is still read")
}
