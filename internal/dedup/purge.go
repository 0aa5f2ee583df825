package dedup

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
)

// Purge defaults.
const (
	PurgeChunkTimeoutDefault = 10 * time.Second
	PurgePauseDefault        = 20 * time.Millisecond
	// PurgeTargetChunkDefault is the chunk duration Purge aims under: a
	// chunk holds row locks and competes with consumers for I/O, so its
	// size adapts to stay below this whatever the table's size and the
	// machine's load.
	PurgeTargetChunkDefault = 150 * time.Millisecond
	// PurgeDutyDefault is the most of its time a purge spends in chunks:
	// after a chunk it rests at least twice as long as the chunk took. On
	// a 2-core machine whose consumers keep it busy, a purge resting only
	// the 20 ms pause took 29% of the consumers' throughput (84,050 events/s
	// before, 59,996 during); a third of the time, about half of that.
	PurgeDutyDefault = 1.0 / 3
	purgeMinChunk    = 100
)

// PurgeParams configures Purge.
type PurgeParams struct {
	// Horizon: rows processed before now()-Horizon, by the database clock,
	// are deleted. Must be positive.
	Horizon time.Duration
	// BatchSize is the most rows deleted per chunk (default
	// config.PurgeBatchSizeDefault). The chunk shrinks when a chunk takes
	// longer than TargetChunk and grows back up to BatchSize when chunks
	// are fast.
	BatchSize int
	// TargetChunk is the chunk duration to stay under (default
	// PurgeTargetChunkDefault; -1 keeps every chunk at BatchSize).
	TargetChunk time.Duration
	// ChunkTimeout bounds each chunk's transaction (default 10s); it is set
	// as the chunk's statement_timeout too.
	ChunkTimeout time.Duration
	// Pause is the shortest sleep between chunks, jittered by up to 50%
	// (default 20ms; -1 for none).
	Pause time.Duration
	// Duty is the most of its time the purge spends in chunks, in (0, 1]:
	// after a chunk that took d it sleeps at least d*(1-Duty)/Duty
	// (default PurgeDutyDefault; 1: only Pause).
	Duty float64
	// DryRun counts the rows that would go and deletes nothing.
	DryRun bool
	// OnChunkFunc, when set, is called after each chunk with its row count and
	// duration (metrics, tests); for a partitioned table a chunk is a
	// partition dropped.
	OnChunkFunc func(deleted int64, took time.Duration)
	// Ahead is, for a partitioned table, the days of partitions each run
	// keeps created after today's (default config.PartitionsAheadDefault).
	Ahead int
}

// PurgeResult reports a purge.
type PurgeResult struct {
	// Cutoff is now()-Horizon as computed by the database at the start.
	Cutoff time.Time
	// Deleted is the rows deleted (or, for a dry run, that would be).
	Deleted int64
	// Chunks is the number of chunk transactions run.
	Chunks int
	// LongestChunk is the longest chunk's duration.
	LongestChunk time.Duration
	// HorizonInForce is the horizon applied: Horizon, rounded up to whole
	// partitions for a partitioned table (see HorizonInForce).
	HorizonInForce time.Duration
}

