package dedup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbutil"
)

// partitionLockName is the advisory lock partition maintenance runs under
// (advisory locks are per database: one lock per service database). A
// session takes it around a purge of partitions, a transaction around
// creating them; the two are the same key, so they exclude each other.
const partitionLockName = "platformd.processed_event.partitions"

// PartitionDetachTimeoutDefault bounds a DETACH PARTITION CONCURRENTLY:
// it waits for every transaction that may still see the partition, which
// the consumers' short batches keep brief; past the bound the detach is
// left pending and the next purge finalizes it.
const PartitionDetachTimeoutDefault = time.Minute

// Partition is one partition of a partitioned processed_event: the ids of
// UUID v7 time in [From, To).
type Partition struct {
	// Name is the table's name: processed_event_pYYYYMMDD.
	Name string
	// From and To bound the ids' time (To excluded).
	From, To time.Time
	// DetachPending is true when a DETACH PARTITION CONCURRENTLY was
	// interrupted: the partition is no longer used and must be finalized.
	DetachPending bool
}

// partitionName is the name of the partition of day (UTC).
func partitionName(day time.Time) string {
	return "processed_event_p" + day.UTC().Format("20060102")
}

// partitionNameRE matches partition names and captures their day.
var partitionNameRE = regexp.MustCompile(`^processed_event_p(\d{8})$`)

// boundRE reads pg_get_expr(relpartbound) of a range partition on uuid.
var boundRE = regexp.MustCompile(`^FOR VALUES FROM \('([0-9a-f-]{36})'\) TO \('([0-9a-f-]{36})'\)$`)

// floorDay is t's UTC day.
func floorDay(t time.Time) time.Time { return t.UTC().Truncate(PartitionWidth) }

