package failure

import (
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/query"
)

// This file holds the workbench's and the retry runner's statements
// (store.go keeps the workers'). Statements over a request's filter are
// built per call (query.BuildRow, BuildExec) from fixed text and the
// filter's placeholders (filter.go): the values travel as arguments.

// built is a statement's text built per call and its arguments.
type built struct {
	SQL  string
	Args []any
}

func builtSQL(b built) string   { return b.SQL }
func builtArgs(b built) []any   { return b.Args }
func idArgs(id uuid.UUID) []any { return []any{id} }

// failureColumns are a Failure's columns, in failureRow.dest's order.
const failureColumns = `f.id, f.pool, coalesce(f.event_id, '00000000-0000-0000-0000-000000000000'), f.event_name, f.routing_key,
	f.headers, f.body, f.reason, f.error, f.fingerprint, f.handler, f.attempt, f.first_failed_at, f.failed_at, f.copies,
	coalesce(f.sequence_key, ''), f.state, f.resolved_at, coalesce(f.resolved_by, ''), f.edited_body, f.edited_at,
	coalesce(f.edited_by, ''), coalesce(f.retry_id, '00000000-0000-0000-0000-000000000000'), f.updated_at`

// failureRow is a Failure as read, its nullable times as pointers.
type failureRow struct {
	Failure
	ResolvedAt, EditedAt *time.Time
}

func (r *failureRow) dest() []any {
	f := &r.Failure
	return []any{&f.ID, &f.Pool, &f.EventID, &f.EventName, &f.RoutingKey, &f.Headers, &f.Body, &f.Reason, &f.Error,
		&f.Fingerprint, &f.Handler, &f.Attempt, &f.FirstFailedAt, &f.FailedAt, &f.Copies, &f.SequenceKey, &f.State,
		&r.ResolvedAt, &f.ResolvedBy, &f.EditedBody, &r.EditedAt, &f.EditedBy, &f.RetryID, &f.UpdatedAt}
}

func (r *failureRow) failure() Failure {
	f := r.Failure
	if r.ResolvedAt != nil {
		f.ResolvedAt = *r.ResolvedAt
	}
	if r.EditedAt != nil {
		f.EditedAt = *r.EditedAt
	}
	return f
}

// Groups, listings, reads.

// groups groups the rows w selects by cols; one row, the groups as a
// JSON array, largest first. The example is the group's row of smallest
// ctid, read back by that ctid in the same statement (same snapshot):
// PostgreSQL 15 has no min(uuid), and min(id::text) would cost a third
// more on a million rows.
var groups = query.BuildRow("failure.groups", builtSQL, builtArgs, query.Column[[]byte])

func groupsSQL(cols []string, w *where) string {
	c := ""
	for i, col := range cols {
		if i > 0 {
			c += ", "
		}
		c += col
	}
	return `SELECT coalesce(jsonb_agg(jsonb_build_object('k', g.k, 'n', g.n, 'first', g.first, 'last', g.last,
				'ex', (SELECT e.id FROM platform.failed_event e WHERE e.ctid = g.ex))
			ORDER BY g.n DESC, g.k), '[]'::jsonb)
		FROM (SELECT jsonb_build_array(` + c + `) AS k, count(*) AS n, min(f.failed_at) AS first, max(f.failed_at) AS last,
				min(f.ctid) AS ex
			FROM platform.failed_event f WHERE ` + w.sql() + ` GROUP BY ` + c + `) g`
}

// listIDs returns the ids of a page, newest first.
var listIDs = query.BuildRow("failure.list_ids", builtSQL, builtArgs, query.Column[[]uuid.UUID])

func listIDsSQL(w *where, limit string) string {
	return `SELECT coalesce(array_agg(s.id ORDER BY s.failed_at DESC, s.id DESC), '{}')
		FROM (SELECT f.id, f.failed_at FROM platform.failed_event f WHERE ` + w.sql() + `
			ORDER BY f.failed_at DESC, f.id DESC LIMIT ` + limit + `) s`
}

