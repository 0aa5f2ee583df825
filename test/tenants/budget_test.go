package tenants

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/testdb"
)

// The budget proof's load: budgetServices services, each one pool of
// concurrency budgetConcurrency taking one event per transaction (so each
// would grow to budgetConcurrency connections beside its control
// session), budgetEvents events fanned out to every service, under
// database_budget.max_conns budgetMax.
const (
	budgetServices    = 3
	budgetConcurrency = 4
	budgetEvents      = 240
	budgetMax         = 5
	budgetEvent       = "tenants.budget.v1"
)

// TestDatabaseBudgetCapsTheDaemon: three services whose pools would grow
// to 5 connections each (15 at once) under a fan-out. Without a budget the
// daemon's peak on their databases is above 5, which is what makes the
// second half mean something; with database_budget.max_conns: 5 it never
// is, every event is still applied exactly once in each service, and the
// dials that waited show in platformd_database_budget_waits_total. The
// peak is sampled from pg_stat_activity every 20 ms, counting the
// daemon's sessions (application_name platformd*) on the three databases.
func TestDatabaseBudgetCapsTheDaemon(t *testing.T) {
	t.Parallel()
	var unbudgeted int
	t.Run("without a budget", func(t *testing.T) {
		var metrics string
		unbudgeted, metrics = runBudgetLoad(t, 0)
		require.NotContains(t, metrics, "platformd_database_budget", "no budget, no series")
		require.Greater(t, unbudgeted, budgetMax, "the load must need more than the budget, or the budget's half proves nothing")
	})
	t.Run("with a budget", func(t *testing.T) {
		peak, metrics := runBudgetLoad(t, budgetMax)
		require.LessOrEqual(t, peak, budgetMax, "connections to the services' databases under database_budget.max_conns")
		require.Regexp(t, `(?m)^platformd_database_budget_waits_total [1-9]`, metrics, "dials waited for the budget")
		require.Regexp(t, `(?m)^platformd_database_budget_conns [1-5]$`, metrics)
		t.Logf("peak without a budget %d, with max_conns %d: %d", unbudgeted, budgetMax, peak)
	})
}

// runBudgetLoad starts a daemon hosting budgetServices services on fresh
// databases under database_budget.max_conns maxConns (0: none), publishes
// budgetEvents events that reach every service, waits until each applied
// them all, checks each was applied once, and returns the most daemon
// connections seen on the services' databases meanwhile and the daemon's
// metrics at the end.
func runBudgetLoad(t *testing.T, maxConns int) (peak int, metrics string) {
	t.Helper()
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	exchange := "tenants.budget." + suffix
	dir := appliedMigrations(t)

	var sb strings.Builder
	fmt.Fprintf(&sb, `log: {level: warn}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "127.0.0.1:0"}
broker: {url: %q, exchange: %q}
database_budget: {max_conns: %d}
services:
`, amqpURL, exchange, maxConns)
	dbs := make([]string, budgetServices)
	dsns := make([]string, budgetServices)
	for i := range budgetServices {
		dsns[i] = testdb.New(t, "tenants_budget")
		cc, err := pgx.ParseConfig(dsns[i])
		require.NoError(t, err)
		dbs[i] = cc.Database
		queue := fmt.Sprintf("%s.%d", exchange, i)
		t.Cleanup(func() { deleteQueue(t, queue, exchange) })
		fmt.Fprintf(&sb, `  - name: budget%[1]d
    database: %[2]q
    migrations: %[3]q
    sql_handlers:
      - name: budget%[1]d.apply
        events: [%[4]s]
        sql:
          - "SELECT pg_sleep(0.01)"
          - "INSERT INTO applied (event_id, n) VALUES (@event_id, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"
    pools:
      - name: budget%[1]d-events
        queue: %[5]q
        queue_type: classic
        bindings: [%[4]s]
        handlers: [budget%[1]d.apply]
        concurrency: %[6]d
        batch: {size: 1}
        retry: {delays: [1s]}
`, i, dsns[i], dir, budgetEvent, queue, budgetConcurrency)
	}
	d := daemontest.StartYAML(t, sb.String(), consumer.NewRegistry())

	stopSampling := sampleDaemonPeak(t, dbs)
	publish(t, exchange, budgetEvent, budgetEvents)
	checkers := make([]*pgx.Conn, budgetServices)
	for i, dsn := range dsns {
		c, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(ctx) })
		checkers[i] = c
	}
	start := time.Now()
	for i, c := range checkers {
		require.Eventually(t, func() bool {
			var got int
			require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&got))
			return got == budgetEvents
		}, 30*time.Second, 50*time.Millisecond, "service %d applies every event", i)
	}
	took := time.Since(start)
	peak = stopSampling()
	for i, c := range checkers {
		var rows, most, recorded int
		require.NoError(t, c.QueryRow(ctx, `SELECT count(*), coalesce(max(n), 0), (SELECT count(*) FROM processed_event) FROM applied`).Scan(&rows, &most, &recorded))
		require.Equal(t, budgetEvents, rows, "service %d: events applied", i)
		require.Equal(t, 1, most, "service %d: no event applied twice", i)
		require.Equal(t, budgetEvents, recorded, "service %d: events recorded in processed_event", i)
	}
	t.Logf("max_conns %d: %d events in each of %d services applied once after %s; at most %d daemon connections on their databases",
		maxConns, budgetEvents, budgetServices, took.Round(time.Millisecond), peak)
	return peak, scrape(t, d.MetricsAddr())
}

// sampleDaemonPeak samples, every 20 ms on a connection of its own, the
// daemon's sessions on dbs until the returned function is called, which
// returns the most seen.
func sampleDaemonPeak(t *testing.T, dbs []string) func() int {
	t.Helper()
	ctx := context.Background()
	sampler, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	peak := 0
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var c int
			if sampler.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = ANY($1) AND application_name LIKE 'platformd%'`, dbs).Scan(&c) == nil {
				peak = max(peak, c)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	return func() int {
		close(stop)
		<-done
		_ = sampler.Close(ctx)
		return peak
	}
}

// scrape returns the daemon's metrics page.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
