package state

import (
	"time"

	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement state runs on the platform schema's
// tables (service_horizon, horizon_audit, pool_state, audit_log,
// purge_run), each named (package query): "state.upsert_horizon" is what
// pg_stat_activity and the errors show.

// notifyParams announce Payload on Channel, delivered on commit.
type notifyParams struct{ Channel, Payload string }

var notify = query.NewExec("state.notify", `SELECT pg_notify($1, $2)`,
	func(p notifyParams) []any { return []any{p.Channel, p.Payload} })

// Horizons.

type serviceParams struct{ Service string }

// horizonRow is a stored horizon.
type horizonRow struct {
	Horizon   time.Duration
	Forced    bool
	UpdatedAt time.Time
	UpdatedBy string
}

func (r *horizonRow) dest() []any { return []any{&r.Horizon, &r.Forced, &r.UpdatedAt, &r.UpdatedBy} }

func serviceArgs(p serviceParams) []any { return []any{p.Service} }

var getHorizon = query.NewRow("state.get_horizon", `SELECT horizon, forced, updated_at, updated_by
	FROM platform.service_horizon WHERE service = $1`, serviceArgs, (*horizonRow).dest)

// lockHorizon serializes the setters of one service's horizon: the first
// horizon of a service has no row to lock yet.
var lockHorizon = query.NewExec("state.lock_horizon",
	`SELECT pg_advisory_xact_lock(hashtextextended('platformd.horizon.' || $1, 0))`, serviceArgs)

var storedHorizon = query.NewRow("state.stored_horizon", `SELECT horizon FROM platform.service_horizon WHERE service = $1`,
	serviceArgs, query.Column[time.Duration])

type setHorizonParams struct {
	Service string
	Horizon time.Duration
	Forced  bool
	Actor   string
}

var upsertHorizon = query.NewRow("state.upsert_horizon", `INSERT INTO platform.service_horizon (service, horizon, forced, updated_at, updated_by)
	VALUES ($1, $2, $3, now(), $4)
	ON CONFLICT (service) DO UPDATE SET horizon = EXCLUDED.horizon, forced = EXCLUDED.forced,
		updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
	RETURNING horizon, forced, updated_at, updated_by`,
	func(p setHorizonParams) []any { return []any{p.Service, p.Horizon, p.Forced, p.Actor} }, (*horizonRow).dest)

type horizonAuditParams struct {
	Service string
	Old     *time.Duration // nil when none was stored
	New     time.Duration
	Forced  bool
	Actor   string
}

var insertHorizonAudit = query.NewExec("state.insert_horizon_audit", `INSERT INTO platform.horizon_audit
	(service, old_horizon, new_horizon, forced, changed_at, changed_by)
	VALUES ($1, $2, $3, $4, now(), $5)`,
	func(p horizonAuditParams) []any { return []any{p.Service, p.Old, p.New, p.Forced, p.Actor} })

// Duplicate ages (platform.duplicate_age, docs/operations.md, "Tuning a horizon").

type upsertDuplicateAgeParams struct {
	Pool string
	Rows []byte // JSON: [{day, source, count, max_age_seconds, buckets}]
}

// upsertDuplicateAge adds a pool's accumulated ages: counts and buckets
// add, the max keeps the greater, so that several daemons' flushes of one
// row all count.
var upsertDuplicateAge = query.NewExec("state.upsert_duplicate_age", `INSERT INTO platform.duplicate_age AS d
		(day, pool, source, count, max_age_seconds, buckets)
	SELECT r.day, $1, r.source, r.count, r.max_age_seconds,
		ARRAY(SELECT b::bigint FROM jsonb_array_elements_text(r.buckets) WITH ORDINALITY AS e(b, n) ORDER BY n)
	FROM jsonb_to_recordset($2::jsonb) AS r(day date, source text, count bigint, max_age_seconds double precision, buckets jsonb)
	ON CONFLICT (day, pool, source) DO UPDATE SET count = d.count + EXCLUDED.count,
		max_age_seconds = greatest(d.max_age_seconds, EXCLUDED.max_age_seconds),
		buckets = ARRAY(SELECT coalesce(u.a, 0) + coalesce(u.b, 0)
			FROM unnest(d.buckets, EXCLUDED.buckets) WITH ORDINALITY AS u(a, b, n) ORDER BY u.n),
		updated_at = now()`,
	func(p upsertDuplicateAgeParams) []any { return []any{p.Pool, p.Rows} })

type readDuplicateAgesParams struct {
	Since string   // a date
	Pools []string // nil: every pool
}

// duplicateAgeStoredRow is a platform.duplicate_age row, its day and pool
// aside.
type duplicateAgeStoredRow struct {
	Source  string
	Count   int64
	MaxAge  float64
	Buckets []int64
}

var readDuplicateAges = query.NewRows("state.read_duplicate_ages", `SELECT source, count, max_age_seconds, buckets
	FROM platform.duplicate_age WHERE day >= $1::date AND ($2::text[] IS NULL OR pool = ANY($2))`,
	func(p readDuplicateAgesParams) []any { return []any{p.Since, p.Pools} },
	func(r *duplicateAgeStoredRow) []any { return []any{&r.Source, &r.Count, &r.MaxAge, &r.Buckets} })

// Pools' pause state.

// poolStateRow is a stored pause state.
type poolStateRow struct {
	Paused    bool
	Reason    string
	UpdatedAt time.Time
	UpdatedBy string
}

func (r *poolStateRow) dest() []any { return []any{&r.Paused, &r.Reason, &r.UpdatedAt, &r.UpdatedBy} }

type poolParams struct{ Pool string }

var getPoolState = query.NewRow("state.get_pool_state", `SELECT paused, reason, updated_at, updated_by FROM platform.pool_state WHERE pool = $1`,
	func(p poolParams) []any { return []any{p.Pool} }, (*poolStateRow).dest)

type setPoolParams struct {
	Pool          string
	Paused        bool
	Reason, Actor string
}

var upsertPoolState = query.NewRow("state.upsert_pool_state", `INSERT INTO platform.pool_state (pool, paused, reason, updated_at, updated_by)
	VALUES ($1, $2, $3, now(), $4)
	ON CONFLICT (pool) DO UPDATE SET paused = EXCLUDED.paused, reason = EXCLUDED.reason,
		updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
	RETURNING paused, reason, updated_at, updated_by`,
	func(p setPoolParams) []any { return []any{p.Pool, p.Paused, p.Reason, p.Actor} }, (*poolStateRow).dest)

// The audit log.

type insertAuditParams struct {
	Actor, Action, Target string
	Detail                []byte // a JSON object
}

var insertAudit = query.NewExec("state.insert_audit", `INSERT INTO platform.audit_log (actor, action, target, detail)
	VALUES ($1, $2, $3, $4)`,
	func(p insertAuditParams) []any { return []any{p.Actor, p.Action, p.Target, p.Detail} })

// auditRow is an audit_log row, its detail as JSON.
type auditRow struct {
	ID                    int64
	At                    time.Time
	Actor, Action, Target string
	Detail                []byte
}

type limitParams struct{ Limit int }

var listAudit = query.NewRows("state.list_audit", `SELECT id, at, actor, action, target, detail FROM platform.audit_log
	ORDER BY at DESC, id DESC LIMIT $1`,
	func(p limitParams) []any { return []any{p.Limit} },
	func(r *auditRow) []any { return []any{&r.ID, &r.At, &r.Actor, &r.Action, &r.Target, &r.Detail} })

// Purge runs.

// purgeRunRow is a purge_run row, its nullable columns as pointers.
type purgeRunRow struct {
	PurgeRun
	FinishedAt, Cutoff *time.Time
	Error              *string
}

const purgeRunColumns = `id, service, trigger, dry_run, started_at, finished_at, cutoff, deleted, error, daemon`

func (r *purgeRunRow) dest() []any {
	return []any{&r.ID, &r.Service, &r.Trigger, &r.DryRun, &r.StartedAt, &r.FinishedAt, &r.Cutoff, &r.Deleted, &r.Error, &r.Daemon}
}

// run is the row as a PurgeRun, NULLs as zero values.
func (r purgeRunRow) run() PurgeRun {
	out := r.PurgeRun
	if r.FinishedAt != nil {
		out.FinishedAt = *r.FinishedAt
	}
	if r.Cutoff != nil {
		out.Cutoff = *r.Cutoff
	}
	if r.Error != nil {
		out.Error = *r.Error
	}
	return out
}

type startPurgeRunParams struct {
	Service, Trigger string
	DryRun           bool
	Daemon           string
}

var insertPurgeRun = query.NewRow("state.insert_purge_run", `INSERT INTO platform.purge_run (service, trigger, dry_run, started_at, daemon)
	VALUES ($1, $2, $3, now(), $4) RETURNING id`,
	func(p startPurgeRunParams) []any { return []any{p.Service, p.Trigger, p.DryRun, p.Daemon} }, query.Column[int64])

type finishPurgeRunParams struct {
	ID      int64
	Cutoff  *time.Time // nil: NULL
	Deleted int64
	Error   *string // nil: NULL
}

var finishPurgeRun = query.NewRow("state.finish_purge_run", `UPDATE platform.purge_run
	SET finished_at = clock_timestamp(), cutoff = $2, deleted = $3, error = $4
	WHERE id = $1 AND finished_at IS NULL
	RETURNING `+purgeRunColumns,
	func(p finishPurgeRunParams) []any { return []any{p.ID, p.Cutoff, p.Deleted, p.Error} }, (*purgeRunRow).dest)

type servicePageParams struct {
	Service string
	Limit   int
}

var listPurgeRuns = query.NewRows("state.list_purge_runs", `SELECT `+purgeRunColumns+` FROM platform.purge_run
	WHERE service = $1 ORDER BY started_at DESC, id DESC LIMIT $2`,
	func(p servicePageParams) []any { return []any{p.Service, p.Limit} }, (*purgeRunRow).dest)

var lastPurge = query.NewRow("state.last_purge", `SELECT `+purgeRunColumns+` FROM platform.purge_run
	WHERE service = $1 AND finished_at IS NOT NULL AND error IS NULL AND NOT dry_run
	ORDER BY finished_at DESC, id DESC LIMIT 1`, serviceArgs, (*purgeRunRow).dest)

var lastFinishedPurge = query.NewRow("state.last_finished_purge", `SELECT `+purgeRunColumns+` FROM platform.purge_run
	WHERE service = $1 AND finished_at IS NOT NULL AND NOT dry_run
	ORDER BY finished_at DESC, id DESC LIMIT 1`, serviceArgs, (*purgeRunRow).dest)

type pruneParams struct {
	Service string
	Keep    int
}

var prunePurgeRuns = query.NewExec("state.prune_purge_runs", `DELETE FROM platform.purge_run
	WHERE service = $1 AND finished_at IS NOT NULL AND id < (
		SELECT min(id) FROM (
			SELECT id FROM platform.purge_run
			WHERE service = $1 AND finished_at IS NOT NULL
			ORDER BY id DESC LIMIT $2) AS newest)`,
	func(p pruneParams) []any { return []any{p.Service, p.Keep} })

// The kill switch (service_pause), pool limits and pool members.

var getServicePause = query.NewRow("state.get_service_pause",
	`SELECT paused, reason, updated_at, updated_by FROM platform.service_pause WHERE service = $1`,
	serviceArgs, (*ServicePause).dest)

var upsertServicePause = query.NewRow("state.upsert_service_pause", `INSERT INTO platform.service_pause (service, paused, reason, updated_at, updated_by)
	VALUES ($1, $2, $3, now(), $4)
	ON CONFLICT (service) DO UPDATE SET paused = EXCLUDED.paused, reason = EXCLUDED.reason,
		updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
	RETURNING paused, reason, updated_at, updated_by`,
	func(p setServicePauseParams) []any { return []any{p.Service, p.Paused, p.Reason, p.Actor} }, (*ServicePause).dest)

var getPoolLimits = query.NewRow("state.get_pool_limits",
	`SELECT rate, burst, concurrency, reason, updated_at, updated_by FROM platform.pool_limits WHERE pool = $1`,
	func(p poolParams) []any { return []any{p.Pool} }, (*PoolLimits).dest)

// upsertPoolLimits keeps the stored concurrency when asked for 0.
var upsertPoolLimits = query.NewRow("state.upsert_pool_limits", `INSERT INTO platform.pool_limits AS l (pool, rate, burst, concurrency, reason, updated_at, updated_by)
	VALUES ($1, $2, $3, $4, $5, now(), $6)
	ON CONFLICT (pool) DO UPDATE SET rate = EXCLUDED.rate, burst = EXCLUDED.burst,
		concurrency = CASE WHEN EXCLUDED.concurrency = 0 THEN l.concurrency ELSE EXCLUDED.concurrency END,
		reason = EXCLUDED.reason, updated_at = EXCLUDED.updated_at, updated_by = EXCLUDED.updated_by
	RETURNING rate, burst, concurrency, reason, updated_at, updated_by`,
	func(p PoolLimits) []any { return []any{p.Pool, p.Rate, p.Burst, p.Concurrency, p.Reason, p.UpdatedBy} },
	(*PoolLimits).dest)

// heartbeatMember refreshes member's row of pool and counts the members
// whose heartbeat is within MemberTTL, itself included (its own new row is
// not visible to the statement's SELECT, hence the 1 +).
var heartbeatMember = query.NewRow("state.heartbeat_pool_member", `WITH up AS (
		INSERT INTO platform.pool_member (pool, member, heartbeat_at) VALUES ($1, $2, now())
		ON CONFLICT (pool, member) DO UPDATE SET heartbeat_at = now()
	)
	SELECT 1 + count(*)::int FROM platform.pool_member
	WHERE pool = $1 AND member <> $2 AND heartbeat_at > now() - $3::interval`,
	func(p memberParams) []any { return []any{p.Pool, p.Member, MemberTTL} }, query.Column[int])

var deleteMember = query.NewExec("state.delete_pool_member",
	`DELETE FROM platform.pool_member WHERE pool = $1 AND (member = $2 OR heartbeat_at < now() - interval '1 hour')`,
	func(p memberParams) []any { return []any{p.Pool, p.Member} })
