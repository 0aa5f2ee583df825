package tenants

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/testdb"
)

// TenantsEnv names how many services TestManyTenants hosts; unset, the
// test is skipped.
const TenantsEnv = "PLATFORMD_TENANTS"

// The proof's bounds (issue 31): every service up within upWithin, at most
// idleConnsPerService connections per service once idle.
const (
	upWithin            = 60 * time.Second
	idleConnsPerService = 1.5
	idleSettle          = 15 * time.Second
	// maxIdle is the services' database_pool.max_idle: short, so that the
	// fan-out's burst (every service's workers at once) gives its
	// connections back quickly.
	maxIdle = 2 * time.Second
	// budgetMargin is what the daemon's database_budget leaves of the
	// server's max_connections to other clients: the test's own
	// connections (its sampler, its checks) and some to spare.
	budgetMargin = 30
	// daemonSessions matches the application_name of every session the
	// daemon opens (platformd, platformd-control, platformd-migrate).
	daemonSessions = "platformd%"
)

const amqpURL = "amqp://guest:guest@127.0.0.1:5672/"

// TestManyTenants starts one daemon hosting N services (PLATFORMD_TENANTS),
// each on a database of its own with one pool of concurrency 2 on a
// classic queue, under a database_budget of the server's max_connections
// less budgetMargin, and checks: all up within upWithin; once idle, at
// most idleConnsPerService connections per service to their databases; an
// event published twice and fanned out to every queue applied exactly once
// in each (the exactly-once checker, package exactly), the daemon holding
// at most its budget meanwhile. It reports the daemon's RSS and the
// connection counts. TestPoolerExactlyOnce is the same fleet through
// PgBouncer.
//
// It owns the server while it runs (N databases, up to 1.5 N connections
// idle and up to its budget under load): run it alone, through make
// tenants.
func TestManyTenants(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(TenantsEnv))
	if n <= 0 {
		t.Skip("set " + TenantsEnv + "=N (make tenants) to host N services in one daemon")
	}
	budget := tenantsBudget(t, n)
	f := startFleet(t, fleetConfig{n: n, budget: budget})

	// Idle: wait until the count settles (pools shrink after their idle
	// time), bounded.
	limit := int(idleConnsPerService * float64(n))
	total, most := f.idle(limit)
	t.Logf("%d services idle: %d connections to their databases (%.2f per service, at most %d on one); RSS %s",
		n, total, float64(total)/float64(n), most, rss())
	logSessions(t, f.admin, f.names[0])
	require.LessOrEqual(t, total, limit, "connections to the services' databases while idle")
	require.Less(t, f.allUp, upWithin, "time until every service is up")

	// Fan-out: one event published twice reaches every queue; each service
	// applies it once, the daemon within its budget.
	stopSampling := samplePeakOf(t, f.prefix, daemonSessions)
	ids := []uuid.UUID{uuid.New()}
	fanout := time.Now()
	f.publish(ids, 2, nil)
	refused := f.settle(ids, 90*time.Second)
	took := time.Since(fanout)
	peak, peakWhat := stopSampling()
	applied, twice, lost := f.assertExactlyOnce(f.check(ids))
	total, most = f.conns()
	t.Logf("%d services: the event (published twice) applied once in %d services after %s (%d twice, %d lost); at most %d daemon connections meanwhile, budget %d (the checker refused %d times):\n%s",
		n, applied, took.Round(time.Millisecond), twice, lost, peak, budget, refused, peakWhat)
	t.Logf("%d services after the fan-out: %d connections (at most %d on one)", n, total, most)
	require.LessOrEqual(t, peak, budget, "the daemon's connections to the services' databases during the fan-out, under database_budget.max_conns")
}

// tenantsBudget is the database_budget.max_conns of TestManyTenants's
// daemon: the server's max_connections less budgetMargin (170 of 200). It
// fails the test when that leaves less than a control session per service
// and one to share.
func tenantsBudget(t *testing.T, n int) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer c.Close(ctx)
	var setting string
	require.NoError(t, c.QueryRow(ctx, `SHOW max_connections`).Scan(&setting))
	maxConns, err := strconv.Atoi(setting)
	require.NoError(t, err)
	budget := maxConns - budgetMargin
	require.GreaterOrEqual(t, budget, n+1, "the server's max_connections %d, less %d for other clients, cannot hold %d services' control sessions and one connection to share",
		maxConns, budgetMargin, n)
	return budget
}

// samplePeak samples, on a connection of its own, the connections to the
// databases named prefix* until the returned function is called, which
// returns the most seen and what they ran then.
func samplePeak(t *testing.T, prefix string) func() (int, string) {
	t.Helper()
	return samplePeakOf(t, prefix, "%")
}

// samplePeakOf is samplePeak counting only the sessions whose
// application_name is LIKE app.
func samplePeakOf(t *testing.T, prefix, app string) func() (int, string) {
	t.Helper()
	ctx := context.Background()
	sampler, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	peak, peakWhat := 0, ""
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var c int
			if sampler.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1 || '%' AND application_name LIKE $2`, prefix, app).Scan(&c) == nil && c > peak {
				peak = c
				peakWhat = sessionsByQuery(ctx, sampler, prefix)
			}
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond): // a sampling period
			}
		}
	}()
	return func() (int, string) {
		close(stop)
		<-done
		_ = sampler.Close(ctx)
		return peak, peakWhat
	}
}

// sessionsByQuery says what the sessions on databases named prefix* last
// ran, most common first.
func sessionsByQuery(ctx context.Context, conn *pgx.Conn, prefix string) string {
	rows, err := conn.Query(ctx, `SELECT count(*), application_name || ' ' || state, left(regexp_replace(query, '\s+', ' ', 'g'), 60)
		FROM pg_stat_activity WHERE datname LIKE $1 || '%' GROUP BY 2, 3 ORDER BY 1 DESC LIMIT 8`, prefix)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var c int
		var state, query *string
		if rows.Scan(&c, &state, &query) == nil {
			fmt.Fprintf(&b, "    %d %v %v\n", c, deref(state), deref(query))
		}
	}
	return b.String()
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// logSessions logs what the sessions on database db last ran: which
// component holds each.
func logSessions(t *testing.T, admin *pgx.Conn, db string) {
	t.Helper()
	rows, err := admin.Query(context.Background(), `SELECT state, left(regexp_replace(query, '\s+', ' ', 'g'), 70), count(*)
		FROM pg_stat_activity WHERE datname = $1 GROUP BY 1, 2 ORDER BY 3 DESC`, db)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var state, query string
		var c int
		require.NoError(t, rows.Scan(&state, &query, &c))
		t.Logf("  %s: %d %s: %s", db, c, state, query)
	}
}

func deleteQueues(t *testing.T, suffix string, n int) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Logf("delete queues: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for i := range n {
		q := fmt.Sprintf("tenants.%s.%03d", suffix, i)
		for _, name := range []string{q, q + ".retry.1s"} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	}
	_ = ch.ExchangeDelete("tenants."+suffix, false, false)
}

// rss returns the process's resident set size, from /proc (Linux).
func rss() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return runtime.GOOS
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
