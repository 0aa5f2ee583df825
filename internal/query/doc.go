// Package query is platformd's small, hand-written query layer: every SQL
// statement platformd runs on a service database is a named value declared
// once, next to the code that owns its table (internal/dedup/queries.go,
// internal/state/queries.go...), with a params struct in and typed rows out.
// River's riverdriver is the model (one method per query, taking a
// …Params struct, errors translated at the boundary); here a query is a
// value instead of a method, and no code generator runs.
//
// Three kinds, by what the statement returns:
//
//   - Exec[P]: no rows (INSERT, UPDATE, DELETE, DDL, SET, advisory locks);
//     Run returns the command tag.
//   - Row[P, R]: one row; One returns it (pgx.ErrNoRows, wrapped, when
//     there is none), Find returns false instead.
//   - Rows[P, R]: any number of rows; All collects them, Each calls a
//     function per row without allocating per row (the dedup insert, the
//     hot path, runs through Each).
//
// P is the params struct, turned into the statement's arguments ($1, $2...)
// by the query's args function; R is the row type, whose scan targets the
// query's dest function names once per call.
//
// Each query has a Name, "owner.what" in lower case (dedup.insert_processed,
// state.upsert_horizon), unique across the binary. Running it:
//
//   - sends the SQL prefixed with a comment naming it,
//     "/* platformd:dedup.insert_processed */ INSERT ...", so that an
//     operator sees which query runs in pg_stat_activity.query,
//     pg_stat_statements.query and the server's statement logs
//     (docs/operations.md, "Which query is that?");
//   - wraps any error with the name: "dedup.insert_processed: <pgx error>",
//     the *pgconn.PgError still reachable with errors.As (dbutil.Classify
//     works through it) and pgx.ErrNoRows with errors.Is.
//
// The statement goes through the Querier's own Exec/Query/QueryRow, so it
// runs in whatever query exec mode the connection is configured with
// (pgx's statement cache by default, QueryExecModeExec or the simple
// protocol behind a transaction-mode PgBouncer): nothing here prepares a
// named statement. Statement text whose identifiers are only known at run
// time (a partition's name, a database's) comes from a builder function
// given to BuildExec or BuildRow; values still travel as arguments.
//
// Queries are safe for concurrent use; they hold no state after their
// declaration.
package query
