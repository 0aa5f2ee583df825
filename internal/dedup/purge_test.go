package dedup_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
)

// seedRows inserts n rows processed age ago (by the database clock).
func (b *testBundle) seedRows(t testing.TB, n int, age time.Duration) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at)
		SELECT gen_random_uuid(), now() - make_interval(secs => $2::float8) FROM generate_series(1, $1)`,
		n, age.Seconds())
	require.NoError(t, err)
}

func TestPurgeDeletesOnlyExpiredRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	horizon := time.Hour
	b.seedRows(t, 250, horizon+2*time.Second) // expired by 2s
	b.seedRows(t, 40, horizon-2*time.Second)  // 2s inside the horizon
	b.seedRows(t, 10, time.Minute)

	dry, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: horizon, DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 250, dry.Deleted)
	require.Equal(t, 300, b.count(t, `SELECT count(*) FROM processed_event`))

	var chunks []int64
	res, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: horizon, BatchSize: 100, Pause: -1,
		OnChunkFunc: func(n int64, _ time.Duration) { chunks = append(chunks, n) }})
	require.NoError(t, err)
	require.EqualValues(t, 250, res.Deleted)
	require.Equal(t, []int64{100, 100, 50}, chunks) // chunk size honoured, stops on a short chunk
	require.Equal(t, 3, res.Chunks)
	require.Equal(t, 50, b.count(t, `SELECT count(*) FROM processed_event`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM processed_event WHERE processed_at < $1`, res.Cutoff))
	// The cutoff is the database's now() minus the horizon.
	var dbNow time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(-horizon), res.Cutoff, 5*time.Second)

	_, err = dedup.Purge(ctx, b.db, dedup.PurgeParams{})
	require.Error(t, err)
}

// A purge rests between chunks at least (1-Duty)/Duty times as long as
// the chunk took (twice as long by default), so that it takes at most its
// duty of a database backend's time from the consumers.
func TestPurgeRestsBetweenChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedRows(t, 20_000, 2*time.Hour)
	for _, duty := range []float64{0, 0.5} {
		want := 2.0 // the default duty, 1/3
		if duty > 0 {
			want = (1 - duty) / duty
		}
		type chunk struct {
			start, end time.Time
		}
		var chunks []chunk
		_, err := dedup.Purge(context.Background(), b.db, dedup.PurgeParams{Horizon: time.Hour, BatchSize: 2_000, Pause: -1, Duty: duty,
			TargetChunk: -1, OnChunkFunc: func(_ int64, took time.Duration) {
				now := time.Now()
				chunks = append(chunks, chunk{start: now.Add(-took), end: now})
			}})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(chunks), 5, "duty %v", duty)
		for i := 1; i < len(chunks); i++ {
			took := chunks[i-1].end.Sub(chunks[i-1].start)
			rest := chunks[i].start.Sub(chunks[i-1].end)
			require.GreaterOrEqual(t, rest.Seconds(), want*took.Seconds()*0.95, "duty %v: chunk %d took %s, rested %s", duty, i, took, rest)
		}
		b.seedRows(t, 20_000, 2*time.Hour)
	}
}

// Overlapping purges share the work and together delete exactly the
// expired rows.
func TestPurgeOverlappingRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedRows(t, 5000, 2*time.Hour)
	b.seedRows(t, 500, time.Minute)
	var wg sync.WaitGroup
	results := make([]dedup.PurgeResult, 3)
	for i := range results {
		wg.Go(func() {
			r, err := dedup.Purge(context.Background(), b.db, dedup.PurgeParams{Horizon: time.Hour, BatchSize: 200, Pause: -1})
			require.NoError(t, err)
			results[i] = r
		})
	}
	wg.Wait()
	var total int64
	for _, r := range results {
		total += r.Deleted
	}
	require.EqualValues(t, 5000, total)
	require.Equal(t, 500, b.count(t, `SELECT count(*) FROM processed_event`))
}

// Consumers inserting during a long purge are never blocked for the whole
// purge: each batch waits at most for about one chunk.
func TestPurgeDoesNotBlockInserts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.processor(t, "stock.reserve")
	b.seedRows(t, 60_000, 2*time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		longest time.Duration
		batches int
	)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			start := time.Now()
			rs, err := p.Process(ctx, []consumer.Event{newOrderEvent(1), newOrderEvent(1)})
			if ctx.Err() != nil {
				return
			}
			if err != nil || rs[0].Outcome != dedup.OutcomeProcessed {
				t.Errorf("process during purge: %v %v", err, rs)
				return
			}
			longest = max(longest, time.Since(start))
			batches++
		}
	}()
	res, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: time.Hour, BatchSize: 2000})
	cancel()
	<-stopped
	require.NoError(t, err)
	require.EqualValues(t, 60_000, res.Deleted)
	require.Positive(t, batches)
	total := res.LongestChunk * time.Duration(res.Chunks)
	t.Logf("purge: %d chunks, longest %s; consumer: %d batches, longest %s", res.Chunks, res.LongestChunk, batches, longest)
	// No consumer batch waited for the whole purge.
	require.Less(t, longest, total)
}

func TestNextChunkSize(t *testing.T) {
	t.Parallel()
	target := 150 * time.Millisecond
	require.Equal(t, 2400, dedup.NextChunkSize(10000, 10000, 500*time.Millisecond, target))
	require.Equal(t, 10000, dedup.NextChunkSize(10000, 10000, 10*time.Millisecond, target))
	require.Equal(t, 4000, dedup.NextChunkSize(2000, 10000, 10*time.Millisecond, target))
	require.Equal(t, 2000, dedup.NextChunkSize(2000, 10000, 100*time.Millisecond, target))
	require.Equal(t, 100, dedup.NextChunkSize(150, 10000, 10*time.Second, target))
	require.Equal(t, 50, dedup.NextChunkSize(50, 50, 10*time.Second, target))
}
