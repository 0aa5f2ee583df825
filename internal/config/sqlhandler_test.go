package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/sqlhandler"
)

// checkingCatalog is the test catalog that also checks statements, as the
// daemon's does.
type checkingCatalog struct{ testCatalog }

func (checkingCatalog) CheckSQL(stmt string) error {
	_, err := sqlhandler.Parse(stmt)
	return err
}

// sqlYAML is baseYAML plus a service with SQL handlers only; its
// migrations folder is created by parseSQL.
const sqlYAML = baseYAML + `  - name: billing
    database: postgres://postgres@127.0.0.1:5432/billing
    migrations: billing/migrations
    sql_handlers:
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        sql:
          - |
            INSERT INTO invoice (order_id, customer_id, opened_at)
            VALUES ((@payload->>'order_id')::uuid, (@payload->>'customer_id')::uuid, @occurred_at)
      - name: billing.audit
        events: [order.order.placed.v1, order.order.cancelled.v1]
        sql:
          - INSERT INTO audit (event_id, name) VALUES (@event_id, @event_name)
          - "UPDATE counters SET n = n + 1 WHERE name = @routing_key"
    pools:
      - name: billing-events
        queue: billing.events
        bindings: [order.order.placed.v1, order.order.cancelled.v1]
        handlers: [billing.open_invoice, billing.audit]
`

// parseSQL writes data as dir/platformd.yaml, with a migrations folder
// billing/migrations holding one file, and loads it with the test catalog.
func parseSQL(t *testing.T, data string) (*Config, error) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "billing", "migrations"), 0o755))
	writeFile(t, filepath.Join(dir, "billing", "migrations"), "001_invoice.sql", "-- +goose Up\nCREATE TABLE invoice (order_id uuid);\n")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "empty"), 0o755))
	path := writeFile(t, dir, "platformd.yaml", data)
	return load(path, checkingCatalog{catalog}, env{"X": "expanded"}.lookup)
}

func TestSQLHandlersValid(t *testing.T) {
	t.Parallel()
	c, err := parseSQL(t, sqlYAML)
	require.NoError(t, err)
	s, ok := c.Service("billing")
	require.True(t, ok)
	require.True(t, filepath.IsAbs(s.Migrations) || filepath.Dir(s.Migrations) != "billing", "resolved against the config's folder")
	require.DirExists(t, s.Migrations)
	require.Len(t, s.SQLHandlers, 2)
	h := s.SQLHandlers[1]
	require.Equal(t, "billing.audit", h.Name)
	require.Equal(t, "services[2].sql_handlers[1]", h.KeyPath())
	require.Equal(t, []string{"order.order.placed.v1", "order.order.cancelled.v1"}, h.Events)
	require.Equal(t, []string{
		"INSERT INTO audit (event_id, name) VALUES (@event_id, @event_name)",
		"UPDATE counters SET n = n + 1 WHERE name = @routing_key",
	}, h.Statements())
	require.Contains(t, s.SQLHandlers[0].Statements()[0], "VALUES ((@payload->>'order_id')::uuid")
}

// SQL is taken as written: $$ and ${...} are SQL, not the config's
// environment references (which still apply everywhere else).
func TestSQLStatementsAreNotExpanded(t *testing.T) {
	t.Parallel()
	data := edit(t, sqlYAML,
		"UPDATE counters SET n = n + 1 WHERE name = @routing_key",
		`SELECT $$ ${X} $$, $${X}$$`,
		"database: postgres://postgres@127.0.0.1:5432/billing", "database: postgres://postgres@127.0.0.1:5432/${X}")
	c, err := parseSQL(t, data)
	require.NoError(t, err)
	s, _ := c.Service("billing")
	require.Equal(t, `SELECT $$ ${X} $$, $${X}$$`, s.SQLHandlers[1].Statements()[1])
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/expanded", s.Database)
}