var byIDs = query.NewRows("failure.by_ids", `SELECT `+failureColumns+`
	FROM platform.failed_event f WHERE f.id = ANY($1) ORDER BY f.failed_at DESC, f.id DESC`,
	func(ids []uuid.UUID) []any { return []any{ids} }, (*failureRow).dest)

var byID = query.NewRow("failure.by_id", `SELECT `+failureColumns+` FROM platform.failed_event f WHERE f.id = $1`,
	idArgs, (*failureRow).dest)

var byIDForUpdate = query.NewRow("failure.by_id_for_update", `SELECT `+failureColumns+`
	FROM platform.failed_event f WHERE f.id = $1 FOR UPDATE`, idArgs, (*failureRow).dest)

func (e *Edit) dest() []any {
	return []any{&e.ID, &e.EditedAt, &e.EditedBy, &e.Reason, &e.BodyBefore, &e.BodyAfter, &e.Diff}
}

var editsOf = query.NewRows("failure.edits_of", `SELECT id, edited_at, edited_by, reason, body_before, body_after, diff
	FROM platform.failed_event_edit WHERE failure_id = $1 ORDER BY id`, idArgs, (*Edit).dest)

// Discards.

// selectForDiscard locks and returns the unresolved rows a filter
// selects.
var selectForDiscard = query.BuildRow("failure.select_for_discard", builtSQL, builtArgs, query.Column[[]uuid.UUID])

func selectForDiscardSQL(w *where) string {
	return `SELECT coalesce(array_agg(s.id), '{}') FROM (SELECT f.id FROM platform.failed_event f WHERE ` + w.sql() + `
		ORDER BY f.id FOR UPDATE) s`
}

// parkedBehind returns the parked rows behind the heads among ids: rows
// of the same pool and key, parked, arriving after a head failed or
// retrying (failed_event_open_key_idx).
var parkedBehind = query.NewRow("failure.parked_behind", `SELECT coalesce(array_agg(DISTINCT p.id), '{}')
	FROM platform.failed_event h
	JOIN platform.failed_event p ON p.pool = h.pool AND p.sequence_key = h.sequence_key AND p.id > h.id
		AND p.state = 'parked' AND p.sequence_key IS NOT NULL
	WHERE h.id = ANY($1) AND h.state IN ('failed', 'retrying') AND h.sequence_key IS NOT NULL`,
	func(ids []uuid.UUID) []any { return []any{ids} }, query.Column[[]uuid.UUID])

type discardParams struct {
	IDs []uuid.UUID
	By  string
}

var discard = query.NewExec("failure.discard", `UPDATE platform.failed_event
	SET state = 'discarded', resolved_at = now(), resolved_by = $2, updated_at = now()
	WHERE id = ANY($1) AND state IN ('failed', 'parked', 'retrying')`,
	func(p discardParams) []any { return []any{p.IDs, p.By} })

// Edits.

type editParams struct {
	ID                          uuid.UUID
	By, Reason                  string
	BodyBefore, BodyAfter, Diff []byte
}

var setEditedBody = query.NewExec("failure.set_edited_body", `UPDATE platform.failed_event
	SET edited_body = $2, edited_at = now(), edited_by = $3, updated_at = now() WHERE id = $1`,
	func(p editParams) []any { return []any{p.ID, p.BodyAfter, p.By} })

var insertEdit = query.NewExec("failure.insert_edit", `INSERT INTO platform.failed_event_edit
	(failure_id, edited_by, reason, body_before, body_after, diff) VALUES ($1, $2, $3, $4, $5, $6::text::jsonb)`,
	func(p editParams) []any {
		return []any{p.ID, p.By, p.Reason, p.BodyBefore, p.BodyAfter, string(p.Diff)}
	})

// Retries.

var countSelection = query.BuildRow("failure.count_selection", builtSQL, builtArgs, query.Column[int64])

func countSQL(w *where) string {
	return `SELECT count(*) FROM platform.failed_event f WHERE ` + w.sql()
}

