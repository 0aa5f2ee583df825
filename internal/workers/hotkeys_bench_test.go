package workers

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// BenchmarkHotKeys drains the same number of order status changes
// (shipping.track_status, the sample's shipping pool: concurrency 2) spread
// over 60 orders (hot: 100 versions each) and over as many orders as events
// (uniform), with and without partition_key: /order_id, at the former
// ceiling (batch 100, prefetch 400) and at the defaults (batch
// config.BatchSizeDefault, prefetch derived). It reports events/s and the
// deadlocks PostgreSQL counted in the service database during the drains.
//
//	go test -run '^$' -bench HotKeys -benchtime 3x ./internal/workers/
func BenchmarkHotKeys(b *testing.B) {
	const events = 6000
	for _, size := range []int{100, config.BatchSizeDefault} {
		for _, partition := range []string{"", "/order_id"} {
			for _, orders := range []int{events, 60} {
				benchmarkHotKeys(b, events, size, orders, partition)
			}
		}
	}
}

// benchmarkHotKeys is one case of BenchmarkHotKeys.
func benchmarkHotKeys(b *testing.B, events, size, orders int, partition string) {
	name := fmt.Sprintf("batch=%d/orders=%d/partition_key=%q", size, orders, partition)
	b.Run(name, func(b *testing.B) {
		bb := newBundle(b)
		bb.cfg.Bindings = []string{shop.EventOrderStatusChanged}
		bb.cfg.Concurrency, bb.cfg.BatchSize, bb.cfg.BatchWait = 2, size, 5*time.Millisecond
		bb.cfg.Prefetch = config.DerivedPrefetch(2, size)
		bb.cfg.PartitionKey = partition
		p := bb.start(shop.HandlerShippingTrack)
		p.testSignals.BatchSettled.InitTimeout(b, 10*time.Minute) // a drain's bound
		deadlocks := func() int {
			return bb.count(`SELECT deadlocks::int FROM pg_stat_database WHERE datname = current_database()`)
		}
		before := deadlocks()
		var drained time.Duration
		for b.Loop() {
			b.StopTimer()
			_, err := p.Pause(bb.ctx, "bench", "bench")
			require.NoError(b, err)
			settled := func() uint64 { i := p.Info(); return i.Processed + i.Duplicates + i.Failed }
			done := settled()
			bb.publishStatuses(orders, events)
			bb.waitFor("loaded", func() bool { return bb.queueDepth(bb.queue) == events })
			b.StartTimer()
			start := time.Now()
			_, err = p.Resume(bb.ctx, "bench")
			require.NoError(b, err)
			p.testSignals.BatchSettled.WaitUntil("drained", func() bool { return settled() >= done+uint64(events) })
			drained += time.Since(start)
		}
		b.ReportMetric(float64(events*b.N)/drained.Seconds(), "events/s")
		b.ReportMetric(float64(deadlocks()-before), "deadlocks")
		info := p.Info()
		b.ReportMetric(float64(info.Retried)/float64(b.N), "retried/op")
		b.ReportMetric(float64(info.Failed)/float64(b.N), "failed/op")
	})
}

// publishStatuses queues events status changes over orders orders: version
// v of every order, then v+1, so each order's changes come in version
// order, interleaved with the others'. Publishes are confirmed in bulk.
func (b *bundle) publishStatuses(orders, events int) {
	b.t.Helper()
	ids := make([]uuid.UUID, orders)
	for i := range ids {
		ids[i] = uuid.New()
	}
	bodies := make([][]byte, events)
	for i := range bodies {
		payload, err := json.Marshal(shop.OrderStatusChanged{OrderID: ids[i%orders], Status: fmt.Sprintf("s%d", i/orders+1), Version: int32(i/orders + 1)})
		require.NoError(b.t, err)
		bodies[i], err = envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderStatusChanged,
			OccurredAt: time.Now().UTC(), Payload: payload})
		require.NoError(b.t, err)
	}
	b.publishBulk(shop.EventOrderStatusChanged, bodies)
}
