package dedup_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

var (
	scaleRows    = flag.Int("scale.rows", 200_000, "BenchmarkPurgeAtScale: processed_event rows loaded, half of them expired (docs/performance.md: 10,000,000)")
	scaleWindow  = flag.Duration("scale.window", 10*time.Second, "BenchmarkPurgeAtScale: the consumers' baseline window, and the shortest window measured from the purge's start")
	scaleWorkers = flag.Int("scale.workers", 4, "BenchmarkPurgeAtScale: consumers running Process in batches of -scale.batch while the purge runs")
	scaleBatch   = flag.Int("scale.batch", config.BatchSizeDefault, "BenchmarkPurgeAtScale: the consumers' batch size (default: a pool's default batch.size, the ceiling a backlog fills)")
)

// scaleResult is one purge at scale, measured while consumers run.
type scaleResult struct {
	mode                  string
	loaded, deleted       int64
	chunks                int
	purge                 time.Duration
	baseline, during      float64 // consumers' events/s before and during the purge
	after                 float64 // and in a window after it
	stallBase, stallPurge time.Duration
	walPurge, walVacuum   int64 // bytes
	walRateBase           float64
}

// consumers runs workers goroutines applying batches of -scale.batch fresh shop
// orders (10% copies of recent ones) through p until stop, counting
// events and each Process call's latency.
type consumers struct {
	events  atomic.Int64
	mu      sync.Mutex
	maxWait time.Duration
	wg      sync.WaitGroup
	stop    chan struct{}
	errs    chan error
}

func startConsumers(p *dedup.Processor, workers int) *consumers {
	c := &consumers{stop: make(chan struct{}), errs: make(chan error, workers)}
	for w := range workers {
		c.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var recent []consumer.Event
			batch := make([]consumer.Event, *scaleBatch)
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				for i := range batch {
					if len(recent) > 0 && rng.IntN(10) == 0 {
						batch[i] = recent[rng.IntN(len(recent))]
						continue
					}
					batch[i] = newOrderEvent(1)
					if len(recent) < 1000 {
						recent = append(recent, batch[i])
					} else {
						recent[rng.IntN(len(recent))] = batch[i]
					}
				}
				start := time.Now()
				if _, err := p.Process(context.Background(), batch); err != nil {
					c.errs <- err
					return
				}
				took := time.Since(start)
				c.events.Add(int64(len(batch)))
				c.mu.Lock()
				c.maxWait = max(c.maxWait, took)
				c.mu.Unlock()
			}
		})
	}
	return c
}

// window returns the events and the longest Process call since the last
// call.
func (c *consumers) window() (int64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.maxWait
	c.maxWait = 0
	return c.events.Swap(0), w
}

func (c *consumers) close(tb testing.TB) {
	close(c.stop)
	c.wg.Wait()
	select {
	case err := <-c.errs:
		tb.Fatalf("consumer: %v", err)
	default:
	}
}

