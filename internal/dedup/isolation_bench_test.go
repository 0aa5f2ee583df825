package dedup_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// BenchmarkProcessOneFailure measures what one failing event costs its
// batch: a batch whose middle event's handler fails with an SQL error
// (which aborts the transaction) is rolled back and replayed event by
// event, a savepoint each, against the same batch without a failure. It
// reports ms per batch; the difference is the failure-isolation replay's
// cost at that batch.size, which is what a larger ceiling risks.
//
//	go test -run '^$' -bench ProcessOneFailure -benchtime 20x ./internal/dedup/
func BenchmarkProcessOneFailure(b *testing.B) {
	tb := setup(b)
	routes, err := dedup.RoutesFor(tb.reg, []string{shop.HandlerStockReserve, "test.flaky"})
	require.NoError(b, err)
	for _, size := range []int{100, 1000} {
		for _, failing := range []bool{false, true} {
			b.Run(fmt.Sprintf("batch=%d/failing=%v", size, failing), func(b *testing.B) {
				p := dedup.NewProcessor(tb.db, dedup.ProcessorConfig{Routes: routes})
				batch := make([]consumer.Event, size)
				ctx := context.Background()
				var spent time.Duration
				for b.Loop() {
					b.StopTimer()
					for i := range batch {
						batch[i] = orderEvent(b, 1)
					}
					bad := batch[size/2].ID
					if failing {
						tb.sqlFailOn.Store(bad, true)
					}
					b.StartTimer()
					start := time.Now()
					rs, err := p.Process(ctx, batch)
					spent += time.Since(start)
					b.StopTimer()
					require.NoError(b, err)
					if failing {
						require.Equal(b, dedup.OutcomeFailed, rs[size/2].Outcome)
						require.Equal(b, dedup.OutcomeProcessed, rs[0].Outcome)
						tb.sqlFailOn.Delete(bad)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(spent.Milliseconds())/float64(b.N), "ms/batch")
			})
		}
	}
}
