package dedup

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbutil"
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
func purgePartitions(ctx context.Context, db *pgxpool.Pool, p PurgeParams, res PurgeResult) (PurgeResult, error) {
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
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, partitionLockName); err != nil {
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended($1, 0))`, partitionLockName); err != nil {
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
	var now time.Time
	if err := c.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
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
	name := pgx.Identifier{part.Name}.Sanitize()
	if _, err := c.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", timeout.Milliseconds())); err != nil {
		return fmt.Errorf("dedup: detach partition %s: %w", part.Name, err)
	}
	defer func() { _, _ = c.Exec(context.WithoutCancel(ctx), "RESET statement_timeout") }()
	detach := `ALTER TABLE processed_event DETACH PARTITION ` + name + ` CONCURRENTLY`
	if part.DetachPending {
		detach = `ALTER TABLE processed_event DETACH PARTITION ` + name + ` FINALIZE`
	}
	if _, err := c.Exec(ctx, detach); err != nil {
		return fmt.Errorf("dedup: detach partition %s: %w", part.Name, err)
	}
	if _, err := c.Exec(ctx, `DROP TABLE `+name); err != nil {
		return fmt.Errorf("dedup: drop partition %s: %w", part.Name, err)
	}
	return nil
}

// dropDetached drops tables left detached but not dropped by an
// interrupted purge (named as partitions, no longer attached), when their
// day is past the cutoff, and finalizes pending detaches of expired
// partitions (dropPartition does that as it meets them).
func dropDetached(ctx context.Context, c *pgx.Conn, cutoff time.Time, dryRun bool, res *PurgeResult) error {
	rows, err := c.Query(ctx, `SELECT c.relname::text FROM pg_class c
		WHERE c.relkind = 'r' AND c.relname LIKE 'processed\_event\_p%' AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('processed_event'))
		AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)`)
	if err != nil {
		return fmt.Errorf("dedup: purge partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
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
			if _, err := c.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
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
	var est float64
	if err := c.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, pgx.Identifier{name}.Sanitize()).Scan(&est); err != nil {
		return 0, fmt.Errorf("dedup: rows of %s: %w", name, err)
	}
	if est >= 0 {
		return int64(est), nil
	}
	var n int64
	if err := c.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{name}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("dedup: rows of %s: %w", name, err)
	}
	return n, nil
}
