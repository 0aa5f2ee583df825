package tenants

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/test/exactly"
)

// fleetEvent is the event every service of a fleet applies.
const fleetEvent = "tenants.thing.happened.v1"

// fleetConfig is what startFleet hosts.
type fleetConfig struct {
	n int
	// pooler puts every service behind the test's PgBouncer
	// (database_mode: pooler); else each talks to PostgreSQL itself.
	pooler bool
	// batch is the pools' batch size (0: the default).
	batch int
	// budget is the daemon's database_budget.max_conns (0: no budget).
	budget int
	// quorum puts the pools on quorum queues (else classic).
	quorum bool
	// delays are the pools' retry delays (nil: [1s]).
	delays []time.Duration
	// vhost, when set, is the broker vhost the fleet runs in, created by
	// the test and deleted with everything in it when it ends; else the
	// default vhost, the fleet's queues deleted by name.
	vhost string
}

// fleet is one daemon hosting n services, each on a database of its own
// (created by the daemon) with one classic pool of concurrency 2 bound to
// fleetEvent: service i, database names[i], queue queue(i).
type fleet struct {
	t        *testing.T
	cfg      fleetConfig
	suffix   string
	prefix   string // of the databases' names
	exchange string
	url      string // the broker, in the fleet's vhost
	names    []string
	// failUntil makes an event's handler fail (retried, SQLSTATE P0001)
	// while its attempt is below the value: publish adds it to the
	// payload as fail_until.
	failUntil map[uuid.UUID]int
	d         *daemon.Daemon
	admin     *pgx.Conn
	// allUp is how long the daemon took until every service was up.
	allUp time.Duration
}

// startFleet starts the fleet, waits until every service is up (at most
// 3*upWithin) and logs how long that took and the most connections the
// services held to their databases meanwhile. The databases and queues go
// in t.Cleanup.
// appliedMigrations writes the services' migrations, the table their SQL
// handler counts applications in and what a retry needs, into a directory
// of its own.
func appliedMigrations(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "001_applied.sql"), []byte(`-- +goose Up
CREATE TABLE applied (event_id uuid PRIMARY KEY, n int NOT NULL);
-- +goose Down
DROP TABLE applied;
`), 0o600))
	// The attempt each event was applied at, and a function that fails
	// (SQLSTATE P0001: retried) while the attempt is below until.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "002_retry.sql"), []byte(`-- +goose Up
CREATE TABLE applied_attempt (event_id uuid PRIMARY KEY, attempt int NOT NULL);
-- +goose StatementBegin
CREATE FUNCTION maybe_fail(attempt int, until int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF attempt < until THEN
    RAISE EXCEPTION 'attempt % of %: not yet', attempt, until USING ERRCODE = 'P0001';
  END IF;
END $$;
-- +goose StatementEnd
-- +goose Down
DROP FUNCTION maybe_fail(int, int);
DROP TABLE applied_attempt;
`), 0o600))
	return dir
}

func startFleet(t *testing.T, fc fleetConfig) *fleet {
	t.Helper()
	ctx := context.Background()
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	f := &fleet{t: t, cfg: fc, suffix: suffix, prefix: "tenants_" + suffix, exchange: "tenants." + suffix, names: make([]string, fc.n),
		url: amqpURL + fc.vhost, failUntil: map[uuid.UUID]int{}}
	queueType, delays := "classic", "1s"
	if fc.quorum {
		queueType = "quorum"
	}
	if len(fc.delays) > 0 {
		ds := make([]string, len(fc.delays))
		for i, d := range fc.delays {
			ds[i] = d.String()
		}
		delays = strings.Join(ds, ", ")
	}
	dir := t.TempDir()
	migDir := appliedMigrations(t)

	var sb strings.Builder
	// Through PgBouncer its restart is expected: every service logs it.
	level := "warn"
	if fc.pooler {
		level = "error"
	}
	fmt.Fprintf(&sb, `log: {level: %s, format: text}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: %s}
database_budget: {max_conns: %d}
services:
`, level, f.url, f.exchange, fc.budget)
	batch := ""
	if fc.batch > 0 {
		batch = fmt.Sprintf("        batch: {size: %d}\n", fc.batch)
	}
	for i := range fc.n {
		f.names[i] = fmt.Sprintf("%s_%03d", f.prefix, i)
		dsn, mode := testdb.WithDatabase(testdb.AdminURL(), f.names[i]), "direct"
		if fc.pooler {
			dsn, mode = throughPgBouncer(t, dsn), "pooler"
		}
		fmt.Fprintf(&sb, `  - name: tenant%03d
    database: %q
    database_mode: %s
    migrations: %q
    sql_handlers:
      - name: tenant%03d.apply
        events: [%s]
        sql:
          - "SELECT maybe_fail(@attempt, COALESCE((@payload->>'fail_until')::int, 0))"
          - "INSERT INTO applied (event_id, n) VALUES (@event_id, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"
          - "INSERT INTO applied_attempt (event_id, attempt) VALUES (@event_id, @attempt)"
    database_pool: {max_idle: %s}
    pools:
      - name: tenant%03d-events
        queue: %s
        queue_type: %s
        bindings: [%s]
        handlers: [tenant%03d.apply]
        concurrency: 2
