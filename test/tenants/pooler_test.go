package tenants

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/testdb"
)

// PgBouncerEnv, set to 1, makes TestPoolerExactlyOnce install PgBouncer
// (scripts/pgbouncer.sh) when it is missing; without it the test runs only
// where pgbouncer is installed.
const PgBouncerEnv = "PLATFORMD_PGBOUNCER"

// pgbouncerPort is the test's own PgBouncer, apart from a developer's on
// the default 6432.
const pgbouncerPort = "6442"

// The test's PgBouncer closes server connections unused for
// pgbouncerServerIdle seconds; its server connections in all
// (max_user_connections) are serverConnsFor's.
const pgbouncerServerIdle = 10

// poolerEventsEnv names how many events TestPoolerExactlyOnce publishes
// (default poolerEventsDefault).
const (
	poolerEventsEnv     = "PLATFORMD_POOLER_EVENTS"
	poolerEventsDefault = 100
	// poolerTenantsEnv names TestPoolerExactlyOnce's N (make pooler: 20);
	// unset, PLATFORMD_TENANTS (make tenants), else poolerTenantsDefault
	// (make unit).
	poolerTenantsEnv     = "PLATFORMD_POOLER_TENANTS"
	poolerTenantsDefault = 2
)

// pgbouncer runs scripts/pgbouncer.sh cmd for the test's PgBouncer, with
// at most serverConns server connections in all.
func pgbouncer(t *testing.T, cmd string, serverConns int) {
	t.Helper()
	c := exec.Command("bash", "../../scripts/pgbouncer.sh", cmd)
	c.Env = append(os.Environ(), "PGBOUNCER_PORT="+pgbouncerPort,
		"PGBOUNCER_MAX_SERVER_CONNS="+strconv.Itoa(serverConns),
		"PGBOUNCER_SERVER_IDLE="+strconv.Itoa(pgbouncerServerIdle))
	out, err := c.CombinedOutput()
	require.NoError(t, err, "pgbouncer.sh %s: %s", cmd, out)
}

// serverConnsFor is how many server connections PgBouncer may open for n
// services' databases: 1.5 per database (the proof's idle bound), within
// what the server has free less a margin for its other users. A service
// in pooler mode reads its database every 2 s or less (health, pauses,
// horizon, outbox), so each database keeps a server connection while its
// service runs: below n, PgBouncer evicts and reconnects one for nearly
// every transaction (measured: about 100 new server connections a second
// for 100 databases on 40, and the services not up after 3 minutes).
func serverConnsFor(t *testing.T, n int) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer c.Close(ctx)
	var most, used int
	require.NoError(t, c.QueryRow(ctx, `SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')`).Scan(&most, &used))
	free := most - used - 10
	conns := min(int(idleConnsPerService*float64(n)), free)
	if conns < n {
		t.Logf("warning: the server has %d connections free of %d (less a margin of 10); PgBouncer gets %d server connections for %d databases: fewer than one each, so it evicts and reconnects (see serverConnsFor)",
			free+10, most, conns, n)
	}
	require.Positive(t, conns, "no server connection free for PgBouncer")
	return conns
}

