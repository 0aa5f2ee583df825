package sqlhandler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/consumer"
)

// A handler whose only statement is an INSERT of the rows of a query
// (INSERT INTO t [(cols)] SELECT ... | VALUES ...) can run once per batch
// instead of once per event: the same query, as a LATERAL subquery, over
// the batch's events unnest'ed from one array per parameter, in delivery
// order. PostgreSQL's cost of a statement (about 15 us of CPU for an
// INSERT here, whatever its rows) is then paid once per batch.
//
// The effects are those of running the statement event by event only
// when no event's statement could see, or be seen by, another's, and
// nothing counts statements. So the batch form is used only when:
//   - statically, the statement is that INSERT shape: no WITH before it,
//     no ON CONFLICT (a row may not be touched twice by one statement),
//     no RETURNING, no alias, no OVERRIDING, no top-level ON;
//   - statically too, it names none of PostgreSQL's functions that run SQL
//     of their own (query_to_xml and the like, ts_stat) or differ between
//     statements (statement_timestamp);
//   - at start (Prepare), its query reads no table, view or sequence and
//     uses only PostgreSQL's own functions, operators and types,
//     enumerations and platform.uuid_v7() (the dependencies of a temporary
//     view of it, which PostgreSQL records for every object but its own);
//   - at every batch, checked by the statement itself before any row: the
//     target is an ordinary table without triggers (but the internal ones
//     of its constraints, a foreign key to itself excepted), rules or row
//     security, and its columns' types, defaults, generated columns,
//     constraints and indexes involve no function, operator or type of
//     the database's own. A table changed since start fails that guard:
//     the dedup step replays that batch event by event, and the handler
//     runs its next batches statement by statement for batchRetry before
//     it tries the batch form again.
//
// Row order is kept: the events' rows come out of a nested loop over the
// events in order (the subquery is fenced with OFFSET 0, so its own FROM
// items cannot be joined around the events). Any error of the batch form
// aborts the transaction and the dedup step replays the batch event by
// event through Handle, whose statements run one by one.

// batchGuardMark marks the guard's failure in its error message.
const batchGuardMark = "platformd batch guard: "

// batchRetry is how long a handler whose guard failed runs its batches
// statement by statement before trying the batch form again.
const batchRetry = time.Minute

// sqlRunners are built-in functions that run SQL text of their own (which
// could read the target) or whose value differs between statements.
var sqlRunners = []string{
	"query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
	"cursor_to_xml", "cursor_to_xmlschema",
	"table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema",
	"schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema",
	"database_to_xml", "database_to_xmlschema", "database_to_xml_and_xmlschema",
	"ts_stat", "statement_timestamp",
}

// batchForm is a statement's batch form.
type batchForm struct {
	// sql runs the statement for every event of a batch.
	sql string
	// check is the query whose dependencies Prepare inspects.
	check string
	// guard is the target table's condition (batchGuard).
	guard string
}

// eventAlias and rowsAlias name the unnest'ed events and the statement's
// rows in the batch form; quoted with a space, no statement uses them.
const (
	eventAlias = `"platformd event"`
	rowsAlias  = `"platformd rows"`
)

// newBatchForm returns s's batch form, or why it has none.
func newBatchForm(s *Statement) (*batchForm, string) {
	t := s.top
	word := func(i int, w string) bool { return i < len(t) && !t[i].quoted && t[i].text == w }
	if !word(0, "insert") || !word(1, "into") {
		return nil, "not an INSERT"
	}
	// The target: one to three dotted names.
	i := 2
	for {
		if i >= len(t) || (!t[i].quoted && (t[i].text == "(" || t[i].text == ".")) {
			return nil, "no target table"
		}
		i++
		if !word(i, ".") {
			break
		}
		i++
	}
	target := s.source[t[2].from:t[i-1].to]
	cols := ""
	if word(i, "(") {
		// The column list: up to the next top-level token, which starts the
		// query.
		if i+1 >= len(t) {
			return nil, "no query"
		}
		cols = s.source[t[i].from:t[i+1].from]
		i++
	}
	if i >= len(t) || !(word(i, "select") || word(i, "values") || word(i, "with") || word(i, "(")) {
		return nil, "not INSERT ... SELECT or VALUES"
	}
	from := t[i].from
	for _, k := range t[i:] {
		if !k.quoted && (k.text == "on" || k.text == "returning") {
			return nil, "ON or RETURNING at the top level"
		}
	}
	if len(s.args) == 0 {
		return nil, "no parameter"
	}
	for _, f := range sqlRunners {
		if s.names[f] {
			return nil, "it calls " + f
		}
	}
	query := s.render(from, func(e edit) string { return "(" + eventAlias + "." + slotName(e.p, e.arg) + ")" })
	var unnest, names, nulls []string
	for k, a := range s.args {
		typ := slotType(a)
		unnest = append(unnest, fmt.Sprintf("pg_catalog.unnest($%d::%s[])", k+1, typ))
		names = append(names, slotName(a, s.argName(k)))
		nulls = append(nulls, "NULL::"+typ)
	}
	lateral := "CROSS JOIN LATERAL (SELECT * FROM (\n" + query + "\n) AS \"platformd query\" OFFSET 0) AS " + rowsAlias
	events := "ROWS FROM (" + strings.Join(unnest, ", ") + ") AS " + eventAlias + "(" + strings.Join(names, ", ") + ")"
	targetLit := "'" + strings.ReplaceAll(target, "'", "''") + "'::pg_catalog.regclass"
	return &batchForm{
		sql: "INSERT INTO " + target + " " + cols + "\nSELECT " + rowsAlias + ".* FROM " + events + "\n" + lateral +
			"\nWHERE " + batchGuard(targetLit),
		check: "SELECT 1 FROM (VALUES (" + strings.Join(nulls, ", ") + ")) AS " + eventAlias + "(" + strings.Join(names, ", ") + ")\n" + lateral,
		guard: batchGuard(targetLit),
	}, ""
}

