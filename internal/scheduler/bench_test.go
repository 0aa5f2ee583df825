package scheduler_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/scheduler"
)

// purgeBenchRowsDefault keeps BenchmarkPurge short. The figure for the
// issue is taken with PURGE_BENCH_ROWS=1000000:
//
//	PURGE_BENCH_ROWS=1000000 go test -run '^$' -bench Purge -benchtime 1x ./internal/scheduler/
//	PURGE_BENCH_ROWS=1000000 go test -run TestPurgeConsumerThroughput -v ./internal/scheduler/
const purgeBenchRowsDefault = 200_000

func purgeBenchRows(t testing.TB) int {
	t.Helper()
	v := os.Getenv("PURGE_BENCH_ROWS")
	if v == "" {
		return purgeBenchRowsDefault
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "PURGE_BENCH_ROWS")
	require.Positive(t, n, "PURGE_BENCH_ROWS")
	return n
}

// seedBench empties processed_event, then inserts n rows expired for an
// hour (horizon 1h) and n live rows, and analyzes the table as autovacuum
// would have.
func (b *testBundle) seedBench(t testing.TB, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := b.db.Exec(ctx, `TRUNCATE processed_event`)
	require.NoError(t, err)
	// In slices, each well under the session's statement timeout.
	for left := n; left > 0; left -= 100_000 {
		b.seed(t, min(left, 100_000), 2*time.Hour)
		b.seed(t, min(left, 100_000), time.Minute)
	}
	_, err = b.db.Exec(ctx, `VACUUM ANALYZE processed_event`)
	require.NoError(t, err)
}

// BenchmarkPurge measures the purge of N expired rows beside N live ones
// (N from PURGE_BENCH_ROWS, default 200000) with the scheduler's defaults:
// 10000-row chunks, each under a 5s timeout, 20ms (+ jitter) between
// chunks. It reports rows deleted per second (pauses included) and the
// longest chunk, the longest a consumer's insert can wait on the purge.
func BenchmarkPurge(b *testing.B) {
	n := purgeBenchRows(b)
	tb := setup(b)
	ctx := context.Background()
	var (
		deleted int64
		longest time.Duration
		chunks  int
	)
	for b.Loop() {
		b.StopTimer()
		tb.seedBench(b, n)
		b.StartTimer()
		res, err := dedup.Purge(ctx, tb.db, dedup.PurgeParams{
			Horizon:      time.Hour,
			BatchSize:    config.PurgeBatchSizeDefault,
			ChunkTimeout: scheduler.ChunkTimeoutDefault,
			Pause:        dedup.PurgePauseDefault,
		})
		require.NoError(b, err)
		require.EqualValues(b, n, res.Deleted)
		deleted += res.Deleted
		longest = max(longest, res.LongestChunk)
		chunks += res.Chunks
	}
	b.ReportMetric(float64(deleted)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-chunk-ms")
	b.ReportMetric(float64(chunks)/float64(b.N), "chunks/op")
}

// TestPurgeConsumerThroughput measures what a purge of N expired rows (N
// live beside them) costs the consumers of the same database: events/s of
// 4 concurrent dedup.Processor workers (batches of 100 stock.reserve
// events) while the purge runs through Scheduler.RunNow, against the same
// workers without purge, before and after. Set PURGE_BENCH_ROWS to run it.
func TestPurgeConsumerThroughput(t *testing.T) {
	if os.Getenv("PURGE_BENCH_ROWS") == "" {
		t.Skip("set PURGE_BENCH_ROWS to measure consumer throughput during a purge")
	}
	n := purgeBenchRows(t)
	b := setup(t, shop.HandlerStockReserve)
	ctx := context.Background()
	b.seedBench(t, n)

	routes, err := dedup.RoutesFor(b.reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	consumers := b.pool(t, 8)
	p := dedup.NewProcessor(consumers, dedup.ProcessorConfig{Routes: routes})
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{{
		Name: "stock", DB: b.pool(t, 4), DefaultHorizon: time.Hour, MinHorizon: time.Minute, Every: -1,
	}}})

	const workers, batchSize = 4, 100
	// consume runs the workers until stop is closed and returns the events
	// processed and the batch latencies.
	consume := func(stop <-chan struct{}) (int64, []time.Duration) {
		var (
			events    atomic.Int64
			mu        sync.Mutex
			latencies []time.Duration
			wg        sync.WaitGroup
		)
		for range workers {
			wg.Go(func() {
				batch := make([]consumer.Event, batchSize)
				var mine []time.Duration
				for {
					select {
					case <-stop:
						mu.Lock()
						latencies = append(latencies, mine...)
						mu.Unlock()
						return
					default:
					}
					for i := range batch {
						batch[i] = benchEvent(t)
					}
					start := time.Now()
					rs, err := p.Process(ctx, batch)
					if err != nil || rs[0].Outcome != dedup.OutcomeProcessed {
						t.Errorf("process: %v", err)
						return
					}
					mine = append(mine, time.Since(start))
					events.Add(batchSize)
				}
			})
		}
		wg.Wait()
		return events.Load(), latencies
	}
	baseline := func(d time.Duration) (float64, []time.Duration) {
		stop := make(chan struct{})
		time.AfterFunc(d, func() { close(stop) })
		start := time.Now()
		ev, lat := consume(stop)
		return float64(ev) / time.Since(start).Seconds(), lat
	}

	before, latBefore := baseline(5 * time.Second)

	stop := make(chan struct{})
	type result struct {
		events  int64
		lat     []time.Duration
		elapsed time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		ev, lat := consume(stop)
		done <- result{ev, lat, time.Since(start)}
	}()
	run, err := s.RunNow(ctx, "stock", false, "bench")
	close(stop)
	during := <-done
	require.NoError(t, err)
	require.EqualValues(t, n, run.Deleted)
	purgeTook := run.FinishedAt.Sub(run.StartedAt)

	after, latAfter := baseline(5 * time.Second)

	duringRate := float64(during.events) / during.elapsed.Seconds()
	base := (before + after) / 2
	t.Logf("purge of %d expired rows (%d live) through RunNow: %s, %.0f rows/s", n, n, purgeTook,
		float64(n)/purgeTook.Seconds())
	t.Logf("consumers (%d workers x %d-event batches): before %.0f events/s (p99 batch %s), during purge %.0f events/s (p99 %s, max %s), after %.0f events/s (p99 %s)",
		workers, batchSize, before, p99(latBefore), duringRate, p99(during.lat), slices.Max(during.lat), after, p99(latAfter))
	t.Logf("throughput ratio during/without purge: %.2f", duringRate/base)
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func benchEvent(t testing.TB) consumer.Event {
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(),
		Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "2.000"}}}
	payload, err := json.Marshal(o)
	require.NoError(t, err)
	return consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, OccurredAt: time.Now(), Payload: payload}
}