// closedAmong returns one of ids whose row is resolved or discarded, and
// its state.
type idState struct {
	ID    uuid.UUID
	State string
}

var closedAmong = query.NewRow("failure.closed_among", `SELECT id, state FROM platform.failed_event
	WHERE id = ANY($1) AND state IN ('resolved', 'discarded') ORDER BY id LIMIT 1`,
	func(ids []uuid.UUID) []any { return []any{ids} }, func(r *idState) []any { return []any{&r.ID, &r.State} })

type insertRetryParams struct {
	ID        uuid.UUID
	State     string
	Filter    []byte
	Canary    int
	Rate      int
	CreatedBy string
}

var insertRetry = query.NewExec("failure.insert_retry", `INSERT INTO platform.failure_retry
	(id, state, filter, canary, rate, selected, created_by) VALUES ($1, $2, $3, $4, $5, 0, $6)`,
	func(p insertRetryParams) []any { return []any{p.ID, p.State, p.Filter, p.Canary, p.Rate, p.CreatedBy} })

// insertItems freezes a selection: $1 the retry, $2 the canary count,
// then the filter's arguments. One statement, in id (arrival) order.
var insertItems = query.BuildExec("failure.insert_retry_items", builtSQL, builtArgs)

func insertItemsSQL(w *where) string {
	return `INSERT INTO platform.failure_retry_item (retry_id, seq, failure_id, canary)
		SELECT $1, s.seq, s.id, s.seq <= $2 FROM (
			SELECT f.id, row_number() OVER (ORDER BY f.id) AS seq FROM platform.failed_event f WHERE ` + w.sql() + `) s`
}

type selectedParams struct {
	ID       uuid.UUID
	Selected int64
}

var setSelected = query.NewExec("failure.set_selected", `UPDATE platform.failure_retry SET selected = $2 WHERE id = $1`,
	func(p selectedParams) []any { return []any{p.ID, p.Selected} })

// retryRow is a Retry as read.
type retryRow struct {
	Retry
	Filter     []byte
	FinishedAt *time.Time
}

func (r *retryRow) dest() []any {
	x := &r.Retry
	return []any{&x.ID, &x.State, &r.Filter, &x.Canary, &x.Rate, &x.Selected, &x.Sent, &x.Error, &x.CreatedBy,
		&x.CreatedAt, &x.UpdatedAt, &r.FinishedAt, &x.CancelledBy, &x.Resolved, &x.FailedAgain}
}

const retryColumns = `r.id, r.state, r.filter, r.canary, r.rate, r.selected, r.sent, r.error, r.created_by,
	r.created_at, r.updated_at, r.finished_at, r.cancelled_by`

// retryCounts are Retry.Resolved and Retry.FailedAgain.
const retryCounts = `(SELECT count(*) FROM platform.failure_retry_item i JOIN platform.failed_event f ON f.id = i.failure_id
		WHERE i.retry_id = r.id AND f.state = 'resolved' AND f.resolved_at >= r.created_at),
	(SELECT count(*) FROM platform.failure_retry_item i JOIN platform.failed_event f ON f.id = i.failure_id
		WHERE i.retry_id = r.id AND i.sent_at IS NOT NULL AND f.failed_at > i.sent_at AND f.state IN ('failed', 'retrying'))`

var getRetry = query.NewRow("failure.get_retry", `SELECT `+retryColumns+`, `+retryCounts+`
	FROM platform.failure_retry r WHERE r.id = $1`, idArgs, (*retryRow).dest)

var listRetries = query.NewRows("failure.list_retries", `SELECT `+retryColumns+`, `+retryCounts+`
	FROM platform.failure_retry r ORDER BY r.created_at DESC, r.id DESC LIMIT $1`,
	func(limit int) []any { return []any{limit} }, (*retryRow).dest)

type cancelParams struct {
	ID uuid.UUID
	By string
}

var cancelRetry = query.NewRow("failure.cancel_retry", `UPDATE platform.failure_retry
	SET state = 'cancelled', cancelled_by = $2, finished_at = now(), updated_at = now()
	WHERE id = $1 AND state IN ('canary', 'running') RETURNING sent`,
	func(p cancelParams) []any { return []any{p.ID, p.By} }, query.Column[int64])

