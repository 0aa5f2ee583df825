package migrate

import "github.com/platformd/platformd/internal/query"

// This file holds the statements migrate runs itself, each named (package
// query); goose runs the migrations' own SQL and its version tables'.

// lockMigrations takes the migrations' lock (lockID, the key goose's
// session locker uses too) for one transaction.
var lockMigrations = query.NewExec("migrate.lock", `SELECT pg_advisory_xact_lock($1)`,
	func(query.NoParams) []any { return []any{lockID} })

// createPlatformSchema creates the schema that holds goose's version
// tables.
var createPlatformSchema = query.NewExec[query.NoParams]("migrate.create_platform_schema", `CREATE SCHEMA IF NOT EXISTS platform`, nil)
