package daemon

import (
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