// runPurgeScale loads rows processed_event rows (half expired: their ids
// and processed_at from 4 to 2 days ago, wholly older than a 48h horizon;
// half of the last day), starts the consumers, measures them for the
// window, then purges with the product's Purge (chunked DELETE on the
// plain table, partition drop on the partitioned one) and measures them
// during the purge (at least the window). Then it loads the expired half
// again and purges it with the consumers stopped, for the purge's WAL
// (pg_current_wal_lsn() difference; other databases on the server write
// too: noise), and the WAL of the VACUUM after it (a DELETE leaves dead
// rows to vacuum, a drop does not).
func runPurgeScale(tb testing.TB, rows int, partitioned bool, window time.Duration, workers int) scaleResult {
	tb.Helper()
	ctx := context.Background()
	res := scaleResult{mode: "delete"}
	if partitioned {
		res.mode = "partitions"
	}
	reg := consumer.NewRegistry()
	require.NoError(tb, shop.Register(reg))
	dsn := testdb.New(tb, "scale_"+res.mode)
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve})
	require.NoError(tb, err)
	require.NoError(tb, migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: int32(workers + 4), StatementTimeout: time.Hour})
	require.NoError(tb, err)
	defer db.Close()
	var now time.Time
	require.NoError(tb, db.QueryRow(ctx, `SELECT now()`).Scan(&now))
	today := now.UTC().Truncate(24 * time.Hour)
	if partitioned {
		require.NoError(tb, dedup.EnsureLayout(ctx, db, dedup.LayoutPartitioned, 48*time.Hour, 3))
		_, err := dedup.EnsurePartitions(ctx, db, today.Add(-4*24*time.Hour), now)
		require.NoError(tb, err)
	}
	// v7 ids made in SQL: a random v4 with the time's milliseconds in its
	// first 48 bits and version 7.
	const load = `INSERT INTO processed_event (event_id, processed_at)
		SELECT encode(set_byte(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM t) * 1000)::int8) FROM 3) FROM 1 FOR 6),
			6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid, t
		FROM (SELECT $1::timestamptz + (random() * $2::float8) * interval '1 second' AS t FROM generate_series(1, $3)) s`
	half := rows / 2
	expiredFrom := today.Add(-4 * 24 * time.Hour)
	fill := func(from time.Time, span time.Duration) {
		for done := 0; done < half; done += 1_000_000 {
			_, err := db.Exec(ctx, load, from, span.Seconds(), min(1_000_000, half-done))
			require.NoError(tb, err)
		}
	}
	settle := func() {
		_, err := db.Exec(ctx, `VACUUM (ANALYZE) processed_event`)
		require.NoError(tb, err)
		_, err = db.Exec(ctx, `CHECKPOINT`)
		require.NoError(tb, err)
	}
	fill(expiredFrom, 2*24*time.Hour-time.Second)
	fill(now.Add(-24*time.Hour), 24*time.Hour-time.Minute)
	res.loaded = int64(2 * half)
	settle()

	routes, err := dedup.RoutesFor(reg, []string{shop.HandlerStockReserve})
	require.NoError(tb, err)
	c := startConsumers(dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: routes}), workers)
	defer func() {
		if c != nil {
			c.close(tb)
		}
	}()
	lsn := func() int64 {
		var l int64
		require.NoError(tb, db.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&l))
		return l
	}
	time.Sleep(window / 5) //nolint:forbidigo // warm-up, not counted
	c.window()
	w0, t0 := lsn(), time.Now()
	time.Sleep(window) //nolint:forbidigo // a measurement window: its length, not a wait
	n, stall := c.window()
	res.walRateBase = float64(lsn()-w0) / time.Since(t0).Seconds()
	res.baseline, res.stallBase = float64(n)/time.Since(t0).Seconds(), stall

	t0 = time.Now()
	pr, err := dedup.Purge(ctx, db, dedup.PurgeParams{Horizon: 48 * time.Hour})
	require.NoError(tb, err)
	res.purge = time.Since(t0)
	res.deleted, res.chunks = pr.Deleted, pr.Chunks
	if rest := window - res.purge; rest > 0 {
		time.Sleep(rest) //nolint:forbidigo // the rest of the measurement window
	}
	n, stall = c.window()
	res.during, res.stallPurge = float64(n)/time.Since(t0).Seconds(), stall
	// A window after the purge too: the kept ratio is judged against the
	// mean of the windows before and after, and after/before is the
	// machine's own drift (the noise of the ratio).
	t0 = time.Now()
	time.Sleep(window) //nolint:forbidigo // a measurement window: its length, not a wait
	n, _ = c.window()
	res.after = float64(n) / time.Since(t0).Seconds()
	c.close(tb)
	c = nil

	// The WAL, measured apart: the same expired half loaded again and
	// purged with nothing else of ours writing (the consumers' own WAL,
	// gigabytes over a DELETE purge, would bury it).
	if partitioned {
		_, err := dedup.EnsurePartitions(ctx, db, expiredFrom, expiredFrom.Add(24*time.Hour))
		require.NoError(tb, err)
	}
	fill(expiredFrom, 2*24*time.Hour-time.Second)
	settle()
	w0 = lsn()
	_, err = dedup.Purge(ctx, db, dedup.PurgeParams{Horizon: 48 * time.Hour})
	require.NoError(tb, err)
	res.walPurge = lsn() - w0
	w0 = lsn()
	_, err = db.Exec(ctx, `VACUUM processed_event`)
	require.NoError(tb, err)
	res.walVacuum = lsn() - w0
	return res
}

