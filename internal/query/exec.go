package query

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// Exec is a named statement that returns no rows to read: INSERT, UPDATE
// and DELETE without RETURNING, DDL, SET, a SELECT of a function run for
// its effect (pg_advisory_xact_lock, pg_notify). It is safe for concurrent
// use.
type Exec[P any] struct{ stmt[P] }

// NewExec declares the statement sql named name, its arguments args(p)
// (nil: none). Declare it once, as a package-level variable of the
// package that owns its tables; a name that is not "owner.what" or is
// declared twice panics.
func NewExec[P any](name, sql string, args func(P) []any) *Exec[P] {
	return &Exec[P]{newStmt(name, sql, nil, args)}
}

// BuildExec declares a statement whose text build(p) makes per call, for
// identifiers known only at run time (quote them with
// pgx.Identifier.Sanitize); values still go as arguments, args(p).
func BuildExec[P any](name string, build func(P) string, args func(P) []any) *Exec[P] {
	return &Exec[P]{newStmt(name, "", build, args)}
}

// Run runs the statement with params p on db and returns its command tag.
// Errors are wrapped with the query's name.
func (q *Exec[P]) Run(ctx context.Context, db Querier, p P) (pgconn.CommandTag, error) {
	tag, err := db.Exec(ctx, q.SQL(p), q.argsOf(p)...)
	if err != nil {
		return tag, q.wrap(err)
	}
	return tag, nil
}
