package tenants

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/testdb"
)

// PgBouncerEnv, set to 1, makes TestPoolerExactlyOnce install PgBouncer
// (scripts/pgbouncer.sh) when it is missing; without it the test runs only
// where pgbouncer is installed.
const PgBouncerEnv = "PLATFORMD_PGBOUNCER"

// pgbouncerPort is the test's own PgBouncer, apart from a developer's on
// the default 6432.
const pgbouncerPort = "6442"

func pgbouncer(t *testing.T, cmd string) {
	t.Helper()
	c := exec.Command("bash", "../../scripts/pgbouncer.sh", cmd)
	c.Env = append(os.Environ(), "PGBOUNCER_PORT="+pgbouncerPort)
	out, err := c.CombinedOutput()
	require.NoError(t, err, "pgbouncer.sh %s: %s", cmd, out)
}

// TestPoolerExactlyOnce runs a service with database_mode: pooler through
// a real PgBouncer in transaction mode (Debian's package, started by
// scripts/pgbouncer.sh): 300 events, each delivered twice, with a
// PgBouncer restart half-way; every event is applied exactly once (none
// twice, none lost). Through transaction pooling, a LISTEN, a session
// lock or a named prepared statement would fail or leak across clients.
func TestPoolerExactlyOnce(t *testing.T) {
	if _, err := exec.LookPath("pgbouncer"); err != nil && os.Getenv(PgBouncerEnv) != "1" {
		if _, err := os.Stat("/usr/sbin/pgbouncer"); err != nil {
			t.Skip("pgbouncer is not installed; set " + PgBouncerEnv + "=1 (make pooler) to install it")
		}
	}
	ctx := context.Background()
	pgbouncer(t, "start")
	t.Cleanup(func() { pgbouncer(t, "stop") })
	direct := testdb.New(t, "tenants_pooler")
	u, err := url.Parse(direct)
	require.NoError(t, err)
	u.Host = "127.0.0.1:" + pgbouncerPort
	pooled := u.String()

	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "001_applied.sql"), []byte(`-- +goose Up
CREATE TABLE applied (event_id uuid PRIMARY KEY, n int NOT NULL);
-- +goose Down
DROP TABLE applied;
`), 0o600))
	exchange, queue := "tenants.pooler."+suffix, "tenants.pooler."+suffix
	t.Cleanup(func() { deleteQueue(t, queue, exchange) })
	daemontest.StartYAML(t, fmt.Sprintf(`log: {level: warn}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: %q}
services:
  - name: pooled
    database: %q
    database_mode: pooler
    migrations: %q
    sql_handlers:
      - name: pooled.apply
        events: [tenants.pooler.v1]
        sql: ["INSERT INTO applied (event_id, n) VALUES (@event_id, 1) ON CONFLICT (event_id) DO UPDATE SET n = applied.n + 1"]
    pools:
      - name: pooled-events
        queue: %q
        queue_type: classic
        bindings: [tenants.pooler.v1]
        handlers: [pooled.apply]
        concurrency: 2
        batch: {size: 10}
        retry: {delays: [1s]}
`, amqpURL, exchange, pooled, dir, queue), consumer.NewRegistry())

	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	const n = 300
	ids := make([]uuid.UUID, n)
	for i := range n {
		if i == n/2 {
			pgbouncer(t, "restart") // every client and server connection drops
		}
		ids[i] = uuid.New()
		body, err := json.Marshal(map[string]any{"event_id": ids[i], "event_name": "tenants.pooler.v1",
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": map[string]any{"i": i}})
		require.NoError(t, err)
		for range 2 { // the duplicate
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "tenants.pooler.v1", true, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			require.NoError(t, err)
			require.True(t, dc.Wait())
		}
	}

	check, err := pgx.Connect(ctx, direct)
	require.NoError(t, err)
	defer check.Close(ctx)
	var rows, twice int
	require.Eventually(t, func() bool {
		require.NoError(t, check.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE n > 1) FROM applied`).Scan(&rows, &twice))
		require.Zero(t, twice, "events applied twice")
		return rows == n
	}, 60*time.Second, 100*time.Millisecond, "events applied: %d of %d", rows, n)
	var lost int
	require.NoError(t, check.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) id WHERE NOT EXISTS (SELECT 1 FROM applied a WHERE a.event_id = id)`, ids).Scan(&lost))
	require.Zero(t, lost)
	t.Logf("through PgBouncer (transaction mode, restarted once): %d events delivered twice, %d applied once, 0 twice, 0 lost", n, rows)
}