// batchGuard is the condition, evaluated once per execution before any
// row, that the target table is still one the batch form may insert into;
// else it fails with batchGuardMark in its message.
func batchGuard(target string) string {
	// It runs at every batch: each lookup goes through an index, and the
	// triggers are looked at only when the table has some.
	ownCode := `d.refobjid >= 16384 AND (d.refclassid IN ('pg_catalog.pg_proc'::pg_catalog.regclass, 'pg_catalog.pg_operator'::pg_catalog.regclass)
        OR (d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
          AND NOT EXISTS (SELECT FROM pg_catalog.pg_type ty WHERE ty.oid = d.refobjid AND ty.typtype = 'e')))`
	return `(SELECT CASE WHEN c.relkind = 'r' AND NOT c.relrowsecurity AND NOT c.relhasrules
  AND (NOT c.relhastriggers OR NOT EXISTS (SELECT FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid
    AND NOT (t.tgisinternal AND NOT EXISTS (SELECT FROM pg_catalog.pg_constraint k
      WHERE k.oid = t.tgconstraint AND k.contype = 'f' AND k.conrelid = c.oid AND k.confrelid = c.oid))))
  -- the table's columns: of no type of the database's own but enumerations
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
    WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid = c.oid AND ` + ownCode + `)
  -- its defaults, generated columns, constraints and indexes: no code of the database's own
  AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend o JOIN pg_catalog.pg_depend d ON d.classid = o.classid AND d.objid = o.objid
    WHERE o.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND o.refobjid = c.oid
      AND o.classid IN ('pg_catalog.pg_attrdef'::pg_catalog.regclass, 'pg_catalog.pg_constraint'::pg_catalog.regclass, 'pg_catalog.pg_class'::pg_catalog.regclass)
      AND ` + ownCode + `)
  THEN true ELSE ('` + batchGuardMark + `' || c.relname)::int::bool END
FROM pg_catalog.pg_class c WHERE c.oid = ` + target + `)`
}

// slotName is the column of the batch form's events that parameter p (a
// remote statement's argument arg when p is paramArg) reads: the event
// fields' names, or "@arg" quoted (no field's name, and any arg name
// becomes a valid identifier).
func slotName(p param, arg string) string {
	if p == paramArg {
		return `"@` + arg + `"`
	}
	return params[p].Name
}

// slotType is the type parameter p is bound with: text for a remote
// statement's argument.
func slotType(p param) string {
	if p == paramArg {
		return "text"
	}
	return params[p].Type
}

// argName is the argument bound at $k+1 ("" for an event field).
func (s *Statement) argName(k int) string {
	if s.argNames == nil {
		return ""
	}
	return s.argNames[k]
}

// render returns source[from:end] with each parameter replaced by
// repl(its edit).
func (s *Statement) render(from int, repl func(edit) string) string {
	var b strings.Builder
	at := from
	for _, e := range s.edits {
		if e.srcAt < from {
			continue
		}
		b.WriteString(s.source[at:e.srcAt])
		b.WriteString(repl(e))
		at = e.srcAt + e.srcLen
	}
	b.WriteString(s.source[at:s.end])
	return b.String()
}

// checkBatchForm tells whether f may run: its query's dependencies (of a
// temporary view of it, in a transaction rolled back) are PostgreSQL's own
// and none of sqlRunners, the target passes the guard now, and the batch
// form prepares. It returns "" when it may, else why not; err only when
// the connection failed.
func checkBatchForm(ctx context.Context, conn *pgconn.PgConn, f *batchForm) (string, error) {
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK").ReadAll() }()
	for _, step := range []struct{ sql, why string }{
		{"BEGIN", ""},
		{batchCheckView + f.check, "its query cannot be checked"},
		{batchCheckDeps, ""},
		{"SELECT " + f.guard, "its table does not qualify (triggers, rules, row security, or a function, operator or type of its own in its columns, defaults, constraints or indexes)"},
	} {
		res, err := conn.Exec(ctx, step.sql).ReadAll()
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			if step.why == "" {
				return "", err
			}
			return step.why + ": " + pgErr.Message, nil
		case err != nil:
			return "", err
		}
		if step.sql == batchCheckDeps && len(res) == 1 && len(res[0].Rows) == 1 && len(res[0].Rows[0][0]) > 0 {
			return "its query uses " + string(res[0].Rows[0][0]), nil
		}
	}
	if _, err := conn.Exec(ctx, "ROLLBACK").ReadAll(); err != nil {
		return "", err
	}
	if _, err := conn.Prepare(ctx, "", f.sql, nil); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return "its batch form does not prepare: " + pgErr.Message, nil
		}
		return "", err
	}
	return "", nil
}

// runBatchForm runs f for evs: one statement for the whole batch.
func (h *Handler) runBatchForm(ctx context.Context, tx pgx.Tx, f *batchForm, evs []consumer.Event) error {
	s := h.stmts[0]
	args := make([]any, len(s.args))
	for k, a := range s.args {
		args[k] = fields[a].all(evs) // an array per parameter
	}
	_, err := tx.Exec(ctx, f.sql, args...)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, batchGuardMark) {
		// The table changed since start: statement by statement for a
		// while. The failure aborted the transaction: the dedup step
		// replays this batch event by event.
		h.batchOffUntil.Store(time.Now().Add(batchRetry).UnixNano())
		return fmt.Errorf("batch form refused by its guard, the table changed since start: %w", err)
	}
	return classify(0, err)
}
