package dedup_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// BenchmarkProcess measures events/s through the dedup step with the stock
// handler (1 line per order), per batch size. Run with
// go test -run '^$' -bench Process ./internal/dedup/, and with
// -tags platformd_nodedup for the same without the dedup insert.
func BenchmarkProcess(b *testing.B) {
	tb := setup(b)
	routes, err := dedup.RoutesFor(tb.reg, []string{shop.HandlerStockReserve})
	require.NoError(b, err)
	for _, size := range []int{1, 10, 100, 500} {
		name := fmt.Sprintf("batch=%d/dedup=%v", size, !dedup.SkipsDedupInsert())
		b.Run(name, func(b *testing.B) {
			p := dedup.NewProcessor(tb.db, dedup.ProcessorConfig{Routes: routes})
			batch := make([]consumer.Event, size)
			ctx := context.Background()
			b.ResetTimer()
			events := 0
			for b.Loop() {
				b.StopTimer()
				for i := range batch {
					batch[i] = orderEvent(b, 1)
				}
				b.StartTimer()
				if _, err := p.Process(ctx, batch); err != nil {
					b.Fatal(err)
				}
				events += size
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
