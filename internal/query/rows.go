package query

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Rows is a named query that returns any number of rows, each read into
// an R. It is safe for concurrent use.
type Rows[P, R any] struct{ scanned[P, R] }

// NewRows declares the query sql named name, its arguments args(p) (nil:
// none) and dest(r) the scan targets of r for its columns, in order
// (Column[T] for one column). Declare it once, as a package-level variable
// of the package that owns its tables; a name that is not "owner.what" or
// is declared twice panics.
func NewRows[P, R any](name, sql string, args func(P) []any, dest func(*R) []any) *Rows[P, R] {
	return &Rows[P, R]{scanned[P, R]{newStmt(name, sql, nil, args), dest}}
}

// Each runs the query with params p on db and calls fn with every row, in
// the order the server sends them; an error from fn stops the reading and
// is returned. dest is called once per call, not per row: one R is
// scanned into again and again and passed to fn by value, so reading adds
// no allocation per row of its own (pgx allocates afresh, per row, what a
// pointer, string or []byte column needs). Errors are wrapped with the
// query's name.
func (q *Rows[P, R]) Each(ctx context.Context, db Querier, p P, fn func(R) error) error {
	rows, err := db.Query(ctx, q.SQL(p), q.argsOf(p)...)
	if err != nil {
		return q.wrap(err)
	}
	var r R
	if _, err := pgx.ForEachRow(rows, q.dest(&r), func() error { return fn(r) }); err != nil {
		return q.wrap(err)
	}
	return nil
}

// All runs the query with params p on db and returns its rows (nil when
// there are none, and on error).
func (q *Rows[P, R]) All(ctx context.Context, db Querier, p P) ([]R, error) {
	var out []R
	if err := q.Each(ctx, db, p, func(r R) error {
		out = append(out, r)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, nil
}
