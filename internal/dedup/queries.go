package dedup

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement dedup runs on processed_event and its
// partitions, each named (package query): "dedup.insert_processed" is what
// pg_stat_activity and the errors show. Statements whose text holds a
// table's name are built by the named builder functions at the end.

// The dedup step's statement, the hot path: one per batch (see RecordIDs).

// insertProcessedParams are the ids of a batch, sorted by RecordIDs;
// [16]byte encodes directly where pgtype.UUID goes through its Valuer and
// allocates per element.
type insertProcessedParams struct{ IDs [][16]byte }

var insertProcessed = query.NewRows("dedup.insert_processed", `INSERT INTO processed_event (event_id, processed_at)
SELECT unnest($1::uuid[]), now()
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id`,
	func(p insertProcessedParams) []any { return []any{p.IDs} }, query.Column[[16]byte])

// Reads of processed_event.

type lookupProcessedParams struct{ ID uuid.UUID }

var lookupProcessed = query.NewRow("dedup.lookup_processed", `SELECT processed_at FROM processed_event WHERE event_id = $1`,
	func(p lookupProcessedParams) []any { return []any{pgtype.UUID{Bytes: p.ID, Valid: true}} }, query.Column[time.Time])

// tableEstimate is one table's row estimates (see EstimateRows).
type tableEstimate struct {
	Reltuples       float64
	Relpages, Pages int64
	Live            *int64
}

var estimateRows = query.NewRows[query.NoParams]("dedup.estimate_rows", `SELECT c.reltuples, c.relpages,
		pg_relation_size(c.oid) / current_setting('block_size')::bigint, s.n_live_tup
	FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
	WHERE c.oid = to_regclass('processed_event') AND c.relkind = 'r'
	   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('processed_event'))`,
	nil, func(r *tableEstimate) []any { return []any{&r.Reltuples, &r.Relpages, &r.Pages, &r.Live} })

var processedExists = query.NewRow[query.NoParams]("dedup.processed_exists", `SELECT EXISTS (SELECT 1 FROM processed_event)`,
	nil, query.Column[bool])

// dbNow is the database's clock: purge cutoffs and partitions are computed
// from it, never from a daemon's.
var dbNow = query.NewRow[query.NoParams]("dedup.now", `SELECT now()`, nil, query.Column[time.Time])

// The plain purge (see Purge).

type purgeCutoffParams struct{ Horizon time.Duration }

var purgeCutoff = query.NewRow("dedup.purge_cutoff", `SELECT now() - make_interval(secs => $1::float8 / 1e6)`,
	func(p purgeCutoffParams) []any { return []any{p.Horizon.Microseconds()} }, query.Column[time.Time])

type countPurgeableParams struct{ Cutoff time.Time }

var countPurgeable = query.NewRow("dedup.count_purgeable", `SELECT count(*) FROM processed_event WHERE processed_at < $1`,
	func(p countPurgeableParams) []any { return []any{p.Cutoff} }, query.Column[int64])

// purgeChunkParams: delete up to Limit rows processed in [From, Cutoff).
type purgeChunkParams struct {
	From, Cutoff time.Time
	Limit        int
}

// purgeChunkRow is the rows a chunk deleted and the newest processed_at
// among them (nil when none).
type purgeChunkRow struct {
	N    int64
	Last *time.Time
}

// purgeChunk deletes up to Limit rows processed in [From, Cutoff), oldest
// first through the processed_at index, and returns the newest processed_at
// it deleted. SKIP LOCKED lets two overlapping purges (several daemons, or
// a scheduled and a manual run) share the work without waiting on or
// deadlocking with each other; each row is deleted once. The lower bound
// is where the previous chunk ended (keyset): the index entries of the
// rows already deleted stay until vacuum, and a scan from the oldest again
// at every chunk walked all of them, a cost that grew with the purge (at
// 2M deleted rows of a 10M-row table under load, a chunk of 100 rows took
// over 150 ms and the purge fell to ~400 rows/s).
var purgeChunk = query.NewRow("dedup.purge_chunk", `WITH doomed AS (
    SELECT event_id, processed_at FROM processed_event
    WHERE processed_at >= $1 AND processed_at < $2
    ORDER BY processed_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM processed_event p USING doomed d WHERE p.event_id = d.event_id
    RETURNING d.processed_at
)
SELECT count(*), max(processed_at) FROM gone`,
	func(p purgeChunkParams) []any { return []any{p.From, p.Cutoff, p.Limit} },
	func(r *purgeChunkRow) []any { return []any{&r.N, &r.Last} })