var retryState = query.NewRow("failure.retry_state", `SELECT state FROM platform.failure_retry WHERE id = $1`,
	idArgs, query.Column[string])

// Retention and counts.

type purgeParams struct {
	OlderThan time.Duration
	Batch     int
}

var purgeClosed = query.NewExec("failure.purge_closed", `DELETE FROM platform.failed_event WHERE id IN (
		SELECT id FROM platform.failed_event
		WHERE state IN ('resolved', 'discarded') AND updated_at < now() - $1::interval
		ORDER BY updated_at LIMIT $2)`,
	func(p purgeParams) []any { return []any{p.OlderThan, p.Batch} })

func (c *Count) dest() []any { return []any{&c.Pool, &c.Reason, &c.State, &c.N} }

var counts = query.NewRows[query.NoParams]("failure.counts", `SELECT pool, reason, state, count(*)
	FROM platform.failed_event GROUP BY pool, reason, state ORDER BY pool, reason, state`, nil, (*Count).dest)

// The retry runner.

var anyOpenRetry = query.NewRow[query.NoParams]("failure.any_open_retry", `SELECT EXISTS (
	SELECT 1 FROM platform.failure_retry WHERE state IN ('canary', 'running'))`, nil, query.Column[bool])

// openRetry is the runner's view of the oldest open retry.
type openRetry struct {
	ID               uuid.UUID
	State            string
	Rate             int
	Filter           []byte
	UpdatedAt, DBNow time.Time
}

var nextOpenRetry = query.NewRow[query.NoParams]("failure.next_open_retry", `SELECT id, state, rate, filter, updated_at, now()
	FROM platform.failure_retry WHERE state IN ('canary', 'running') ORDER BY created_at, id LIMIT 1`, nil,
	func(r *openRetry) []any { return []any{&r.ID, &r.State, &r.Rate, &r.Filter, &r.UpdatedAt, &r.DBNow} })

type phaseParams struct {
	ID         uuid.UUID
	CanaryOnly bool
}

func phaseArgs(p phaseParams) []any { return []any{p.ID, p.CanaryOnly} }

var unsentPools = query.NewRows("failure.unsent_pools", `SELECT DISTINCT f.pool
	FROM platform.failure_retry_item i JOIN platform.failed_event f ON f.id = i.failure_id
	WHERE i.retry_id = $1 AND i.sent_at IS NULL AND (i.canary OR NOT $2)`, phaseArgs, query.Column[string])

var unsentCount = query.NewRow("failure.unsent_count", `SELECT count(*) FROM platform.failure_retry_item
	WHERE retry_id = $1 AND sent_at IS NULL AND (canary OR NOT $2)`, phaseArgs, query.Column[int64])

type chunkParams struct {
	ID         uuid.UUID
	AfterSeq   int64
	CanaryOnly bool
	Limit      int
}

// item is one item of a chunk with what its copy needs; Found is false
// when the failure's row is gone (purged).
type item struct {
	Seq        int64
	FailureID  uuid.UUID
	Found      bool
	Pool       string
	State      string
	EventID    uuid.UUID
	RoutingKey string
	Headers    []byte
	Body       []byte
	At         time.Time
}

// nextChunk reads the next unsent items of a retry's phase in seq order
// (the primary key), each joined to its row by id, and the database's
// clock before their copies are published.
var nextChunk = query.NewRows("failure.next_chunk", `SELECT i.seq, i.failure_id, f.id IS NOT NULL, coalesce(f.pool, ''),
		coalesce(f.state, ''), coalesce(f.event_id, '00000000-0000-0000-0000-000000000000'), coalesce(f.routing_key, ''),
		coalesce(f.headers, '{}'), coalesce(f.edited_body, f.body, ''::bytea), now()
	FROM (SELECT seq, failure_id FROM platform.failure_retry_item
		WHERE retry_id = $1 AND seq > $2 AND sent_at IS NULL AND (canary OR NOT $3)
		ORDER BY seq LIMIT $4) i
	LEFT JOIN platform.failed_event f ON f.id = i.failure_id
	ORDER BY i.seq`,
	func(p chunkParams) []any { return []any{p.ID, p.AfterSeq, p.CanaryOnly, p.Limit} },
	func(r *item) []any {
		return []any{&r.Seq, &r.FailureID, &r.Found, &r.Pool, &r.State, &r.EventID, &r.RoutingKey, &r.Headers, &r.Body, &r.At}
	})