// Purge deletes processed_event rows older than the horizon in chunks of
// BatchSize rows, each chunk its own short transaction, until a chunk comes
// back short. The cutoff is computed once, by the database clock, so that
// no daemon's clock can shorten a horizon. Safe to run concurrently with
// itself and with consumers. A partitioned processed_event (read from the
// catalog at every run) is purged by dropping its expired partitions
// instead (see purgePartitions).
func Purge(ctx context.Context, db dbpool.DB, p PurgeParams) (PurgeResult, error) {
	res := PurgeResult{HorizonInForce: p.Horizon}
	if p.Horizon <= 0 {
		return res, fmt.Errorf("dedup: purge: horizon must be positive, got %s", p.Horizon)
	}
	layout, err := DetectLayout(ctx, db)
	if err != nil {
		return res, fmt.Errorf("dedup: purge: %w", err)
	}
	res.HorizonInForce = HorizonInForce(layout, p.Horizon)
	if res.Cutoff, err = purgeCutoff.One(ctx, db, purgeCutoffParams{Horizon: res.HorizonInForce}); err != nil {
		return res, fmt.Errorf("dedup: purge: cutoff: %w", err)
	}
	if layout == LayoutPartitioned {
		return purgePartitions(ctx, db, p, res)
	}
	batch := cmp.Or(p.BatchSize, config.PurgeBatchSizeDefault)
	chunkTimeout := cmp.Or(p.ChunkTimeout, PurgeChunkTimeoutDefault)
	pause := cmp.Or(p.Pause, PurgePauseDefault)
	target := cmp.Or(p.TargetChunk, PurgeTargetChunkDefault)
	duty := cmp.Or(p.Duty, PurgeDutyDefault)
	size := batch
	from := time.Time{} // keyset: where the next chunk's index scan starts

	if p.DryRun {
		if res.Deleted, err = countPurgeable.One(ctx, db, countPurgeableParams{Cutoff: res.Cutoff}); err != nil {
			return res, fmt.Errorf("dedup: purge dry run: %w", err)
		}
		return res, nil
	}
	for {
		start := time.Now()
		n, last, err := runPurgeChunk(ctx, db, from, res.Cutoff, size, chunkTimeout)
		took := time.Since(start)
		if err != nil {
			return res, fmt.Errorf("dedup: purge chunk %d: %w", res.Chunks+1, err)
		}
		res.Chunks++
		res.Deleted += n
		if last != nil {
			// Rows at exactly last that this chunk's LIMIT left are >= it.
			from = *last
		}
		res.LongestChunk = max(res.LongestChunk, took)
		if p.OnChunkFunc != nil {
			p.OnChunkFunc(n, took)
		}
		if n < int64(size) {
			return res, nil
		}
		if target > 0 {
			size = nextChunkSize(size, batch, took, target)
		}
		rest := max(pause, 0)
		if rest > 0 {
			rest += time.Duration(rand.Int64N(int64(rest)/2 + 1))
		}
		if duty > 0 && duty < 1 {
			rest = max(rest, time.Duration(float64(took)*(1-duty)/duty))
		}
		if rest > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(rest):
			}
		}
	}
}

func runPurgeChunk(ctx context.Context, db dbpool.DB, from, cutoff time.Time, batch int, timeout time.Duration) (int64, *time.Time, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The transaction itself runs under a context ctx does not cancel: a
	// chunk whose DELETE finished is committed even if ctx ends now. A
	// commit cut short by a cancellation may still have committed on the
	// server, and the run would then record fewer rows than it deleted.
	// Its statements run under tctx, so a cancellation stops a chunk in
	// progress (and the transaction helper rolls it back).
	txCtx, txCancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer txCancel()
	c, err := dbutil.WithTxV(txCtx, db, dbutil.ReadCommitted, func(_ context.Context, tx pgx.Tx) (purgeChunkRow, error) {
		if _, err := setStatementTimeout.Run(tctx, tx, statementTimeoutParams{Timeout: timeout, Local: true}); err != nil {
			return purgeChunkRow{}, err
		}
		return purgeChunk.One(tctx, tx, purgeChunkParams{From: from, Cutoff: cutoff, Limit: batch})
	})
	return c.N, c.Last, err
}

// nextChunkSize scales the chunk so the next one takes about target: down
// in proportion when a chunk was slow, doubling back towards max when it
// was fast.
func nextChunkSize(size, maxSize int, took, target time.Duration) int {
	switch {
	case took > target:
		size = int(float64(size) * float64(target) / float64(took) * 0.8)
	case took < target/2:
		size *= 2
	}
	return min(max(size, min(purgeMinChunk, maxSize)), maxSize)
}