// Session and transaction settings.

// statementTimeoutParams: Timeout for the transaction (Local) or the
// session. set_config takes the value as an argument where SET takes
// none.
type statementTimeoutParams struct {
	Timeout time.Duration
	Local   bool
}

var setStatementTimeout = query.NewExec("dedup.set_statement_timeout", `SELECT set_config('statement_timeout', $1, $2)`,
	func(p statementTimeoutParams) []any {
		return []any{strconv.FormatInt(p.Timeout.Milliseconds(), 10), p.Local}
	})

var resetStatementTimeout = query.NewExec[query.NoParams]("dedup.reset_statement_timeout", `RESET statement_timeout`, nil)

// setConstraintsImmediate makes a replayed batch check every deferred
// constraint at its statement (see runIsolated).
var setConstraintsImmediate = query.NewExec[query.NoParams]("dedup.set_constraints_immediate", `SET CONSTRAINTS ALL IMMEDIATE`, nil)

// Layout and partitions.

var detectLayout = query.NewRow[query.NoParams]("dedup.detect_layout", `SELECT c.relkind::text FROM pg_class c
	WHERE c.oid = to_regclass('processed_event')`, nil, query.Column[*string])

// partitionRow is one attached partition as the catalog gives it.
type partitionRow struct {
	Name, Bound   string
	DetachPending bool
}

var listPartitions = query.NewRows[query.NoParams]("dedup.list_partitions", `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending
	FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = to_regclass('processed_event')`,
	nil, func(r *partitionRow) []any { return []any{&r.Name, &r.Bound, &r.DetachPending} })

// listDetached lists the tables named as partitions that are no longer
// attached (a purge interrupted between detach and drop).
var listDetached = query.NewRows[query.NoParams]("dedup.list_detached_partitions", `SELECT c.relname::text FROM pg_class c
	WHERE c.relkind = 'r' AND c.relname LIKE 'processed\_event\_p%' AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass('processed_event'))
	AND NOT EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid)`,
	nil, query.Column[string])

// Partition maintenance runs under one advisory lock per service database
// (partitionLockName): a transaction's around creating partitions, a
// session's around a purge of them (DETACH ... CONCURRENTLY cannot run in
// a transaction block).

func partitionLockArgs(query.NoParams) []any { return []any{partitionLockName} }