type markParams struct {
	ID   uuid.UUID
	Seqs []int64
	IDs  []uuid.UUID // the rows whose copies were published
	At   time.Time   // the database's clock before they were
	Sent int64
}

var markItemsSent = query.NewExec("failure.mark_items_sent", `UPDATE platform.failure_retry_item SET sent_at = $3
	WHERE retry_id = $1 AND seq = ANY($2) AND sent_at IS NULL`,
	func(p markParams) []any { return []any{p.ID, p.Seqs, p.At} })

// markRetrying marks the rows whose copies went out retrying, unless their
// copy's outcome is already in: resolved, or failed again after At.
var markRetrying = query.NewExec("failure.mark_retrying", `UPDATE platform.failed_event
	SET state = 'retrying', retry_id = $2, updated_at = now()
	WHERE id = ANY($1) AND state IN ('failed', 'parked', 'retrying') AND failed_at <= $3`,
	func(p markParams) []any { return []any{p.IDs, p.ID, p.At} })

var addSent = query.NewRow("failure.add_sent", `UPDATE platform.failure_retry SET sent = sent + $2, updated_at = now()
	WHERE id = $1 RETURNING state`,
	func(p markParams) []any { return []any{p.ID, p.Sent} }, query.Column[string])

// canaryOutcome counts the canary's rows still waiting for their copy's
// outcome, and those that failed again after it.
type canaryOutcome struct{ Pending, FailedAgain int64 }

var canaryOutcomes = query.NewRow("failure.canary_outcome", `SELECT
		count(*) FILTER (WHERE f.state = 'retrying' AND f.failed_at <= i.sent_at),
		count(*) FILTER (WHERE f.state IN ('failed', 'retrying') AND f.failed_at > i.sent_at)
	FROM platform.failure_retry_item i JOIN platform.failed_event f ON f.id = i.failure_id
	WHERE i.retry_id = $1 AND i.canary AND i.sent_at IS NOT NULL`,
	idArgs, func(r *canaryOutcome) []any { return []any{&r.Pending, &r.FailedAgain} })

type moveParams struct {
	ID       uuid.UUID
	From, To string
	Error    string
}

// moveRetry moves a retry from one state to another (finished_at set
// when the new one is final); it returns false when the retry was no
// longer in From (cancelled meanwhile).
var moveRetry = query.NewRow("failure.move_retry", `UPDATE platform.failure_retry
	SET state = $3, error = $4, updated_at = now(),
		finished_at = CASE WHEN $3 IN ('done', 'canary_failed', 'cancelled') THEN now() END
	WHERE id = $1 AND state = $2 RETURNING true`,
	func(p moveParams) []any { return []any{p.ID, p.From, p.To, p.Error} }, query.Column[bool])

type retryErrorParams struct {
	ID    uuid.UUID
	Error string
}

// setRetryError notes why a retry waits, leaving updated_at (its last
// progress) as it is.
var setRetryError = query.NewExec("failure.set_retry_error", `UPDATE platform.failure_retry SET error = $2
	WHERE id = $1 AND state IN ('canary', 'running') AND error <> $2`,
	func(p retryErrorParams) []any { return []any{p.ID, p.Error} })

// The workers' writes and the dedup step's resolution (store.go), and an
// ordered pool's release of parked rows (release.go).

