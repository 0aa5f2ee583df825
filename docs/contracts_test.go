package docs_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/replay"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

// contracts returns docs/contracts.md, the contracts other programs rely
// on; the tests below keep the parts a test can read true to the code.
func contracts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text under the heading that starts with prefix, up to
// the next heading of the same or a higher level.
func section(t *testing.T, text, prefix string) string {
	t.Helper()
	i := strings.Index(text, "\n"+prefix)
	if i < 0 {
		t.Fatalf("contracts.md has no heading %q", prefix)
	}
	level := strings.Count(strings.Fields(prefix)[0], "#")
	rest := text[i+1:]
	body := rest[strings.Index(rest, "\n")+1:]
	for _, line := range strings.SplitAfter(body, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.Trim(f[0], "#") == "" && len(f[0]) <= level {
			return body[:strings.Index(body, line)]
		}
	}
	return body
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// spans returns the code spans of text.
func spans(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// Every RPC of the admin service is a contract: the admin section names
// each, so an RPC added without its line fails here.
func TestContractsNameEveryAdminRPC(t *testing.T) {
	admin := section(t, contracts(t), "## Admin API")
	named := spans(admin)
	methods := adminv1.File_platform_admin_v1_admin_proto.Services().ByName("AdminService").Methods()
	for i := range methods.Len() {
		if name := string(methods.Get(i).Name()); !slices.Contains(named, name) {
			t.Errorf("contracts.md, Admin API: RPC %s is not named", name)
		}
	}
}

// The headers the topology section names are the broker package's, both
// ways: a header renamed in code, or documented and never sent, fails.
func TestContractsHeadersAreTheBrokers(t *testing.T) {
	topo := section(t, contracts(t), "## Topology")
	code := []string{
		broker.HeaderAttempt, broker.HeaderFailureReason, broker.HeaderError, broker.HeaderFailedAt,
		broker.HeaderOriginalRoutingKey, broker.HeaderPool, broker.HeaderReplay, broker.HeaderBeyondHorizonOverride,
		failure.HeaderFailureID,
	}
	var documented []string
	for _, s := range spans(topo) {
		if strings.HasPrefix(s, "x-") && !strings.HasPrefix(s, "x-message-ttl") && !strings.HasPrefix(s, "x-dead-letter") && !strings.HasPrefix(s, "x-overflow") && !strings.HasPrefix(s, "x-queue-type") {
			documented = append(documented, strings.Fields(s)[0])
		}
	}
	for _, h := range code {
		if !slices.Contains(documented, h) {
			t.Errorf("contracts.md, Topology: header %s is not documented", h)
		}
	}
	for _, h := range documented {
		if !slices.Contains(code, h) {
			t.Errorf("contracts.md, Topology: header %s is not one the broker package sends", h)
		}
	}
}

// The tables section lists every column of each table other programs
// read, and the migrations make exactly those: a column added by a
// migration without its line here, or documented and gone, fails.
func TestContractsTablesAreTheMigrations(t *testing.T) {
	tables := section(t, contracts(t), "## Tables")
	dsn := testdb.New(t, "docs_contracts")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sets := []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}}
	if err := migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	n := 0
	for _, line := range strings.Split(tables, "\n") {
		if !strings.HasPrefix(line, "### ") {
			continue
		}
		name := spans(line)[0]
		doc := section(t, tables, line)
		_, cols, ok := strings.Cut(doc, "Columns:")
		if !ok {
			t.Errorf("contracts.md, table %s: no \"Columns:\" line", name)
			continue
		}
		cols, _, _ = strings.Cut(cols, ".\n")
		schema, table, found := strings.Cut(name, ".")
		if !found {
			schema, table = "public", name
		}
		rows, err := conn.Query(ctx, `SELECT column_name FROM information_schema.columns
			WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
		if err != nil {
			t.Fatal(err)
		}
		actual, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		documented := spans(cols)
		slices.Sort(actual)
		slices.Sort(documented)
		if !slices.Equal(actual, documented) {
			t.Errorf("contracts.md, table %s:\n documented %v\n migrations %v", name, documented, actual)
		}
		n++
	}
	if n < 4 {
		t.Errorf("contracts.md, Tables: %d tables, want at least processed_event, outbox, outbox_archive, failed_event", n)
	}
}

// The configuration sample of the contracts loads as written (with the
// handler names it uses known), so it cannot drift from the loader.
func TestContractsConfigSampleLoads(t *testing.T) {
	cfgText := section(t, contracts(t), "## Configuration")
	_, block, ok := strings.Cut(cfgText, "```yaml\n")
	if !ok {
		t.Fatal("contracts.md, Configuration: no yaml block")
	}
	block, _, _ = strings.Cut(block, "```")
	t.Setenv("PLATFORMD_ADMIN_TOKEN", "a-token-for-the-sample")
	_, err := config.Parse("contracts.md", []byte(block), catalog{"stock.reserve": {"order.order.placed.v1"}})
	if err != nil {
		t.Fatalf("contracts.md, Configuration: the sample does not load: %v", err)
	}
}

type catalog map[string][]string

func (c catalog) HandlerEvents(name string) ([]string, bool) {
	ev, ok := c[name]
	return ev, ok
}

// The lease rows other programs may watch are named in the tables
// section as the code names them.
func TestContractsNameTheLeases(t *testing.T) {
	tables := section(t, contracts(t), "## Tables")
	named := spans(tables)
	for _, name := range []string{outbox.LeaseName, scheduler.PurgeLockName("<service>"), replay.LeaseName, failure.RetryLeaseName} {
		if !slices.Contains(named, name) {
			t.Errorf("contracts.md, Tables: lease %s is not named", name)
		}
	}
}
