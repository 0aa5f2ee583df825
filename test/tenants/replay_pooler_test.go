package tenants

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/testdb"
)

// replayPgbouncerPort is this test's own PgBouncer, apart from the other
// pooler tests' and a developer's.
const replayPgbouncerPort = "6443"

const replayAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

// replayPgbouncer runs scripts/pgbouncer.sh cmd for this test's PgBouncer.
func replayPgbouncer(t *testing.T, cmd string) {
	t.Helper()
	c := exec.Command("bash", "../../scripts/pgbouncer.sh", cmd)
	c.Env = append(os.Environ(), "PGBOUNCER_PORT="+replayPgbouncerPort)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "pgbouncer.sh %s: %s", cmd, out)
}

// pooledDSN returns dsn with its host:port PgBouncer's.
func pooledDSN(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Host = "127.0.0.1:" + replayPgbouncerPort
	return u.String()
}

// TestReplayThroughPooler runs the archive and a replay through a real
// PgBouncer in transaction mode: a producer (order, outbox.archive) and a
// consumer (applying each event once, counted per event), both with
// database_mode: pooler. The producer's events are published, archived
// and applied; the effects of five are removed from the consumer (rows and
// processed_event rows); a dry run, then a replay targeted at the
// consumer's pool, run through the pooler: the dry run says 5 would apply
// and the rest are already processed, and the replay applies those five
// once and counts the rest as duplicates from source replay, none applied
// twice (docs/replay.md). A session lock, a LISTEN or a
// named prepared statement anywhere in the replay path would fail or leak
// across clients through transaction pooling.
func TestReplayThroughPooler(t *testing.T) {
	if _, err := exec.LookPath("pgbouncer"); err != nil && os.Getenv(PgBouncerEnv) != "1" {
		if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
			t.Skip("pgbouncer is not installed; set " + PgBouncerEnv + "=1 (make pooler) to install it")
		}
	}
	ctx := context.Background()
	replayPgbouncer(t, "start")
	t.Cleanup(func() { replayPgbouncer(t, "stop") })
	orderDirect := testdb.New(t, "tenants_replay_order")
	appliedDirect := testdb.New(t, "tenants_replay_applied")

	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	dir := appliedMigrations(t)
	exchange, queue := "tenants.replay."+suffix, "tenants.replay."+suffix
	t.Cleanup(func() { replayDeleteQueue(t, queue, exchange) })
	const token = "tenants-replay-admin-token"
	d := daemontest.StartYAML(t, fmt.Sprintf(`log: {level: warn}
admin:
  listen: "127.0.0.1:0"
  tokens: [{name: ops, role: admin, token: %q}]
metrics: {listen: "127.0.0.1:0"}
broker: {url: %q, exchange: %q}
services:
  - name: order
    database: %q
    database_mode: pooler
    outbox: {relay: true, poll: 100ms, archive: 24h}
  - name: applied
    database: %q
    database_mode: pooler
    migrations: %q
    sql_handlers:
      - name: applied.apply
        events: [tenants.replay.v1]
        sql: ["INSERT INTO applied (event_id, n) VALUES (@event_id, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"]
    pools:
      - name: applied-events
        queue: %q
        queue_type: classic
        bindings: [tenants.replay.v1]
        handlers: [applied.apply]
        concurrency: 2
        batch: {size: 10}
        retry: {delays: [1s]}
`, token, replayAMQPURL, exchange, pooledDSN(t, orderDirect), pooledDSN(t, appliedDirect), dir, queue), consumer.NewRegistry())

	order, err := pgx.Connect(ctx, orderDirect)
	require.NoError(t, err)
	defer order.Close(ctx)
	applied, err := pgx.Connect(ctx, appliedDirect)
	require.NoError(t, err)
	defer applied.Close(ctx)
	count := func(conn *pgx.Conn, sql string) int {
		var n int
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&n))
		return n
	}

	const n = 200
	start := time.Now().Add(-time.Minute)
	_, err = order.Exec(ctx, `SELECT platform.publish('tenants.replay.v1', jsonb_build_object('i', g)) FROM generate_series(1, $1) g`, n)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return count(order, `SELECT count(*) FROM platform.outbox_archive`) == n && count(applied, `SELECT count(*) FROM applied`) == n
	}, 60*time.Second, 100*time.Millisecond, "every event archived and applied")

	// Five events' effects are lost (rows and their processed_event rows).
	var lost []uuid.UUID
	rows, err := applied.Query(ctx, `SELECT event_id FROM applied ORDER BY event_id LIMIT 5`)
	require.NoError(t, err)
	lost, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	_, err = applied.Exec(ctx, `DELETE FROM applied WHERE event_id = ANY($1)`, lost)
	require.NoError(t, err)
	_, err = applied.Exec(ctx, `DELETE FROM processed_event WHERE event_id = ANY($1)`, lost)
	require.NoError(t, err)

	cc, err := grpc.NewClient(d.AdminAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	client := adminv1.NewAdminServiceClient(cc)
	actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 2*time.Minute)
	defer cancel()
	req := &adminv1.ReplayEventsRequest{Service: "order", EventNames: []string{"tenants.#"}, From: timestamppb.New(start),
		To: timestamppb.New(time.Now().Add(time.Minute)), TargetPool: "applied-events", Rate: 200, DryRun: true}
	dry, err := client.ReplayEvents(actx, req)
	require.NoError(t, err)
	require.Equal(t, adminv1.ReplayState_REPLAY_STATE_DRY_RUN, dry.GetReplay().GetState())
	require.Equal(t, int64(n), dry.GetReplay().GetMatched())
	require.Len(t, dry.GetReplay().GetPools(), 1)
	p := dry.GetReplay().GetPools()[0]
	require.Equal(t, "applied-events", p.GetPool())
	require.Equal(t, int64(len(lost)), p.GetWouldApply())
	require.Equal(t, int64(n-len(lost)), p.GetAlreadyProcessed())
	require.Zero(t, p.GetBeyondHorizon())

	req.DryRun = false
	resp, err := client.ReplayEvents(actx, req)
	require.NoError(t, err)
	id := resp.GetReplay().GetId()
	var got *adminv1.Replay
	require.Eventually(t, func() bool {
		r, err := client.GetReplay(actx, &adminv1.GetReplayRequest{Service: "order", Id: id})
		require.NoError(t, err)
		got = r.GetReplay()
		require.NotEqual(t, adminv1.ReplayState_REPLAY_STATE_FAILED, got.GetState(), got.GetError())
		return got.GetState() == adminv1.ReplayState_REPLAY_STATE_DONE
	}, 60*time.Second, 100*time.Millisecond, "the replay done")
	require.Equal(t, int64(n), got.GetPublished())
	require.Equal(t, int64(n), got.GetPools()[0].GetPublished())

	// The lost effects are back, once; every other copy was a duplicate
	// of source replay.
	require.Eventually(t, func() bool {
		return replayDuplicates(t, d.MetricsAddr(), "applied-events") == n-len(lost)
	}, 60*time.Second, 100*time.Millisecond, "the copies of processed events counted as replay duplicates")
	require.Equal(t, n, count(applied, `SELECT count(*) FROM applied`))
	require.Zero(t, count(applied, `SELECT count(*) FROM applied WHERE n > 1`), "events applied twice")
	var back int
	require.NoError(t, applied.QueryRow(ctx, `SELECT count(*) FROM applied WHERE event_id = ANY($1)`, lost).Scan(&back))
	require.Equal(t, len(lost), back)
	// The runner releases its lease once the replay is done (after it
	// marked it done, so a moment later), and leaves no session lock on
	// the pooler's server connections.
	require.Eventually(t, func() bool {
		return count(order, `SELECT count(*) FROM platform.lease WHERE name = 'platformd.replay'`) == 0
	}, 30*time.Second, 20*time.Millisecond, "the replay's lease released")
	require.Zero(t, count(order, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`), "a session lock left on a server connection")
	t.Logf("through PgBouncer (transaction mode): %d events archived; replay %s published %d copies: %d applied, %d replay duplicates",
		n, id, got.GetPublished(), len(lost), n-len(lost))
}

// replayDuplicates reads platformd_duplicates_total{pool, source="replay"}
// from the daemon's metrics.
func replayDuplicates(t *testing.T, addr, pool string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // a local test scrape
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "platformd_duplicates_total{") || !strings.Contains(line, `pool="`+pool+`"`) ||
			!strings.Contains(line, `source="replay"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err)
		return int(v)
	}
	require.NoError(t, sc.Err())
	return 0
}

// replayDeleteQueue deletes the test's queue (its retry queue too) and
// exchange.
func replayDeleteQueue(t *testing.T, queue, exchange string) {
	t.Helper()
	conn, err := amqp.Dial(replayAMQPURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, q := range []string{queue, queue + ".retry.1s"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}