var upsert = query.NewRow("failure.upsert", `INSERT INTO platform.failed_event AS f
	(id, pool, failure_key, event_id, event_name, routing_key, headers, body, reason, error, fingerprint,
	 handler, attempt, sequence_key, state)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
	ON CONFLICT (pool, failure_key) DO UPDATE SET
		copies = f.copies + 1,
		updated_at = now(),
		reason = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.reason ELSE EXCLUDED.reason END,
		error = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.error ELSE EXCLUDED.error END,
		fingerprint = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.fingerprint ELSE EXCLUDED.fingerprint END,
		handler = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.handler ELSE EXCLUDED.handler END,
		attempt = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.attempt ELSE EXCLUDED.attempt END,
		headers = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.headers ELSE EXCLUDED.headers END,
		failed_at = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.failed_at ELSE now() END,
		state = CASE WHEN f.state IN ('resolved', 'discarded') THEN f.state ELSE EXCLUDED.state END
	RETURNING id, state`,
	func(p writeParams) []any {
		return []any{p.ID, p.Pool, p.Key, nullUUID(p.EventID), p.EventName, p.RoutingKey, p.Headers, p.Body, p.Reason,
			p.Error, p.Fingerprint, p.Handler, p.Attempt, nullText(p.SequenceKey), p.State}
	}, (*Written).dest)

// updateByID settles the row a copy carried the id of; a resolved or
// discarded row stays so, and is returned as it is.
var updateByID = query.NewRow("failure.update_by_id", `WITH u AS (
		UPDATE platform.failed_event SET state = $2, reason = $3, error = $4, fingerprint = $5, handler = $6,
			attempt = $7, headers = $8, failed_at = now(), updated_at = now()
		WHERE id = $1 AND state NOT IN ('resolved', 'discarded')
		RETURNING id, state)
	SELECT id, state FROM u
	UNION ALL
	SELECT id, state FROM platform.failed_event WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM u)`,
	func(p writeParams) []any {
		return []any{p.FailureID, p.State, p.Reason, p.Error, p.Fingerprint, p.Handler, p.Attempt, p.Headers}
	}, (*Written).dest)

var openRows = query.NewRows("failure.open", `SELECT id, sequence_key, coalesce(event_id, '00000000-0000-0000-0000-000000000000'), state
	FROM platform.failed_event
	WHERE pool = $1 AND sequence_key = ANY($2) AND state IN ('failed', 'parked', 'retrying')
	ORDER BY sequence_key, id`,
	func(p openParams) []any { return []any{p.Pool, p.Keys} }, (*Open).dest)

var resolve = query.NewExec("failure.resolve", `UPDATE platform.failed_event
	SET state = 'resolved', resolved_at = now(), resolved_by = $2, updated_at = now()
	WHERE id = ANY($1) AND state IN ('failed', 'parked', 'retrying')`,
	func(p resolveParams) []any { return []any{p.IDs, p.By} })

// releasable are the parked rows of a pool that no earlier unresolved
// failure or retrying row of their key holds back, oldest first, locked
// so that two daemons do not release the same rows at once.
var releasable = query.NewRows("failure.releasable", `SELECT p.id, coalesce(p.event_id, '00000000-0000-0000-0000-000000000000'),
		p.routing_key, p.headers, coalesce(p.edited_body, p.body)
	FROM platform.failed_event p
	WHERE p.pool = $1 AND p.sequence_key IS NOT NULL AND p.state = 'parked'
	  AND NOT EXISTS (SELECT 1 FROM platform.failed_event h
		WHERE h.pool = p.pool AND h.sequence_key = p.sequence_key AND h.id < p.id
		  AND h.state IN ('failed', 'retrying'))
	ORDER BY p.id
	LIMIT $2
	FOR UPDATE OF p SKIP LOCKED`,
	func(p releaseParams) []any { return []any{p.Pool, p.Limit} }, (*Copy).dest)

var markReleased = query.NewExec("failure.mark_released", `UPDATE platform.failed_event
	SET state = 'retrying', updated_at = now()
	WHERE id = ANY($1) AND state = 'parked'`,
	func(ids []uuid.UUID) []any { return []any{ids} })
