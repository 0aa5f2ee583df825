package outbox

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement the outbox runs on platform.outbox and
// platform.outbox_archive, each named (package query):
// "outbox.select_batch" is what pg_stat_activity and the errors show.
// Statements whose text holds a partition's name are built by the named
// builder functions with them.

// The relay's pass, the hot path: one select and one delete per batch.

// statsRow is the outbox's size and the age of its oldest row.
type statsRow struct {
	Pending int64
	Secs    float64
}

var countPending = query.NewRow[query.NoParams]("outbox.stats", `SELECT count(*), coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
		FROM platform.outbox`, nil,
	func(r *statsRow) []any { return []any{&r.Pending, &r.Secs} })

// selectBatchParams: the first Limit rows, in event_id order, but Skip.
type selectBatchParams struct {
	Limit int
	Skip  [][16]byte
}

// scannedRow is a row as the select reads it: [16]byte scans without
// allocating where a uuid.UUID goes through its Scanner; occurred_at is
// nil when not finite.
type scannedRow struct {
	ID                     [16]byte
	Name, Payload, Headers string
	OccurredAt             *time.Time
}

// selectBatch reads occurred_at as NULL when it is not finite ('infinity'
// cannot be scanned into a time: one such row failed every select, and
// the whole outbox stalled); such a row is held instead.
var selectBatch = query.NewRows("outbox.select_batch", `SELECT event_id, event_name, CASE WHEN isfinite(occurred_at) THEN occurred_at END, payload::text, headers::text
FROM platform.outbox WHERE NOT (event_id = ANY($2::uuid[])) ORDER BY event_id LIMIT $1`,
	func(p selectBatchParams) []any { return []any{p.Limit, p.Skip} },
	func(r *scannedRow) []any { return []any{&r.ID, &r.Name, &r.OccurredAt, &r.Payload, &r.Headers} })

// idsParams are the ids of the rows a pass's broker confirmed.
type idsParams struct{ IDs [][16]byte }

func idsArgs(p idsParams) []any { return []any{p.IDs} }

// The delete of a pass runs as one pipeline of two statements (see
// deleteRows): their text and arguments are queued on a pgx.Batch.

// synchronousCommitOff holds for the batch's implicit transaction only.
var synchronousCommitOff = query.NewExec[query.NoParams]("outbox.synchronous_commit_off",
	`SELECT set_config('synchronous_commit', 'off', true)`, nil)

var deletePublished = query.NewExec("outbox.delete_published", `DELETE FROM platform.outbox WHERE event_id = ANY($1::uuid[])`, idsArgs)

// archivePublished deletes the confirmed rows and archives them in one
// statement.
var archivePublished = query.NewExec("outbox.archive_published", `WITH d AS (DELETE FROM platform.outbox WHERE event_id = ANY($1::uuid[])
	RETURNING event_id, event_name, occurred_at, payload, headers, created_at)
INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, headers, created_at, published_at)
SELECT event_id, event_name, occurred_at, payload, headers, created_at, now() FROM d`, idsArgs)

// A row written by another package (internal/remote's handlers).

// InsertParams is one row of platform.outbox as consumer.Publish writes
// it: Payload and Headers are JSON objects as text, which PostgreSQL
// parses as jsonb (numbers keep their digits).
type InsertParams struct {
	ID               uuid.UUID
	Name             string
	Payload, Headers string
}

func insertArgs(p InsertParams) []any { return []any{p.ID, p.Name, p.Payload, p.Headers} }

var insertRow = query.NewExec("outbox.insert",
	`INSERT INTO platform.outbox (event_id, event_name, payload, headers) VALUES ($1, $2, $3::jsonb, $4::jsonb)`, insertArgs)

// QueueInsert queues on b the statement that writes p's row (the query
// outbox.insert), for a caller that pipelines it with statements of its
// own, and returns the query's name, to wrap that statement's error
// with. It is safe for concurrent use (on distinct batches).
func QueueInsert(b *pgx.Batch, p InsertParams) string {
	b.Queue(insertRow.SQL(p), insertArgs(p)...)
	return insertRow.Name()
}

// The archive's partitions, under one advisory lock per database
// (archiveLockName), transaction-scoped.

var lockArchivePartitions = query.NewExec("outbox.lock_archive_partitions", `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`,
	func(query.NoParams) []any { return []any{archiveLockName} })

// dbNow is the database's clock: the archive's days are computed from it,
// never from a daemon's.
var dbNow = query.NewRow[query.NoParams]("outbox.now", `SELECT now()`, nil, query.Column[time.Time])

var listArchivePartitions = query.NewRows[query.NoParams]("outbox.list_archive_partitions", `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'platform.outbox_archive'::regclass`, nil, query.Column[string])

// partParams names one archive partition, schema-qualified and quoted
// (partIdent).
type partParams struct{ Ident string }