// kept is the consumers' throughput during the purge over the mean of the
// windows before and after it.
func (r scaleResult) kept() float64 { return r.during / ((r.baseline + r.after) / 2) }

func (r scaleResult) String() string {
	return fmt.Sprintf("%s: %d rows loaded, %d purged in %.2fs (%.0f rows/s, %d chunks), consumers %.0f -> %.0f -> %.0f events/s before, during, after (kept %.2f of before and after; after/before %.2f), longest Process %.0f ms (baseline %.0f ms), WAL of the purge alone %.2f MiB (the consumers write %.1f MiB/s), VACUUM after it %.2f MiB",
		r.mode, r.loaded, r.deleted, r.purge.Seconds(), float64(r.deleted)/r.purge.Seconds(), r.chunks, r.baseline, r.during, r.after, r.kept(), r.after/r.baseline,
		float64(r.stallPurge.Milliseconds()), float64(r.stallBase.Milliseconds()), float64(r.walPurge)/(1<<20), r.walRateBase/(1<<20), float64(r.walVacuum)/(1<<20))
}

// BenchmarkPurgeAtScale compares the purges of 5M expired rows out of 10M
// (go test -run '^$' -bench PurgeAtScale -scale.rows 10000000 -timeout 2h
// ./internal/dedup/; the default is a small run) while consumers apply
// batches at full speed: chunked DELETE on the plain table against
// partition drop. Each mode gets a fresh database; one measure per mode.
func BenchmarkPurgeAtScale(b *testing.B) {
	for _, partitioned := range []bool{false, true} {
		name := map[bool]string{false: "delete", true: "partitions"}[partitioned]
		b.Run(name, func(b *testing.B) {
			var r scaleResult
			for b.Loop() {
				r = runPurgeScale(b, *scaleRows, partitioned, *scaleWindow, *scaleWorkers)
			}
			b.Log(r)
			b.ReportMetric(float64(r.deleted)/r.purge.Seconds(), "rows/s")
			b.ReportMetric(r.kept(), "kept")
			b.ReportMetric(float64(r.stallPurge.Milliseconds()), "stall-ms")
			b.ReportMetric(float64(r.walPurge)/(1<<20), "WAL-MiB")
			b.ReportMetric(float64(r.walVacuum)/(1<<20), "vacuum-WAL-MiB")
		})
	}
}

// TestPurgeAtScaleSmall runs the scale benchmark's code on a small table:
// both purges remove the expired half, the consumers keep going, and the
// partition drop writes less WAL than the DELETE and leaves VACUUM
// nothing to clean.
func TestPurgeAtScaleSmall(t *testing.T) {
	t.Parallel()
	del := runPurgeScale(t, 20_000, false, time.Second, 2)
	part := runPurgeScale(t, 20_000, true, time.Second, 2)
	t.Log(del)
	t.Log(part)
	require.EqualValues(t, 10_000, del.deleted)
	require.InDelta(t, 10_000, part.deleted, 500, "reltuples after VACUUM ANALYZE")
	require.Equal(t, 2, part.chunks, "two whole days expired")
	require.Positive(t, del.during)
	require.Positive(t, part.during)
	require.Less(t, part.walPurge, del.walPurge)
}