// ListPartitions returns processed_event's partitions, oldest first. It is
// safe for concurrent use.
func ListPartitions(ctx context.Context, db Querier) ([]Partition, error) {
	rows, err := db.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass('processed_event')`)
	if err != nil {
		return nil, fmt.Errorf("dedup: list partitions: %w", err)
	}
	var out []Partition
	var name, bound string
	var pending bool
	_, err = pgx.ForEachRow(rows, []any{&name, &bound, &pending}, func() error {
		m := boundRE.FindStringSubmatch(bound)
		if m == nil {
			return fmt.Errorf("partition %s: unexpected bound %q", name, bound)
		}
		from, to := uuid.MustParse(m[1]), uuid.MustParse(m[2])
		out = append(out, Partition{Name: name, From: V7Time(from).UTC(), To: V7Time(to).UTC(), DetachPending: pending})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: list partitions: %w", err)
	}
	slices.SortFunc(out, func(a, b Partition) int { return a.From.Compare(b.From) })
	return out, nil
}

// PartitionSpan returns the time range the attached partitions cover,
// from the oldest's From to the newest's To (gaps included), and false
// when there is none.
func PartitionSpan(ctx context.Context, db Querier) (from, to time.Time, ok bool, err error) {
	parts, err := ListPartitions(ctx, db)
	if err != nil {
		return from, to, false, err
	}
	for _, p := range parts {
		if p.DetachPending {
			continue
		}
		if !ok || p.From.Before(from) {
			from = p.From
		}
		if !ok || p.To.After(to) {
			to = p.To
		}
		ok = true
	}
	return from, to, ok, nil
}

// EnsurePartitions creates the daily partitions missing between from's
// day and to's (both included), under the partition lock, and returns the
// names it created. A day the purge dropped must not be made again (its
// ids would be taken as new): callers other than a conversion start at the
// oldest partition there, as EnsureLayout does. Each partition is created as a table of its own and
// then attached: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the
// parent, which consumers' inserts (ROW EXCLUSIVE) do not wait for, where
// CREATE TABLE ... PARTITION OF would lock them out. Safe to call from
// several daemons at once.
func EnsurePartitions(ctx context.Context, db dbutil.TxStarter, from, to time.Time) ([]string, error) {
	var created []string
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, partitionLockName); err != nil {
			return err
		}
		var err error
		created, err = ensurePartitions(ctx, tx, from, to)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dedup: ensure partitions: %w", err)
	}
	return created, nil
}

// ensurePartitions is EnsurePartitions' work, in tx, which holds the
// partition lock.
func ensurePartitions(ctx context.Context, tx pgx.Tx, from, to time.Time) ([]string, error) {
	parts, err := ListPartitions(ctx, tx)
	if err != nil {
		return nil, err
	}
	var created []string
	for day := floorDay(from); !day.After(floorDay(to)); day = day.Add(PartitionWidth) {
		end := day.Add(PartitionWidth)
		if slices.ContainsFunc(parts, func(p Partition) bool { return p.From.Before(end) && p.To.After(day) }) {
			continue
		}
		name := pgx.Identifier{partitionName(day)}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE TABLE `+name+` (LIKE processed_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return nil, fmt.Errorf("create partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE processed_event ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			name, FloorUUID(day), FloorUUID(end))); err != nil {
			return nil, fmt.Errorf("attach partition %s: %w", name, err)
		}
		created = append(created, partitionName(day))
	}
	return created, nil
}

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

// ErrLayoutMismatch is EnsureLayout's error when processed_event holds
// rows in another layout than the one asked for: converting it is an
// operator's decision (ConvertLayout, `platformd migrate -processed-event`).
var ErrLayoutMismatch = errors.New("processed_event layout differs from the configuration")

// EnsureLayout makes processed_event of layout want when it is empty, or
// checks that it is; for a partitioned table it then creates the
// partitions from the horizon in force (or from the oldest partition
// there, when that is newer: a day the purge dropped is never made again)
// to ahead days ahead. It is
// what migrate and run do for every service; safe to call concurrently.
func EnsureLayout(ctx context.Context, db *pgxpool.Pool, want Layout, horizon time.Duration, ahead int) error {
	have, err := DetectLayout(ctx, db)
	if err != nil {
		return err
	}
	if have != want {
		var rows bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM processed_event)`).Scan(&rows); err != nil {
			return fmt.Errorf("dedup: ensure layout: %w", err)
		}
		if rows {
			return fmt.Errorf("dedup: processed_event is %s and holds rows, the configuration asks for %s: %w", have, want, ErrLayoutMismatch)
		}
		if _, err := ConvertLayout(ctx, db, want, ConvertParams{Horizon: horizon, Ahead: ahead}); err != nil {
			return err
		}
	}
	if want != LayoutPartitioned {
		return nil
	}
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return fmt.Errorf("dedup: ensure layout: %w", err)
	}
	from := now.Add(-HorizonInForce(LayoutPartitioned, horizon))
	// Never before the oldest partition there: the days before it were
	// dropped by the purge, and a partition made again for one of them
	// would take its ids as new (a replay of an event applied then would
	// apply again). A horizon raised later lengthens only for the days
	// not dropped yet.
	parts, err := ListPartitions(ctx, db)
	if err != nil {
		return fmt.Errorf("dedup: ensure layout: %w", err)
	}
	if len(parts) > 0 && parts[0].From.After(from) {
		from = parts[0].From
	}
	ahead = cmp.Or(ahead, config.PartitionsAheadDefault)
	_, err = EnsurePartitions(ctx, db, from, now.Add(time.Duration(ahead)*PartitionWidth))
	return err
}

// ConvertParams configures ConvertLayout.
type ConvertParams struct {
	// Horizon is the service's horizon (as stored or configured; rounded
	// up to whole partitions here): v7 rows older than the horizon in
	// force are not copied into partitions, being purgeable, and no
	// partition is created for them.
	Horizon time.Duration
	// Ahead is the days of partitions created after today's (default
	// config.PartitionsAheadDefault).
	Ahead int
}

// ConvertResult reports a conversion.
type ConvertResult struct {
	// From and To are the layouts before and after.
	From, To Layout
	// Copied is the rows moved into the new table.
	Copied int64
	// Expired is the rows left behind because the purge would delete them
	// at once: v7 rows older than the oldest partition kept, and non-v7
	// rows processed before the horizon.
	Expired int64
	// Partitions is the partitions created.
	Partitions int
}

// ErrNonV7Rows is ConvertLayout's refusal to partition a table holding
// rows of ids that are not UUID v7 processed within the horizon: a
// partitioned table refuses such ids, so their events' copies would go to
// the failure queue, but dropping their rows would let a later conversion
// back to the plain table apply those copies again. Wait until they age
// out of the horizon (the plain purge deletes them), then convert.
var ErrNonV7Rows = errors.New("processed_event holds non-v7 ids inside the horizon")