// Every mistake named with its key's path.
func TestSQLHandlerMistakes(t *testing.T) {
	t.Parallel()
	const h0 = "services[2].sql_handlers[0]"
	for _, tt := range []struct {
		name  string
		edits []string
		path  string
		msg   string
	}{
		{"UnknownParameter", []string{"(@payload->>'customer_id')", "(@paylod->>'customer_id')"},
			h0 + ".sql[0]", "unknown parameter @paylod; the parameters are @event_id, @event_name, @occurred_at, @payload, @attempt, @routing_key, @traceparent (line 2, column 41)"},
		{"EmptyStatement", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- "  "`},
			"services[2].sql_handlers[1].sql[1]", "empty statement"},
		{"CommentOnlyStatement", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- "-- later"`},
			"services[2].sql_handlers[1].sql[1]", "empty statement"},
		{"NoStatements", []string{`          - INSERT INTO audit (event_id, name) VALUES (@event_id, @event_name)
          - "UPDATE counters SET n = n + 1 WHERE name = @routing_key"
`, ""},
			"services[2].sql_handlers[1].sql", "at least one statement is required"},
		{"PlainScalarOfSeveralLines", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, "- DELETE FROM counters -- the name's\n            WHERE name = @routing_key"},
			"services[2].sql_handlers[1].sql[1]", "must be a literal block scalar (`|`)"},
		{"QuotedScalarOfSeveralLines", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, "- \"UPDATE counters SET n = n + 1\n            WHERE name = @routing_key\""},
			"services[2].sql_handlers[1].sql[1]", "must be a literal block scalar (`|`)"},
		{"FoldedBlock", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, "- >\n            DELETE FROM counters -- the name's\n            WHERE name = @routing_key"},
			"services[2].sql_handlers[1].sql[1]", "must be a literal block scalar (`|`)"},
		{"StatementNotAString", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- {a: 1}`},
			"services[2].sql_handlers[1].sql[1]", "must be a string"},
		{"Commit", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- COMMIT`},
			"services[2].sql_handlers[1].sql[1]", "COMMIT is not allowed in a SQL handler"},
		{"Isolation", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- SET TRANSACTION ISOLATION LEVEL SERIALIZABLE`},
			"services[2].sql_handlers[1].sql[1]", "SET is not allowed in a SQL handler"},
		{"TwoStatementsInOne", []string{`- "UPDATE counters SET n = n + 1 WHERE name = @routing_key"`, `- "SELECT 1; SELECT 2"`},
			"services[2].sql_handlers[1].sql[1]", "more than one statement: give each its own entry of sql"},
		{"PositionalParameter", []string{"WHERE name = @routing_key", "WHERE name = $1"},
			"services[2].sql_handlers[1].sql[1]", "positional parameter $1"},
		{"DuplicateName", []string{"name: billing.audit", "name: billing.open_invoice", "handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice]"},
			"services[2].sql_handlers[1].name", `duplicate handler name "billing.open_invoice" (also services[2].sql_handlers[0])`},
		{"NameOfAGoHandler", []string{"name: billing.audit", "name: stock.reserve", "handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice]"},
			"services[2].sql_handlers[1].name", `handler name "stock.reserve" is taken by a Go handler of this binary`},
		{"EmptyName", []string{"name: billing.audit", `name: ""`, "handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice]"},
			"services[2].sql_handlers[1].name", "must not be empty"},
		{"BadName", []string{"name: billing.audit", `name: Billing.Audit`, "handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice]"},
			"services[2].sql_handlers[1].name", `invalid handler name "Billing.Audit"`},
		{"EmptyEventList", []string{"events: [order.order.placed.v1, order.order.cancelled.v1]", "events: []"},
			"services[2].sql_handlers[1].events", "at least one event name is required"},
		{"NoEventList", []string{"        events: [order.order.placed.v1, order.order.cancelled.v1]\n", ""},
			"services[2].sql_handlers[1].events", "at least one event name is required"},
		{"EmptyEvent", []string{"events: [order.order.placed.v1, order.order.cancelled.v1]", `events: [order.order.placed.v1, ""]`},
			"services[2].sql_handlers[1].events[1]", "must not be empty"},
		{"WildcardEvent", []string{"events: [order.order.placed.v1, order.order.cancelled.v1]", `events: ["order.#"]`},
			"services[2].sql_handlers[1].events[0]", "an event name is matched exactly"},
		{"DuplicateEvent", []string{"events: [order.order.placed.v1, order.order.cancelled.v1]", `events: [order.order.placed.v1, order.order.placed.v1]`},
			"services[2].sql_handlers[1].events[1]", `duplicate event "order.order.placed.v1" (also events[0])`},
		{"EventNotRouted", []string{"bindings: [order.order.placed.v1, order.order.cancelled.v1]", "bindings: [order.order.placed.v1]"},
			"services[2].pools[0].handlers[1]", `handler "billing.audit" handles event "order.order.cancelled.v1", which no binding of the pool routes`},
		{"UnknownHandler", []string{"handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice, billing.audti]"},
			"services[2].pools[0].handlers[1]", `unknown handler "billing.audti"`},
		{"OtherServicesSQLHandler", []string{"handlers: [stock.reserve]", "handlers: [stock.reserve, billing.audit]", "bindings: [order.order.placed.v1]\n        handlers: [stock.reserve, billing.audit]", "bindings: [\"order.order.*.v1\"]\n        handlers: [stock.reserve, billing.audit]"},
			"services[0].pools[0].handlers[1]", `SQL handler "billing.audit" belongs to service "billing" (services[2].sql_handlers[1]): a pool runs only its own service's SQL handlers`},
		{"MigrationsMissing", []string{"migrations: billing/migrations", "migrations: billing/nope"},
			"services[2].migrations", `does not exist`},
		{"MigrationsEmptyFolder", []string{"migrations: billing/migrations", "migrations: empty"},
			"services[2].migrations", `no goose SQL files (NNN_name.sql) in`},
		{"MigrationsAFile", []string{"migrations: billing/migrations", "migrations: billing/migrations/001_invoice.sql"},
			"services[2].migrations", `is not a folder of goose SQL files`},
		{"MigrationsEmpty", []string{"migrations: billing/migrations", `migrations: ""`},
			"services[2].migrations", `must not be empty`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSQL(t, edit(t, sqlYAML, tt.edits...))
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "problems: %v", ps)
			require.Equal(t, tt.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tt.msg)
		})
	}
}

// Without a catalog (tools that only read the config), the SQL handlers'
// names and events are still checked, other handler names are not, and
// the statements' insides are left to the daemon.
func TestSQLHandlersWithoutCatalog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "billing", "migrations"), 0o755))
	writeFile(t, filepath.Join(dir, "billing", "migrations"), "001_invoice.sql", "-- +goose Up\nSELECT 1;\n")
	path := writeFile(t, dir, "platformd.yaml", edit(t, sqlYAML, "handlers: [stock.reserve]", "handlers: [anything]"))
	_, err := load(path, nil, env{}.lookup)
	require.NoError(t, err)
	path = writeFile(t, dir, "bad.yaml", edit(t, sqlYAML, "@event_name", "@name"))
	_, err = load(path, nil, env{}.lookup)
	require.NoError(t, err, "statements are checked only by a catalog that can (SQLChecker)")
}