// TestPoolerExactlyOnce hosts N services (PLATFORMD_POOLER_TENANTS, else
// PLATFORMD_TENANTS, else 2; make pooler 20, make tenants 100) in one daemon, each on its own
// database with database_mode: pooler through a real PgBouncer in
// transaction mode (Debian's package, started by scripts/pgbouncer.sh),
// one pool each; it publishes a stream of events (PLATFORMD_POOLER_EVENTS,
// default 100), each twice, fanned out to all N queues, and restarts
// PgBouncer half-way (every client and server connection drops). Then the
// exactly-once checker, per service: every event applied once, none twice,
// none lost, each recorded, nothing quarantined. It also checks that all
// are up within upWithin and reports the connections while idle: the
// server's (pg_stat_activity) and PgBouncer's (SHOW POOLS, SHOW CLIENTS).
// Through transaction pooling, a LISTEN, a session lock or a named
// prepared statement would fail or leak across clients.
func TestPoolerExactlyOnce(t *testing.T) {
	if _, err := exec.LookPath("pgbouncer"); err != nil && os.Getenv(PgBouncerEnv) != "1" {
		if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
			t.Skip("pgbouncer is not installed; set " + PgBouncerEnv + "=1 (make pooler) to install it")
		}
	}
	n, _ := strconv.Atoi(cmp.Or(os.Getenv(poolerTenantsEnv), os.Getenv(TenantsEnv)))
	if n <= 0 {
		n = poolerTenantsDefault
	}
	events, _ := strconv.Atoi(os.Getenv(poolerEventsEnv))
	if events <= 0 {
		events = poolerEventsDefault
	}
	serverConns := serverConnsFor(t, n)
	pgbouncer(t, "start", serverConns)
	// Registered before the fleet's: PgBouncer stops last, after the
	// daemon and the databases' drop.
	t.Cleanup(func() { pgbouncer(t, "stop", serverConns) })
	f := startFleet(t, fleetConfig{n: n, pooler: true, batch: 10})
	// Checked, not required: the stream's exactly-once result is worth
	// having when the bring-up is slow.
	assert.Less(t, f.allUp, upWithin, "time until every service is up")

	limit := int(idleConnsPerService * float64(n))
	total, most := f.idle(limit)
	t.Logf("%d services through PgBouncer (at most %d server connections): idle, %d server connections to their databases (%.2f per service, at most %d on one); RSS %s; PgBouncer: %s",
		n, serverConns, total, float64(total)/float64(n), most, rss(), pgbouncerShow(t, f.prefix))
	require.LessOrEqual(t, total, limit, "server connections to the services' databases while idle")

	stopSampling := samplePeak(t, f.prefix)
	ids := make([]uuid.UUID, events)
	for i := range ids {
		ids[i] = uuid.New()
	}
	start := time.Now()
	f.publish(ids, 2, func() {
		pgbouncer(t, "restart", serverConns)
		t.Logf("PgBouncer restarted after %s, %d of %d events published", time.Since(start).Round(time.Millisecond), events/2, events)
	})
	published := time.Since(start)
	refused := f.settle(ids, 3*time.Minute)
	took := time.Since(start)
	peak, peakWhat := stopSampling()
	applied, twice, lost := f.assertExactlyOnce(f.check(ids))
	t.Logf("through PgBouncer (transaction mode, restarted once): %d services x %d events, each delivered twice (%d deliveries): %d applied once, %d twice, %d lost; published in %s, all handled after %s; at most %d server connections meanwhile (the checker refused %d times):\n%s",
		n, events, 2*n*events, applied, twice, lost, published.Round(time.Millisecond), took.Round(time.Millisecond), peak, refused, peakWhat)
	total, most = f.conns()
	t.Logf("after the stream: %d server connections (at most %d on one); PgBouncer: %s", total, most, pgbouncerShow(t, f.prefix))
}

// pgbouncerShow sums, from PgBouncer's admin console, SHOW POOLS over the
// databases named prefix* (clients active and waiting, servers active,
// idle and used) and counts SHOW CLIENTS on them.
func pgbouncerShow(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:"+pgbouncerPort+"/pgbouncer?default_query_exec_mode=simple_protocol")
	if err != nil {
		return "admin console: " + err.Error()
	}
	defer c.Close(ctx)
	sums := map[string]int{}
	pools := 0
	for _, show := range []string{"SHOW POOLS", "SHOW CLIENTS"} {
		rows, err := c.Query(ctx, show)
		if err != nil {
			return show + ": " + err.Error()
		}
		cols := rows.FieldDescriptions()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				return show + ": " + err.Error()
			}
			row := map[string]string{}
			for i, col := range cols {
				row[col.Name] = fmt.Sprint(vals[i])
			}
			if !strings.HasPrefix(row["database"], prefix) {
				continue
			}
			if show == "SHOW CLIENTS" {
				sums["clients"]++
				continue
			}
			pools++
			for _, k := range []string{"cl_active", "cl_waiting", "sv_active", "sv_idle", "sv_used"} {
				v, _ := strconv.Atoi(row[k])
				sums[k] += v
			}
		}
		rows.Close()
	}
	return fmt.Sprintf("%d pools, clients %d (active %d, waiting %d), servers active %d, idle %d, used %d",
		pools, sums["clients"], sums["cl_active"], sums["cl_waiting"], sums["sv_active"], sums["sv_idle"], sums["sv_used"])
}
