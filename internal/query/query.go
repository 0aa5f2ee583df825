package query

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: pgx.Tx, *pgxpool.Pool, *pgxpool.Conn and
// *pgx.Conn are Queriers, and so is any package's interface of these three
// methods (internal/session's, internal/lease's).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// NoParams is the params type of a query that takes no arguments.
type NoParams = struct{}

// Column is a dest function for a query returning one column of type T:
// NewRow(name, sql, args, Column[int64]).
func Column[T any](r *T) []any { return []any{r} }

// Comment is the comment every statement of the query named name starts
// with, "/* platformd:<name> */ ", by which an operator finds it in
// pg_stat_activity and pg_stat_statements.
func Comment(name string) string { return "/* platformd:" + name + " */ " }

// nameRE is a query's name: lower-case words joined by dots, the first
// naming the owner. It can hold neither "*/" nor "$", so it can end
// neither the comment nor look like a placeholder.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

// registry holds every query name declared, so that two queries never
// share one (pg_stat_activity would not tell them apart).
var registry = struct {
	sync.Mutex
	names map[string]struct{}
}{names: map[string]struct{}{}}

// register checks name and records it. A bad or duplicate name is a
// programming error in a package-level declaration: it panics, so that
// any test of the binary finds it.
func register(name string) {
	if !nameRE.MatchString(name) {
		panic(fmt.Sprintf("query: name %q is not lower-case words joined by dots (owner.what)", name))
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.names[name]; dup {
		panic(fmt.Sprintf("query: %q declared twice", name))
	}
	registry.names[name] = struct{}{}
}

// Names returns the names of every query declared so far in the binary,
// sorted. It is safe for concurrent use.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	out := make([]string, 0, len(registry.names))
	for n := range registry.names {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// stmt is what the three kinds of query share: a name, the statement's
// text (static, comment included, or built per call) and the params'
// arguments.
type stmt[P any] struct {
	name  string
	sql   string         // the static text, Comment(name) included
	build func(P) string // the text built per call, when set
	args  func(P) []any
}

// scanned is what Row and Rows add to stmt: dest(r), the scan targets of
// r for the query's columns, in order.
type scanned[P, R any] struct {
	stmt[P]
	dest func(*R) []any
}

func newStmt[P any](name, sql string, build func(P) string, args func(P) []any) stmt[P] {
	register(name)
	if build == nil && strings.TrimSpace(sql) == "" {
		panic(fmt.Sprintf("query: %s has no SQL", name))
	}
	s := stmt[P]{name: name, build: build, args: args}
	if build == nil {
		s.sql = Comment(name) + sql
	}
	return s
}

// Name returns the query's name.
func (s *stmt[P]) Name() string { return s.name }

// SQL returns the statement's text as sent for params p, its comment
// included.
func (s *stmt[P]) SQL(p P) string {
	if s.build != nil {
		return Comment(s.name) + s.build(p)
	}
	return s.sql
}

func (s *stmt[P]) argsOf(p P) []any {
	if s.args == nil {
		return nil
	}
	return s.args(p)
}

// wrap names the query in err.
func (s *stmt[P]) wrap(err error) error { return fmt.Errorf("%s: %w", s.name, err) }
