package replay

import (
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement replay runs, each named (package
// query): "replay.get" is what pg_stat_activity and the errors show. Its
// own table is platform.replay; it reads the producer's
// platform.outbox_archive (written by package outbox) and, in a dry run,
// each target service's processed_event (owned by package dedup), for
// queries of its own.

// platform.replay.

type createParams struct {
	ID               uuid.UUID
	State            string
	Selection, Pools []byte // JSON
	TargetPool       string
	Rate             int
	Matched          int64
	CreatedBy        string
}

var createReplay = query.NewExec("replay.create", `INSERT INTO platform.replay (id, state, selection, target_pool, rate, matched, pools, created_by)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
	func(p createParams) []any {
		return []any{p.ID, p.State, p.Selection, p.TargetPool, p.Rate, p.Matched, p.Pools, p.CreatedBy}
	})

const recordColumns = `id, state, selection::text, target_pool, rate, matched, published, cursor, pools::text, error, created_by, created_at, finished_at`

// recordRow is a platform.replay row as read: selection and pools as JSON
// text, the nullable columns as pointers (see record).
type recordRow struct {
	Record
	SelectionJSON, PoolsJSON string
	CursorOrNil              *uuid.UUID
	FinishedOrNil            *time.Time
}

func (r *recordRow) dest() []any {
	return []any{&r.ID, &r.State, &r.SelectionJSON, &r.TargetPool, &r.Rate, &r.Matched, &r.Published, &r.CursorOrNil, &r.PoolsJSON,
		&r.Error, &r.CreatedBy, &r.CreatedAt, &r.FinishedOrNil}
}

type idParams struct{ ID uuid.UUID }

var getReplay = query.NewRow("replay.get", `SELECT `+recordColumns+` FROM platform.replay WHERE id = $1`,
	func(p idParams) []any { return []any{p.ID} }, (*recordRow).dest)

type limitParams struct{ Limit int }

var listReplays = query.NewRows("replay.list", `SELECT `+recordColumns+` FROM platform.replay ORDER BY created_at DESC, id DESC LIMIT $1`,
	func(p limitParams) []any { return []any{p.Limit} }, (*recordRow).dest)

type cancelParams struct {
	ID    uuid.UUID
	Actor string
}

var cancelReplay = query.NewExec("replay.cancel", `UPDATE platform.replay SET state = $2, cancelled_by = $3, finished_at = now(), updated_at = now()
		WHERE id = $1 AND state = $4`,
	func(p cancelParams) []any { return []any{p.ID, StateCancelled, p.Actor, StateRunning} })

type progressParams struct {
	ID        uuid.UUID
	Cursor    *uuid.UUID
	Published int64
	Pools     []byte // JSON
	Done      bool
}

// recordProgress stores a chunk's progress whatever the state, ends a
// running replay when Done, and returns the state.
var recordReplayProgress = query.NewRow("replay.record_progress", `UPDATE platform.replay SET cursor = $2, published = $3, pools = $4, updated_at = now(),
			state = CASE WHEN state = 'running' AND $5 THEN 'done' ELSE state END,
			finished_at = CASE WHEN state = 'running' AND $5 THEN now() ELSE finished_at END
			WHERE id = $1 RETURNING state`,
	func(p progressParams) []any { return []any{p.ID, p.Cursor, p.Published, p.Pools, p.Done} }, query.Column[string])

type failParams struct {
	ID  uuid.UUID
	Why string
}

var failReplay = query.NewExec("replay.fail", `UPDATE platform.replay SET state = 'failed', error = $2, finished_at = now(), updated_at = now()
			WHERE id = $1 AND state = 'running'`,
	func(p failParams) []any { return []any{p.ID, p.Why} })

var anyRunning = query.NewRow[query.NoParams]("replay.any_running", `SELECT EXISTS (SELECT 1 FROM platform.replay WHERE state = 'running')`,
	nil, query.Column[bool])

var nextRunning = query.NewRow[query.NoParams]("replay.next_running", `SELECT id FROM platform.replay WHERE state = 'running' ORDER BY created_at, id LIMIT 1`,
	nil, query.Column[uuid.UUID])

// The producer's archive.

type selectParams struct {
	From, To any // a time.Time, or nil for none
	IDs      [][16]byte
	KeepSecs float64
}

// itemRow is a selected event as read: [16]byte scans without allocating
// where a uuid.UUID goes through its Scanner.
type itemRow struct {
	ID         [16]byte
	Name       string
	OccurredAt time.Time
}

// selectArchived reads the selected events once each (an id archived
// twice, by a producer that reused it, is taken from its newest
// publication), in event_id order, among those published within the
// archive's period (rows past it wait for their day's partition to be
// dropped; a replay never sees them).
var selectArchived = query.NewRows("replay.select", `SELECT DISTINCT ON (event_id) event_id, event_name, occurred_at
FROM platform.outbox_archive
WHERE ($1::timestamptz IS NULL OR occurred_at >= $1)
  AND ($2::timestamptz IS NULL OR occurred_at < $2)
  AND (cardinality($3::uuid[]) = 0 OR event_id = ANY($3::uuid[]))
  AND published_at >= now() - make_interval(secs => $4)
ORDER BY event_id, published_at DESC`,
	func(p selectParams) []any { return []any{p.From, p.To, p.IDs, p.KeepSecs} },
	func(r *itemRow) []any { return []any{&r.ID, &r.Name, &r.OccurredAt} })

type idsParams struct{ IDs [][16]byte }

func idsArgs(p idsParams) []any { return []any{p.IDs} }

// archivedRow is one archived event of a chunk, payload and headers as
// PostgreSQL renders the jsonb.
type archivedRow struct {
	ID                     [16]byte
	Name, Payload, Headers string
	At                     time.Time
}

// readArchived reads a chunk's rows (each id's newest publication).
var readArchived = query.NewRows("replay.read_archived", `SELECT DISTINCT ON (event_id) event_id, event_name, occurred_at, payload::text, headers::text
FROM platform.outbox_archive WHERE event_id = ANY($1::uuid[]) ORDER BY event_id, published_at DESC`,
	idsArgs, func(r *archivedRow) []any { return []any{&r.ID, &r.Name, &r.At, &r.Payload, &r.Headers} })

// A target service's processed_event (the dry run).

// countProcessed counts, of the ids given (distinct, in event_id order),
// those in processed_event: one query per pool, one index scan with the
// whole array (at 1M ids against 1M rows, 0.7 s where a join with
// unnest(), planned as a nested loop, took 1.5 s to 2.6 s on the team's
// machine).
var countProcessed = query.NewRow("replay.count_processed", `SELECT count(*) FROM processed_event WHERE event_id = ANY($1::uuid[])`,
	idsArgs, query.Column[int64])