// partIdent is the quoted name of the archive partition of day.
func partIdent(day time.Time) string {
	return pgx.Identifier{"platform", archivePartName(day)}.Sanitize()
}

var createArchivePartition = query.BuildExec("outbox.create_archive_partition", createArchivePartitionSQL, nil)

func createArchivePartitionSQL(p partParams) string {
	return `CREATE TABLE ` + p.Ident + ` (LIKE platform.outbox_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`
}

// dayParams: the archive partition Ident holds the rows published in
// [From, To).
type dayParams struct {
	Ident    string
	From, To time.Time
}

// moveDefaultRows moves the rows of a day from the default partition into
// that day's new partition: the attach refuses a default partition
// holding any.
var moveDefaultRows = query.BuildExec("outbox.move_default_rows", moveDefaultRowsSQL,
	func(p dayParams) []any { return []any{p.From, p.To} })

func moveDefaultRowsSQL(p dayParams) string {
	return `WITH m AS (DELETE FROM platform.outbox_archive_default
				WHERE published_at >= $1 AND published_at < $2 RETURNING *) INSERT INTO ` + p.Ident + ` SELECT * FROM m`
}

// attachArchivePartition attaches a day's partition; bounds cannot be
// arguments, and RFC 3339 text is digits and punctuation only.
var attachArchivePartition = query.BuildExec("outbox.attach_archive_partition", attachArchivePartitionSQL, nil)

func attachArchivePartitionSQL(p dayParams) string {
	return fmt.Sprintf(`ALTER TABLE platform.outbox_archive ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		p.Ident, p.From.Format(time.RFC3339), p.To.Format(time.RFC3339))
}

// The archive's purge (see PurgeArchive).

type keepParams struct{ Keep time.Duration }

var archiveCutoff = query.NewRow("outbox.archive_cutoff", `SELECT now() - make_interval(secs => $1)`,
	func(p keepParams) []any { return []any{p.Keep.Seconds()} }, query.Column[time.Time])

// setLockTimeout bounds the transaction's waits for a lock; set_config
// takes the value as an argument where SET LOCAL takes none.
var setLockTimeout = query.NewExec("outbox.set_lock_timeout", `SELECT set_config('lock_timeout', $1, true)`,
	func(d time.Duration) []any { return []any{strconv.FormatInt(d.Milliseconds(), 10)} })

// partitionReltuples is the planner's row count of a partition: NULL (an
// error to scan) until it was vacuumed or analyzed.
var partitionReltuples = query.NewRow("outbox.partition_reltuples", `SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint END FROM pg_class WHERE oid = $1::regclass`,
	func(p partParams) []any { return []any{p.Ident} }, query.Column[int64])

var countArchivePartition = query.BuildRow("outbox.count_archive_partition", countArchivePartitionSQL, nil, query.Column[int64])

func countArchivePartitionSQL(p partParams) string { return `SELECT count(*) FROM ` + p.Ident }

var dropArchivePartition = query.BuildExec("outbox.drop_archive_partition", dropArchivePartitionSQL, nil)

func dropArchivePartitionSQL(p partParams) string { return `DROP TABLE ` + p.Ident }

type cutoffParams struct{ Cutoff time.Time }

var trimArchiveDefault = query.NewExec("outbox.trim_archive_default", `DELETE FROM platform.outbox_archive_default WHERE published_at < $1`,
	func(p cutoffParams) []any { return []any{p.Cutoff} })

var archivePartitionExists = query.NewRow("outbox.archive_partition_exists", `SELECT to_regclass($1) IS NOT NULL`,
	func(p partParams) []any { return []any{p.Ident} }, query.Column[bool])

// trimParams: delete the first Limit rows, in published_at order, of the
// partition Ident published in [From, Cutoff).
type trimParams struct {
	Ident        string
	From, Cutoff time.Time
	Limit        int
}

// trimRow is how many rows a batch of the trim deleted and the latest
// published_at among them (nil when none).
type trimRow struct {
	N    int64
	Last *time.Time
}

// trimArchivePartition deletes a batch of the trim, read from the index on
// published_at, and returns how many and the latest published_at deleted:
// the next batch starts there, so that no batch walks again over the
// index entries of the rows deleted before it.
var trimArchivePartition = query.BuildRow("outbox.trim_archive_partition", trimArchivePartitionSQL,
	func(p trimParams) []any { return []any{p.From, p.Cutoff, p.Limit} },
	func(r *trimRow) []any { return []any{&r.N, &r.Last} })

func trimArchivePartitionSQL(p trimParams) string {
	return `WITH d AS (DELETE FROM ` + p.Ident + ` WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM ` + p.Ident + ` WHERE published_at >= $1 AND published_at < $2 ORDER BY published_at LIMIT $3)) RETURNING published_at)
SELECT count(*), max(published_at) FROM d`
}
