package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/sqlhandler"
)

func (checkingCatalog) CheckRemoteSQL(stmt string) error {
	_, err := sqlhandler.ParseRemote(stmt)
	return err
}

// remoteYAML is sqlYAML plus a remote handler in the billing service's
// pool, after its SQL handlers.
var remoteYAML = strings.NewReplacer("    pools:\n      - name: billing-events", `    remote_handlers:
      - name: billing.charge
        events: [order.order.placed.v1]
        url: http://127.0.0.1:8090/handle
        headers: {Authorization: "Bearer ${X}", X-Team: billing}
        statements:
          open_invoice: |
            INSERT INTO invoice (order_id, total, opened_at)
            VALUES (@order_id::uuid, @total::numeric, @occurred_at)
          note: "UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid"
    pools:
      - name: billing-events`,
	"handlers: [billing.open_invoice, billing.audit]", "handlers: [billing.open_invoice, billing.audit, billing.charge]").Replace(sqlYAML)

func TestRemoteHandlersValid(t *testing.T) {
	t.Parallel()
	c, err := parseSQL(t, remoteYAML)
	require.NoError(t, err)
	s, _ := c.Service("billing")
	require.Len(t, s.RemoteHandlers, 1)
	h := s.RemoteHandlers[0]
	require.Equal(t, "services[2].remote_handlers[0]", h.KeyPath())
	require.Equal(t, RemoteTimeoutDefault, h.Timeout, "default timeout")
	require.Equal(t, map[string]string{"Authorization": "Bearer expanded", "X-Team": "billing"}, h.Headers, "headers expanded")
	require.Equal(t, []string{"note", "open_invoice"}, h.StatementNames())
	require.Contains(t, string(h.Statements["open_invoice"]), "@total::numeric", "statements taken as written")

	c, err = parseSQL(t, edit(t, remoteYAML, "url: http://127.0.0.1:8090/handle", "url: http://127.0.0.1:8090/handle\n        timeout: 250ms"))
	require.NoError(t, err)
	s, _ = c.Service("billing")
	require.Equal(t, 250*time.Millisecond, s.RemoteHandlers[0].Timeout)
}

// Every mistake named with its key's path.
func TestRemoteHandlerMistakes(t *testing.T) {
	t.Parallel()
	const h0 = "services[2].remote_handlers[0]"
	const url = "url: http://127.0.0.1:8090/handle\n"
	for _, tt := range []struct {
		name  string
		edits []string
		path  string
		msg   string
	}{
		{"NoURL", []string{"        " + url, ""}, h0 + ".url", "must not be empty"},
		{"BadScheme", []string{url, "url: ftp://127.0.0.1/handle\n"}, h0 + ".url", "the scheme must be http or https"},
		{"NotAURL", []string{url, "url: \"http://[::1\"\n"}, h0 + ".url", "invalid URL"},
		{"NoHost", []string{url, "url: http:///handle\n"}, h0 + ".url", "no host"},
		{"Credentials", []string{url, "url: http://u:p@127.0.0.1/handle\n"}, h0 + ".url", "must not hold credentials"},
		{"TLSOnHTTP", []string{url, url + "        tls: {ca_file: billing/migrations/001_invoice.sql}\n"}, h0 + ".tls", "is not https"},
		{"TLSFileMissing", []string{url, "url: https://127.0.0.1/handle\n        tls: {ca_file: nope.pem}\n"}, h0 + ".tls.ca_file", "does not exist"},
		{"TLSCertWithoutKey", []string{url, "url: https://127.0.0.1/handle\n        tls: {cert_file: billing/migrations/001_invoice.sql}\n"}, h0 + ".tls", "cert_file and key_file go together"},
		{"TLSCANotPEM", []string{url, "url: https://127.0.0.1/handle\n        tls: {ca_file: billing/migrations/001_invoice.sql}\n"}, h0 + ".tls.ca_file", "no PEM certificate"},
		{"ZeroTimeout", []string{url, url + "        timeout: 0s\n"}, h0 + ".timeout", "must be positive"},
		{"NegativeMaxInFlight", []string{url, url + "        max_in_flight: -1\n"}, h0 + ".max_in_flight", "must be between 0"},
		{"UnknownConcurrency", []string{url, url + "        concurrency: fast\n"}, h0 + ".concurrency", `must be "adaptive" or absent`},
		{"BadTimeout", []string{url, url + "        timeout: soon\n"}, h0 + ".timeout", ""},
		{"NoStatements", []string{`        statements:
          open_invoice: |
            INSERT INTO invoice (order_id, total, opened_at)
            VALUES (@order_id::uuid, @total::numeric, @occurred_at)
          note: "UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid"
`, ""}, h0 + ".statements", "at least one statement is required"},
		{"EmptyStatement", []string{`note: "UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid"`, `note: " "`},
			h0 + ".statements.note", "empty statement"},
		{"NullStatement", []string{`note: "UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid"`, `note: "-- nothing"`},
			h0 + ".statements.note", "empty statement"},
		{"PositionalParameter", []string{"@note WHERE", "$1 WHERE"}, h0 + ".statements.note", "positional parameter $1"},
		{"Commit", []string{`note: "UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid"`, `note: COMMIT`},
			h0 + ".statements.note", "COMMIT is not allowed"},
		{"BadStatementName", []string{`note: "UPDATE`, `"no te": "UPDATE`}, h0 + ".statements.no te", "invalid statement name"},
		{"NameOfAGoHandler", []string{"name: billing.charge", "name: stock.reserve", "billing.audit, billing.charge]", "billing.audit]"},
			h0 + ".name", `handler name "stock.reserve" is taken by a Go handler of this binary`},
		{"NameOfASQLHandler", []string{"name: billing.charge", "name: billing.audit", "billing.audit, billing.charge]", "billing.audit]"},
			h0 + ".name", `duplicate handler name "billing.audit" (also services[2].sql_handlers[1])`},
		{"EmptyEventList", []string{"events: [order.order.placed.v1]\n        url", "events: []\n        url"}, h0 + ".events", "at least one event name is required"},
		{"ReservedHeader", []string{"X-Team: billing", "Content-Type: text/plain"}, h0 + ".headers.Content-Type", "is set by platformd"},
		{"UnknownKey", []string{url, url + "        retries: 3\n"}, h0 + ".retries", "unknown key"},
		{"OtherServicesRemoteHandler", []string{"handlers: [stock.reserve]", "handlers: [stock.reserve, billing.charge]"},
			"services[0].pools[0].handlers[1]", `remote handler "billing.charge" belongs to service "billing" (services[2].remote_handlers[0])`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseSQL(t, edit(t, remoteYAML, tt.edits...))
			ps := requireProblems(t, err)
			if tt.name != "TLSOnHTTP" { // its CA file is not PEM either
				require.Len(t, ps, 1, "problems: %v", ps)
			}
			require.Equal(t, tt.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tt.msg)
		})
	}
}

// A statement named twice is a YAML mistake the parser itself refuses,
// with the line of the second.
func TestRemoteHandlerStatementNamedTwice(t *testing.T) {
	t.Parallel()
	_, err := parseSQL(t, edit(t, remoteYAML, `note: "UPDATE`, `open_invoice: "UPDATE`))
	require.ErrorContains(t, err, `mapping key "open_invoice" already defined`)
}
