package daemon

import (
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/query"
)

// This file holds the statements the daemon itself runs, each named
// (package query); the tables' owners (internal/dedup, internal/state...)
// hold theirs.

// databaseParams names a database, unquoted.
type databaseParams struct{ Name string }

// databaseExists runs on the server's "postgres" database.
var databaseExists = query.NewRow("daemon.database_exists", `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`,
	func(p databaseParams) []any { return []any{p.Name} }, query.Column[bool])

// createDatabase creates a service database; its name cannot be an
// argument.
var createDatabase = query.BuildExec("daemon.create_database", createDatabaseSQL, nil)

func createDatabaseSQL(p databaseParams) string {
	return "CREATE DATABASE " + pgx.Identifier{p.Name}.Sanitize()
}

// ping is the health check of a service database, on its control session.
var ping = query.NewExec[query.NoParams]("daemon.ping", `SELECT 1`, nil)

// Horizon advice (docs/operations.md, "Tuning a horizon"): what processed_event
// costs, the beyond_horizon failures, and which events a producer's
// archive holds.

// processedEventSize is processed_event's total size on disk, indexes,
// TOAST and partitions included (a partitioned parent has no storage of
// its own).
var processedEventSize = query.NewRow[query.NoParams]("daemon.processed_event_size", `SELECT coalesce(sum(pg_total_relation_size(t.oid)), 0)::bigint
	FROM (SELECT to_regclass('processed_event') AS oid
		UNION ALL SELECT inhrelid FROM pg_inherits WHERE inhparent = to_regclass('processed_event')) t
	WHERE t.oid IS NOT NULL`, nil, query.Column[int64])

// processedEventCount counts processed_event exactly: only run when the
// planner's estimate is missing or small.
var processedEventCount = query.NewRow[query.NoParams]("daemon.processed_event_count", `SELECT count(*) FROM processed_event`,
	nil, query.Column[int64])

// processedEventSpan is how long processed_event's rows span, in seconds:
// now minus its oldest processed_at (an index's first entry), 0 when empty.
var processedEventSpan = query.NewRow[query.NoParams]("daemon.processed_event_span", `SELECT coalesce(extract(epoch FROM now() - min(processed_at)), 0)::float8
	FROM processed_event`, nil, query.Column[float64])

type sinceParams struct{ Since time.Time }

// countBeyondHorizon counts the beyond_horizon failures stored since.
var countBeyondHorizon = query.NewRow("daemon.count_beyond_horizon", `SELECT count(*) FROM platform.failed_event
	WHERE reason = 'beyond_horizon' AND failed_at >= $1`,
	func(p sinceParams) []any { return []any{p.Since} }, query.Column[int64])

// archivedEventNames are the distinct event names of a producer's
// archive, by a skip scan of its (event_name, occurred_at) index: one
// probe per name, whatever the archive's size.
var archivedEventNames = query.NewRows[query.NoParams]("daemon.archived_event_names", `WITH RECURSIVE n(name) AS (
		(SELECT event_name FROM platform.outbox_archive ORDER BY event_name LIMIT 1)
		UNION ALL
		SELECT (SELECT event_name FROM platform.outbox_archive WHERE event_name > n.name ORDER BY event_name LIMIT 1)
		FROM n WHERE n.name IS NOT NULL)
	SELECT name FROM n WHERE name IS NOT NULL`, nil, query.Column[string])
