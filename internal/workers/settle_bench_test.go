package workers

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// BenchmarkPauseSettle measures how long a pause takes to settle what a
// busy pool holds (the shop's stock pool, concurrency 4, a backlog of
// twice its prefetch): the time from Pause to its return, once every
// worker has cancelled its consumer and handled its buffered deliveries.
// It runs at the former sample (batch 100, prefetch 800), at the defaults
// (batch config.BatchSizeDefault, the derived prefetch capped by
// max_unacked_bytes at the default body limit) and at the uncapped derived
// prefetch. It reports ms/pause and the deliveries settled during it.
//
//	go test -run '^$' -bench PauseSettle -benchtime 5x ./internal/workers/
func BenchmarkPauseSettle(b *testing.B) {
	defaults := config.PoolConfig{Concurrency: 4, MaxUnackedBytes: config.MaxUnackedBytesDefault,
		Prefetch: config.DerivedPrefetch(4, config.BatchSizeDefault)}
	capped, _ := defaults.PrefetchFor(config.MaxBodyBytesDefault)
	for _, c := range []struct {
		name            string
		batch, prefetch int
	}{
		{"sample-before", 100, 800},
		{"defaults", config.BatchSizeDefault, capped},
		{"uncapped", config.BatchSizeDefault, defaults.Prefetch},
	} {
		b.Run(fmt.Sprintf("%s/batch=%d/prefetch=%d", c.name, c.batch, c.prefetch), func(b *testing.B) {
			bb := newBundle(b)
			bb.cfg.Concurrency, bb.cfg.BatchSize, bb.cfg.Prefetch, bb.cfg.BatchWait = 4, c.batch, c.prefetch, 5*time.Millisecond
			p := bb.start(shop.HandlerStockReserve)
			settled := func() uint64 { i := p.Info(); return i.Processed + i.Duplicates + i.Failed }
			var spent time.Duration
			var during uint64
			for b.Loop() {
				b.StopTimer()
				_, err := p.Pause(bb.ctx, "bench", "bench")
				require.NoError(b, err)
				base := settled()
				backlog := 2 * c.prefetch
				bb.publishOrders(backlog)
				bb.waitFor("loaded", func() bool { return bb.queueDepth(bb.queue) == backlog })
				_, err = p.Resume(bb.ctx, "bench")
				require.NoError(b, err)
				// Steady state: the pool has settled a window's worth, so
				// the broker has refilled every worker's window.
				bb.waitSettled("a window settled", func() bool { return settled() >= base+uint64(c.prefetch)/2 })
				before := settled()
				b.StartTimer()
				start := time.Now()
				_, err = p.Pause(bb.ctx, "bench", "bench")
				spent += time.Since(start)
				b.StopTimer()
				require.NoError(b, err)
				during += settled() - before
				// Drain the rest for the next round.
				_, err = p.Resume(bb.ctx, "bench")
				require.NoError(b, err)
				bb.waitSettled("drained", func() bool { return settled() >= base+uint64(backlog) })
				b.StartTimer()
			}
			b.ReportMetric(float64(spent.Microseconds())/1000/float64(b.N), "ms/pause")
			b.ReportMetric(float64(during)/float64(b.N), "settled/pause")
		})
	}
}

// publishOrders queues n one-line orders, confirmed in bulk.
func (b *bundle) publishOrders(n int) {
	b.t.Helper()
	bodies := make([][]byte, n)
	for i := range bodies {
		env, _ := b.order(1)
		body, err := envelope.Encode(env)
		require.NoError(b.t, err)
		bodies[i] = body
	}
	b.publishBulk(shop.EventOrderPlaced, bodies)
}

// publishBulk publishes bodies with routingKey through the exchange, then
// waits for every confirm.
func (b *bundle) publishBulk(routingKey string, bodies [][]byte) {
	b.t.Helper()
	confirms := make([]*amqp.DeferredConfirmation, 0, len(bodies))
	for _, body := range bodies {
		dc, err := b.pubCh.PublishWithDeferredConfirmWithContext(b.ctx, b.exchange, routingKey, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(b.t, err)
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(b.ctx)
		require.NoError(b.t, err)
		require.True(b.t, ok)
	}
}
