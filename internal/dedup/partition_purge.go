package dedup

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
)

// PartitionDetachTimeoutDefault bounds a DETACH PARTITION CONCURRENTLY:
// it waits for every transaction that may still see the partition, which
// the consumers' short batches keep brief; past the bound the detach is
// left pending and the next purge finalizes it.
const PartitionDetachTimeoutDefault = time.Minute

// purgePartitions is Purge for a partitioned processed_event: every
// partition whose ids are all older than the cutoff (now() minus the
// horizon in force, by the database clock) is detached CONCURRENTLY and
// dropped; a detach left pending by an interrupted run is finalized
// first; then the partitions of the days ahead are created. Deleted counts
// the rows of the partitions dropped (pg_class.reltuples once the table
// was analyzed, else an exact count); Chunks counts the partitions. res
// comes with the horizon in force and the cutoff, from Purge.
func purgePartitions(ctx context.Context, db dbpool.DB, p PurgeParams, res PurgeResult) (PurgeResult, error) {
	// DETACH ... CONCURRENTLY cannot run in a transaction block, so the
	// lock is a session lock, on a connection held for the run and closed
	// rather than returned to the pool if the unlock fails.
	conn, err := db.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("dedup: purge partitions: %w", err)
	}
	locked := false
	defer func() {
		if !locked {
			conn.Release()
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbutil.RollbackTimeout)
		defer cancel()
		if _, err := unlockPartitionsSession.Run(uctx, conn, query.NoParams{}); err != nil {
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()
	if _, err := lockPartitionsSession.Run(ctx, conn, query.NoParams{}); err != nil {
		return res, fmt.Errorf("dedup: purge partitions: lock: %w", err)
	}
	locked = true
	c := conn.Conn()
	if err := dropDetached(ctx, c, res.Cutoff, p.DryRun, &res); err != nil {
		return res, err
	}
	parts, err := ListPartitions(ctx, c)
	if err != nil {
		return res, err
	}
	detachTimeout := cmp.Or(p.ChunkTimeout, PartitionDetachTimeoutDefault)
	for _, part := range parts {
		if part.To.After(res.Cutoff) {
			continue
		}
		start := time.Now()
		n, err := partitionRows(ctx, c, part.Name)
		if err != nil {
			return res, err
		}
		if !p.DryRun {
			if err := dropPartition(ctx, c, part, detachTimeout); err != nil {
				return res, err
			}
		}
		took := time.Since(start)
		res.Deleted += n
		res.Chunks++
		res.LongestChunk = max(res.LongestChunk, took)
		if p.OnChunkFunc != nil && !p.DryRun {
			p.OnChunkFunc(n, took)
		}
	}
	if p.DryRun {
		return res, nil
	}
	now, err := dbNow.One(ctx, c, query.NoParams{})
	if err != nil {
		return res, fmt.Errorf("dedup: purge partitions: %w", err)
	}
	ahead := cmp.Or(p.Ahead, config.PartitionsAheadDefault)
	if _, err := EnsurePartitions(ctx, c, now, now.Add(time.Duration(ahead)*PartitionWidth)); err != nil {
		return res, err
	}
	return res, nil
}

// dropPartition detaches part concurrently (finalizing a pending detach)
// and drops it.
func dropPartition(ctx context.Context, c *pgx.Conn, part Partition, timeout time.Duration) error {
	if _, err := setStatementTimeout.Run(ctx, c, statementTimeoutParams{Timeout: timeout}); err != nil {
		return fmt.Errorf("dedup: detach partition %s: %w", part.Name, err)
	}
	defer func() { _, _ = resetStatementTimeout.Run(context.WithoutCancel(ctx), c, query.NoParams{}) }()
	if _, err := detachPartition.Run(ctx, c, detachParams{Name: part.Name, Finalize: part.DetachPending}); err != nil {
		return fmt.Errorf("dedup: detach partition %s: %w", part.Name, err)
	}
	if _, err := dropPartitionTable.Run(ctx, c, partitionParams{Name: part.Name}); err != nil {
		return fmt.Errorf("dedup: drop partition %s: %w", part.Name, err)
	}
	return nil
}

// dropDetached drops tables left detached but not dropped by an
// interrupted purge (named as partitions, no longer attached), when their
// day is past the cutoff, and finalizes pending detaches of expired
// partitions (dropPartition does that as it meets them).
func dropDetached(ctx context.Context, c *pgx.Conn, cutoff time.Time, dryRun bool, res *PurgeResult) error {
	names, err := listDetached.All(ctx, c, query.NoParams{})
	if err != nil {
		return fmt.Errorf("dedup: purge partitions: %w", err)
	}
	for _, name := range names {
		m := partitionNameRE.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		day, err := time.Parse("20060102", m[1])
		if err != nil || day.Add(PartitionWidth).After(cutoff) {
			continue
		}
		n, err := partitionRows(ctx, c, name)
		if err != nil {
			return err
		}
		if !dryRun {
			if _, err := dropPartitionTable.Run(ctx, c, partitionParams{Name: name}); err != nil {
				return fmt.Errorf("dedup: drop detached partition %s: %w", name, err)
			}
		}
		res.Deleted += n
		res.Chunks++
	}
	return nil
}

// partitionRows is the row count of a partition: the planner's once the
// table has been vacuumed or analyzed (autovacuum does it after a day of
// inserts), else an exact count.
func partitionRows(ctx context.Context, c *pgx.Conn, name string) (int64, error) {
	est, err := partitionReltuples.One(ctx, c, partitionParams{Name: name})
	if err != nil {
		return 0, fmt.Errorf("dedup: rows of %s: %w", name, err)
	}
	if est >= 0 {
		return int64(est), nil
	}
	n, err := countPartition.One(ctx, c, partitionParams{Name: name})
	if err != nil {
		return 0, fmt.Errorf("dedup: rows of %s: %w", name, err)
	}
	return n, nil
}
