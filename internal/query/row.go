package query

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Row is a named query that returns one row, read into an R. It is safe
// for concurrent use.
type Row[P, R any] struct{ scanned[P, R] }

// NewRow declares the query sql named name, its arguments args(p) (nil:
// none) and dest(r) the scan targets of r for its columns, in order
// (Column[T] for one column). Declare it once, as a package-level variable
// of the package that owns its tables; a name that is not "owner.what" or
// is declared twice panics.
func NewRow[P, R any](name, sql string, args func(P) []any, dest func(*R) []any) *Row[P, R] {
	return &Row[P, R]{scanned[P, R]{newStmt(name, sql, nil, args), dest}}
}

// BuildRow is NewRow for a query whose text build(p) makes per call (see
// BuildExec).
func BuildRow[P, R any](name string, build func(P) string, args func(P) []any, dest func(*R) []any) *Row[P, R] {
	return &Row[P, R]{scanned[P, R]{newStmt(name, "", build, args), dest}}
}

// One runs the query with params p on db and returns its row; with no
// row, an error wrapping pgx.ErrNoRows. Errors are wrapped with the
// query's name; R is the zero value on error.
func (q *Row[P, R]) One(ctx context.Context, db Querier, p P) (R, error) {
	var r R
	if err := db.QueryRow(ctx, q.SQL(p), q.argsOf(p)...).Scan(q.dest(&r)...); err != nil {
		var zero R
		return zero, q.wrap(err)
	}
	return r, nil
}

// Find is One for a row that may not be there: false, and no error, when
// there is none.
func (q *Row[P, R]) Find(ctx context.Context, db Querier, p P) (R, bool, error) {
	r, err := q.One(ctx, db, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}