var (
	lockPartitions = query.NewExec("dedup.lock_partitions",
		`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, partitionLockArgs)
	lockPartitionsSession = query.NewExec("dedup.lock_partitions_session",
		`SELECT pg_advisory_lock(hashtextextended($1, 0))`, partitionLockArgs)
	unlockPartitionsSession = query.NewExec("dedup.unlock_partitions_session",
		`SELECT pg_advisory_unlock(hashtextextended($1, 0))`, partitionLockArgs)
)

// partitionParams names one partition (or a table named as one), unquoted.
type partitionParams struct{ Name string }

// ident is the partition's name quoted as an identifier.
func (p partitionParams) ident() string { return pgx.Identifier{p.Name}.Sanitize() }

// partitionReltuples is the planner's row count of a partition, -1 until
// it was vacuumed or analyzed.
var partitionReltuples = query.NewRow("dedup.partition_reltuples", `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`,
	func(p partitionParams) []any { return []any{p.ident()} }, query.Column[float64])

var countPartition = query.BuildRow("dedup.count_partition", countPartitionSQL, nil, query.Column[int64])

func countPartitionSQL(p partitionParams) string { return `SELECT count(*) FROM ` + p.ident() }

// createPartition creates the table of a partition, attached afterwards
// (see EnsurePartitions for why not PARTITION OF).
var createPartition = query.BuildExec("dedup.create_partition", createPartitionSQL, nil)

func createPartitionSQL(p partitionParams) string {
	return `CREATE TABLE ` + p.ident() + ` (LIKE processed_event INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`
}

// attachParams: the partition Name holds the ids in [From, To).
type attachParams struct {
	Name     string
	From, To uuid.UUID
}

// attachPartition attaches a partition; bounds cannot be arguments, and
// the uuids' text is hex and dashes only.
var attachPartition = query.BuildExec("dedup.attach_partition", attachPartitionSQL, nil)

func attachPartitionSQL(p attachParams) string {
	return fmt.Sprintf(`ALTER TABLE processed_event ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		partitionParams{p.Name}.ident(), p.From, p.To)
}

// detachParams: detach Name concurrently, or finalize its pending detach.
type detachParams struct {
	Name     string
	Finalize bool
}

var detachPartition = query.BuildExec("dedup.detach_partition", detachPartitionSQL, nil)

func detachPartitionSQL(p detachParams) string {
	how := "CONCURRENTLY"
	if p.Finalize {
		how = "FINALIZE"
	}
	return `ALTER TABLE processed_event DETACH PARTITION ` + partitionParams{p.Name}.ident() + ` ` + how
}

var dropPartitionTable = query.BuildExec("dedup.drop_partition", dropPartitionSQL, nil)

func dropPartitionSQL(p partitionParams) string { return `DROP TABLE ` + p.ident() }

// Conversion between layouts (see ConvertLayout): the table is renamed
// processed_event_old, a table of the other layout takes its name, the
// rows are copied, and the old one is dropped.

// v7CheckSQL is the expression a partitioned table's CHECK constraint
// holds: the id's version nibble is 7.
const v7CheckSQL = `((get_byte(uuid_send(event_id), 6) >> 4) = 7)`

var (
	lockProcessedEvent = query.NewExec[query.NoParams]("dedup.lock_processed_event",
		`LOCK TABLE processed_event IN ACCESS EXCLUSIVE MODE`, nil)
	renameToOld = query.NewExec[query.NoParams]("dedup.rename_processed_event_old", `ALTER TABLE processed_event RENAME TO processed_event_old;
		ALTER TABLE processed_event_old RENAME CONSTRAINT processed_event_pkey TO processed_event_old_pkey;
		ALTER INDEX IF EXISTS processed_event_processed_at_idx RENAME TO processed_event_old_processed_at_idx`, nil)
	dropOld = query.NewExec[query.NoParams]("dedup.drop_processed_event_old", `DROP TABLE processed_event_old`, nil)
	// createPlain creates the contract's table (as migration 001 does).
	createPlain = query.NewExec[query.NoParams]("dedup.create_plain", `CREATE TABLE processed_event (
    event_id     uuid        PRIMARY KEY,
    processed_at timestamptz NOT NULL
);
CREATE INDEX processed_event_processed_at_idx ON processed_event (processed_at)`, nil)
	// createPartitioned creates the partitioned table, without partitions.
	createPartitioned = query.NewExec[query.NoParams]("dedup.create_partitioned", `CREATE TABLE processed_event (
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL,
    CONSTRAINT processed_event_pkey PRIMARY KEY (event_id),
    CONSTRAINT processed_event_v7 CHECK `+v7CheckSQL+`
) PARTITION BY RANGE (event_id)`, nil)
	copyAllFromOld = query.NewExec[query.NoParams]("dedup.copy_all_from_old", `INSERT INTO processed_event (event_id, processed_at)
		SELECT event_id, processed_at FROM processed_event_old ORDER BY event_id`, nil)
	countOld = query.NewRow[query.NoParams]("dedup.count_old", `SELECT count(*) FROM processed_event_old`, nil, query.Column[int64])
)

// nonV7Row counts the old table's non-v7 rows processed since a time, and
// the newest one's processed_at.
type nonV7Row struct {
	N      int64
	Newest *time.Time
}

type sinceParams struct{ Since time.Time }

var countNonV7Old = query.NewRow("dedup.count_non_v7_old", `SELECT count(*), max(processed_at) FROM processed_event_old
	WHERE NOT `+v7CheckSQL+` AND processed_at >= $1`,
	func(p sinceParams) []any { return []any{p.Since} },
	func(r *nonV7Row) []any { return []any{&r.N, &r.Newest} })

type beforeParams struct{ Before uuid.UUID }

// newestV7Old is the old table's greatest v7 id under Before (an id of a
// producer's clock far ahead is left out).
var newestV7Old = query.NewRow("dedup.newest_v7_old", `SELECT event_id FROM processed_event_old WHERE `+v7CheckSQL+` AND event_id < $1
	ORDER BY event_id DESC LIMIT 1`,
	func(p beforeParams) []any { return []any{p.Before} }, query.Column[uuid.UUID])

// idRangeParams: the ids in [From, To).
type idRangeParams struct{ From, To uuid.UUID }

var copyV7FromOld = query.NewExec("dedup.copy_v7_from_old", `INSERT INTO processed_event (event_id, processed_at)
	SELECT event_id, processed_at FROM processed_event_old
	WHERE `+v7CheckSQL+` AND event_id >= $1 AND event_id < $2 ORDER BY event_id`,
	func(p idRangeParams) []any { return []any{p.From, p.To} })
