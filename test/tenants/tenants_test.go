package tenants

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
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
)

const amqpURL = "amqp://guest:guest@127.0.0.1:5672/"

// TestManyTenants starts one daemon hosting N services (PLATFORMD_TENANTS),
// each on a database of its own with one pool of concurrency 2 on a
// classic queue, and checks: all up within upWithin; once idle, at most
// idleConnsPerService connections per service to their databases; an event
// published twice and fanned out to every queue applied exactly once in
// each service. It reports the daemon's RSS and the connection counts.
//
// It owns the server while it runs (N databases, up to 1.5 N connections
// idle and up to 3 N under load): run it alone, through make tenants.
func TestManyTenants(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(TenantsEnv))
	if n <= 0 {
		t.Skip("set " + TenantsEnv + "=N (make tenants) to host N services in one daemon")
	}
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	dir := t.TempDir()
	migDir := filepath.Join(dir, "migrations")
	require.NoError(t, os.MkdirAll(migDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(migDir, "001_applied.sql"), []byte(`-- +goose Up
CREATE TABLE applied (event_id uuid PRIMARY KEY, n int NOT NULL);
-- +goose Down
DROP TABLE applied;
`), 0o600))

	prefix := "tenants_" + suffix
	names := make([]string, n)
	var sb strings.Builder
	fmt.Fprintf(&sb, `log: {level: warn, format: text}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: tenants.%s}
services:
`, amqpURL, suffix)
	for i := range n {
		names[i] = fmt.Sprintf("%s_%03d", prefix, i)
		dsn := testdb.WithDatabase(testdb.AdminURL(), names[i])
		fmt.Fprintf(&sb, `  - name: tenant%03d
    database: %q
    migrations: %q
    sql_handlers:
      - name: tenant%03d.apply
        events: [tenants.thing.happened.v1]
        sql: ["INSERT INTO applied (event_id, n) VALUES (@event_id, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"]
    database_pool: {max_idle: %s}
    pools:
      - name: tenant%03d-events
        queue: tenants.%s.%03d
        queue_type: classic
        bindings: [tenants.thing.happened.v1]
        handlers: [tenant%03d.apply]
        concurrency: 2
        retry: {delays: [1s]}
`, i, dsn, migDir, i, maxIdle, i, suffix, i, i)
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, name := range names {
			wg.Go(func() { testdb.Drop(name) })
		}
		wg.Wait()
		deleteQueues(t, suffix, n)
	})
	path := filepath.Join(dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o600))

	reg := consumer.NewRegistry()
	cfg, err := daemon.LoadConfig(path, reg)
	require.NoError(t, err)
	d, err := daemon.New(cfg, reg, daemon.WithCreateDatabases())
	require.NoError(t, err)
	// The peak while the services come up, sampled on a connection of
	// its own.
	stopSampling := samplePeak(t, prefix)
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- d.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
	})
	select {
	case <-d.Ready():
	case err := <-errc:
		t.Fatalf("daemon ended: %v", err)
	case <-time.After(3 * upWithin):
		t.Fatalf("not all %d services up after %s", n, 3*upWithin)
	}
	allUp := time.Since(start)
	peak, peakWhat := stopSampling()
	t.Logf("%d services: all up after %s; at most %d connections to their databases meanwhile:\n%s", n, allUp.Round(time.Millisecond), peak, peakWhat)

	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	conns := func() (total int, max int) {
		rows, err := admin.Query(ctx, `SELECT datname, count(*) FROM pg_stat_activity
			WHERE datname LIKE $1 || '%' GROUP BY datname`, prefix)
		require.NoError(t, err)
		for rows.Next() {
			var db string
			var c int
			require.NoError(t, rows.Scan(&db, &c))
			total += c
			if c > max {
				max = c
			}
		}
		require.NoError(t, rows.Err())
		return total, max
	}
	// Idle: wait until the count settles (pools shrink after their idle
	// time), bounded.
	limit := int(idleConnsPerService * float64(n))
	deadline := time.Now().Add(idleSettle + 75*time.Second)
	var total, most int
	for {
		total, most = conns()
		if total <= limit || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // a bounded poll of pg_stat_activity
	}
	t.Logf("%d services idle: %d connections to their databases (%.2f per service, at most %d on one); RSS %s",
		n, total, float64(total)/float64(n), most, rss())
	logSessions(t, admin, names[0])
	require.LessOrEqual(t, total, limit, "connections to the services' databases while idle")
	require.Less(t, allUp, upWithin, "time until every service is up")

	// Fan-out: one event published twice reaches every queue; each service
	// applies it once.
	stopSampling = samplePeak(t, prefix)
	id := uuid.New()
	fanout := time.Now()
	publishTwice(t, "tenants."+suffix, id)
	pdeadline := time.Now().Add(90 * time.Second)
	refused := 0
	for i := 0; i < n; {
		dsn := testdb.WithDatabase(testdb.AdminURL(), names[i])
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			// The server full for a moment (every service's workers at
			// once): ask again.
			refused++
			require.True(t, time.Now().Before(pdeadline), "service %d: %v", i, err)
			time.Sleep(100 * time.Millisecond) // a bounded poll
			continue
		}
		var got int
		err = c.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM applied WHERE event_id = $1`, id).Scan(&got)
		_ = c.Close(ctx)
		require.NoError(t, err)
		if got == 1 {
			i++
			continue
		}
		require.LessOrEqual(t, got, 1, "service %d applied the event more than once", i)
		require.True(t, time.Now().Before(pdeadline), "service %d did not apply the event", i)
		time.Sleep(100 * time.Millisecond) // a bounded poll
	}
	peak, peakWhat = stopSampling()
	total, most = conns()
	t.Logf("%d services: the event applied once in each after %s; at most %d connections meanwhile (the checker refused %d times):\n%s",
		n, time.Since(fanout).Round(time.Millisecond), peak, refused, peakWhat)
	t.Logf("%d services after the fan-out: %d connections (at most %d on one)", n, total, most)
}

// samplePeak samples, on a connection of its own, the connections to the
// databases named prefix* until the returned function is called, which
// returns the most seen and what they ran then.
func samplePeak(t *testing.T, prefix string) func() (int, string) {
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
			if sampler.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname LIKE $1 || '%'`, prefix).Scan(&c) == nil && c > peak {
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

func publishTwice(t *testing.T, exchange string, id uuid.UUID) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	body, err := json.Marshal(map[string]any{"event_id": id, "event_name": "tenants.thing.happened.v1",
		"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": map[string]any{"n": 1}})
	require.NoError(t, err)
	for range 2 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, "tenants.thing.happened.v1", true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		require.True(t, dc.Wait())
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
		for _, name := range []string{q, q + ".failed", q + ".retry.1s"} {
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