%s        retry: {delays: [%s]}
`, i, dsn, mode, migDir, i, fleetEvent, maxIdle, i, f.queue(i), queueType, fleetEvent, i, batch, delays)
	}
	t.Cleanup(func() {
		dropDatabases(t, f.names)
		if fc.vhost == "" {
			deleteQueues(t, suffix, fc.n)
		}
	})
	path := filepath.Join(dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o600))

	// The peak while the services come up, sampled on a connection of
	// its own.
	stopSampling := samplePeak(t, f.prefix)
	start := time.Now()
	// daemontest waits for Ready at most ReadyTimeoutDefault (upWithin):
	// a slower start fails there, as the proof's bound would after it.
	f.d = daemontest.Start(t, path, consumer.NewRegistry(), daemon.WithCreateDatabases())
	f.allUp = time.Since(start)
	peak, peakWhat := stopSampling()
	t.Logf("%d services (%s): all up after %s; at most %d connections to their databases meanwhile:\n%s",
		fc.n, f.mode(), f.allUp.Round(time.Millisecond), peak, peakWhat)

	var err error
	f.admin, err = pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.admin.Close(context.Background()) })
	return f
}

func (f *fleet) mode() string {
	if f.cfg.pooler {
		return "through PgBouncer"
	}
	return "direct"
}

func (f *fleet) queue(i int) string { return fmt.Sprintf("tenants.%s.%03d", f.suffix, i) }

// conns counts the server's sessions on the fleet's databases: in all,
// and on the busiest one.
func (f *fleet) conns() (total, most int) {
	rows, err := f.admin.Query(context.Background(), `SELECT datname, count(*) FROM pg_stat_activity
		WHERE datname LIKE $1 || '%' GROUP BY datname`, f.prefix)
	require.NoError(f.t, err)
	for rows.Next() {
		var db string
		var c int
		require.NoError(f.t, rows.Scan(&db, &c))
		total += c
		most = max(most, c)
	}
	require.NoError(f.t, rows.Err())
	return total, most
}

// idle waits, bounded, until the fleet holds at most limit connections to
// its databases (pools shrink after their idle time), and returns the
// count then.
func (f *fleet) idle(limit int) (total, most int) {
	deadline := time.Now().Add(idleSettle + 75*time.Second)
	for {
		total, most = f.conns()
		if total <= limit || time.Now().After(deadline) {
			return total, most
		}
		time.Sleep(time.Second) //nolint:forbidigo // a bounded poll of pg_stat_activity
	}
}

// publish publishes an event per id to the fleet's exchange, copies times
// each (every copy reaches every service's queue), with confirms; before
// the event at index len(ids)/2 it calls midway (nil: nothing).
func (f *fleet) publish(ids []uuid.UUID, copies int, midway func()) {
	f.t.Helper()
	conn, err := amqp.Dial(f.url)
	require.NoError(f.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(f.t, err)
	require.NoError(f.t, ch.Confirm(false))
	for i, id := range ids {
		if i == len(ids)/2 && midway != nil {
			midway()
		}
		payload := map[string]any{"i": i}
		if n := f.failUntil[id]; n > 0 {
			payload["fail_until"] = n
		}
		body, err := json.Marshal(map[string]any{"event_id": id, "event_name": fleetEvent,
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": payload})
		require.NoError(f.t, err)
		for range copies {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), f.exchange, fleetEvent, true, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			require.NoError(f.t, err)
			require.True(f.t, dc.Wait())
		}
	}
}

// settle waits, bounded by timeout, until every service has a row for
// each of ids and none of the fleet's queues holds a message (ready or
// unacknowledged): every copy was handled. It returns how often the
// server refused the poll's connection (full for a moment).
func (f *fleet) settle(ids []uuid.UUID, timeout time.Duration) (refused int) {
	f.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	for i := 0; i < f.cfg.n; {
		c, err := pgx.Connect(ctx, testdb.WithDatabase(testdb.AdminURL(), f.names[i]))
		if err != nil {
			refused++
			require.True(f.t, time.Now().Before(deadline), "service %d: %v", i, err)
			time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a bounded poll
			continue
		}
		var got int
		err = c.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&got)
		_ = c.Close(ctx)
		require.NoError(f.t, err)
		if got >= len(ids) {
			i++
			continue
		}
		require.True(f.t, time.Now().Before(deadline), "service %d applied %d of %d events", i, got, len(ids))
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a bounded poll
	}
	var left map[string]int
	for {
		left = f.queued()
		if len(left) == 0 {
			return refused
		}
		require.True(f.t, time.Now().Before(deadline), "messages left in queues: %v", left)
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // a bounded poll
	}
}

// queued lists the fleet's queues that hold a message (ready or
// unacknowledged), from rabbitmqctl: failures are rows of the failure
// store, so no queue is exempt. In a vhost of its own, the shared delay
// queues are the fleet's too.
func (f *fleet) queued() map[string]int {
	out, err := exec.Command("rabbitmqctl", "list_queues", "-p", cmp.Or(f.cfg.vhost, "/"), "--quiet", "--no-table-headers", "name", "messages").Output()
	require.NoError(f.t, err, "rabbitmqctl list_queues")
	left := map[string]int{}
	for line := range strings.SplitSeq(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 2 || !strings.HasPrefix(fs[0], "tenants."+f.suffix+".") && (f.cfg.vhost == "" || !strings.HasPrefix(fs[0], "platformd.retry.")) {
			continue
		}
		if n, err := strconv.Atoi(fs[1]); err == nil && n > 0 {
			left[fs[0]] = n
		}
	}
	return left
}

// check runs the exactly-once checker on every service once settled:
// each of ids applied once (table applied), recorded in processed_event,
// no other row, no row in its failure store (platform.failed_event). It
// returns one report per service, each closed.
func (f *fleet) check(ids []uuid.UUID) []*exactly.Report {
	f.t.Helper()
	ctx := context.Background()
	goods := make(map[uuid.UUID]bool, len(ids))
	for _, id := range ids {
		goods[id] = true
	}
	reports := make([]*exactly.Report, f.cfg.n)
	for i, name := range f.names {
		c, err := pgx.Connect(ctx, testdb.WithDatabase(testdb.AdminURL(), name))
		require.NoError(f.t, err)
		r := &exactly.Report{Events: len(ids)}
		got, err := exactly.ReadCounts(ctx, c, `SELECT event_id, n, 0::bigint FROM applied`)
		require.NoError(f.t, err)
		exactly.Tally(r, exactly.Ledger[uuid.UUID]{What: name + " event", Want: exactly.Once(ids), Got: got})
		recorded, err := exactly.ReadIDs(ctx, c, `SELECT event_id FROM processed_event`)
		require.NoError(f.t, err)
		exactly.CheckRecorded(r, exactly.Recorded{DB: name, Sent: ids}, recorded)
		r.Close()
		failed, err := exactly.ReadFailed(ctx, c, name)
		require.NoError(f.t, err)
		require.NoError(f.t, c.Close(ctx))
		exactly.Quarantined(r, nil, failed, goods, nil)
		reports[i] = r
	}
	return reports
}

// assertExactlyOnce fails the test with every service's problems (the
// first five services with any) and returns the totals.
func (f *fleet) assertExactlyOnce(reports []*exactly.Report) (applied, twice, lost int) {
	f.t.Helper()
	bad := 0
	for i, r := range reports {
		applied += r.Applied
		twice += r.Twice
		lost += r.Lost
		if r.OK() {
			continue
		}
		if bad++; bad <= 5 {
			f.t.Errorf("service %d: %s", i, r.Summary())
			r.Errors(f.t)
		}
	}
	if bad > 0 {
		f.t.Errorf("%d of %d services broke exactly once", bad, len(reports))
	}
	return applied, twice, lost
}

// throughPgBouncer is dsn with the test's PgBouncer as its host.
func throughPgBouncer(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = "127.0.0.1:" + pgbouncerPort
	return u.String()
}

// dropDatabases drops names (forcibly), on one connection taken again
// while the server refuses it: it may be full for a moment as the fleet
// stops (testdb.Drop gives up at once, leaving the databases behind).
func dropDatabases(t *testing.T, names []string) {
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	var c *pgx.Conn
	for {
		var err error
		if c, err = pgx.Connect(ctx, testdb.AdminURL()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("databases %s_* left behind: %v", names[0], err)
			return
		}
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // a bounded poll
	}
	defer c.Close(ctx)
	for _, name := range names {
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	}
}