// ConvertLayout converts processed_event to layout to in one transaction:
// the table is locked (ACCESS EXCLUSIVE: consumers' batches wait for the
// commit, then carry on against the new table), its rows are copied into
// a table of the new layout, which takes its name, and the old one is
// dropped. Plain to partitioned copies the v7 rows of the partitions kept
// (see ConvertParams.Horizon) and refuses with ErrNonV7Rows while non-v7
// ids processed inside the horizon remain; partitioned to plain copies
// every row. Converting to the layout the table has does nothing. A
// consumer batch longer than its statement_timeout waiting on the lock
// fails and is redelivered (nothing is lost); pause the service's pools
// for tables of millions of rows.
func ConvertLayout(ctx context.Context, db *pgxpool.Pool, to Layout, p ConvertParams) (ConvertResult, error) {
	res := ConvertResult{To: to}
	err := dbutil.WithTx(ctx, db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		res = ConvertResult{To: to}
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, partitionLockName); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE processed_event IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		from, err := DetectLayout(ctx, tx)
		if err != nil {
			return err
		}
		res.From = from
		if from == to {
			return nil
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE processed_event RENAME TO processed_event_old;
			ALTER TABLE processed_event_old RENAME CONSTRAINT processed_event_pkey TO processed_event_old_pkey;
			ALTER INDEX IF EXISTS processed_event_processed_at_idx RENAME TO processed_event_old_processed_at_idx`); err != nil {
			return err
		}
		switch to {
		case LayoutPlain:
			err = toPlain(ctx, tx, &res)
		case LayoutPartitioned:
			err = toPartitioned(ctx, tx, p, &res)
		default:
			err = fmt.Errorf("unknown layout %v", to)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DROP TABLE processed_event_old`)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("dedup: convert processed_event to %s: %w", to, err)
	}
	return res, nil
}

func toPlain(ctx context.Context, tx pgx.Tx, res *ConvertResult) error {
	if _, err := tx.Exec(ctx, plainDDL); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
		SELECT event_id, processed_at FROM processed_event_old ORDER BY event_id`)
	res.Copied = tag.RowsAffected()
	return err
}

func toPartitioned(ctx context.Context, tx pgx.Tx, p ConvertParams, res *ConvertResult) error {
	var now time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return err
	}
	inForce := HorizonInForce(LayoutPartitioned, p.Horizon)
	var nonV7 int64
	var newest *time.Time
	if err := tx.QueryRow(ctx, `SELECT count(*), max(processed_at) FROM processed_event_old
		WHERE NOT `+v7CheckSQL+` AND processed_at >= $1`, now.Add(-p.Horizon)).Scan(&nonV7, &newest); err != nil {
		return err
	}
	if nonV7 > 0 {
		return fmt.Errorf("%w: %d rows, the last processed at %s, purgeable after %s (run the conversion then)",
			ErrNonV7Rows, nonV7, newest.UTC().Format(time.RFC3339), newest.Add(p.Horizon).UTC().Format(time.RFC3339))
	}
	if _, err := tx.Exec(ctx, partitionedDDL); err != nil {
		return err
	}
	// The oldest partition kept is the one the purge would keep now; the
	// newest covers the ids of the rows (a producer's clock ahead) and the
	// days ahead.
	first := floorDay(now.Add(-inForce))
	last := now.Add(time.Duration(cmp.Or(p.Ahead, config.PartitionsAheadDefault)) * PartitionWidth)
	var maxID *uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT event_id FROM processed_event_old WHERE `+v7CheckSQL+` AND event_id < $1
		ORDER BY event_id DESC LIMIT 1`, FloorUUID(now.Add(366*24*time.Hour))).Scan(&maxID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if maxID != nil && V7Time(*maxID).After(last) {
		last = V7Time(*maxID)
	}
	created, err := ensurePartitions(ctx, tx, first, last)
	if err != nil {
		return err
	}
	res.Partitions = len(created)
	tag, err := tx.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
		SELECT event_id, processed_at FROM processed_event_old
		WHERE `+v7CheckSQL+` AND event_id >= $1 AND event_id < $2 ORDER BY event_id`,
		FloorUUID(first), FloorUUID(floorDay(last).Add(PartitionWidth)))
	if err != nil {
		return err
	}
	res.Copied = tag.RowsAffected()
	var total int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM processed_event_old`).Scan(&total); err != nil {
		return err
	}
	res.Expired = total - res.Copied
	return nil
}

// PurgeableAt is when a processed_event row of the given layout may be
// purged: processed_at plus the horizon for the plain table; for a
// partitioned one, the end of its id's partition plus the horizon in force.
func PurgeableAt(l Layout, id uuid.UUID, processedAt time.Time, horizon time.Duration) time.Time {
	if l != LayoutPartitioned {
		return processedAt.Add(horizon)
	}
	return floorDay(V7Time(id)).Add(PartitionWidth + HorizonInForce(l, horizon))
}
