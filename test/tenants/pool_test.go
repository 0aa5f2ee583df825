package tenants

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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

// TestServiceConnectionsFollowTheWork: one service, one pool of
// concurrency 4, max_idle 1s. Idle, it holds one connection (its control
// session); under load its pool grows to the pool's concurrency; once the
// work is done it shrinks back to one. It holds at most 8 connections of
// the shared server, for seconds.
func TestServiceConnectionsFollowTheWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, "tenants_pool")
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "001_applied.sql"), []byte(`-- +goose Up
CREATE TABLE applied (event_id uuid PRIMARY KEY);
-- +goose Down
DROP TABLE applied;
`), 0o600))
	queue := "tenants.pool." + suffix
	t.Cleanup(func() { deleteQueue(t, queue, "tenants.pool."+suffix) })
	daemontest.StartYAML(t, fmt.Sprintf(`log: {level: warn}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: %q, exchange: %q}
services:
  - name: pooled
    database: %q
    migrations: %q
    database_pool: {max_idle: 1s}
    sql_handlers:
      - name: pooled.apply
        events: [tenants.pool.v1]
        sql: ["SELECT pg_sleep(0.05)", "INSERT INTO applied (event_id) VALUES (@event_id)"]
    pools:
      - name: pooled-events
        queue: %q
        queue_type: classic
        bindings: [tenants.pool.v1]
        handlers: [pooled.apply]
        concurrency: 4
        batch: {size: 1}
        retry: {delays: [1s]}
`, amqpURL, "tenants.pool."+suffix, dsn, dir, queue), consumer.NewRegistry())

	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	conns := func() int {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, cc.Database).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return conns() <= 1 }, 20*time.Second, 100*time.Millisecond,
		"an idle service holds its control session only")
	logSessions(t, admin, cc.Database)

	// Load: 200 events, 50ms each, four at a time.
	const n = 200
	publish(t, "tenants.pool."+suffix, "tenants.pool.v1", n)
	most := 0
	require.Eventually(t, func() bool {
		most = max(most, conns())
		return most >= 4
	}, 20*time.Second, 20*time.Millisecond, "the pool grows with the work")
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	require.Eventually(t, func() bool {
		var got int
		require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&got))
		return got == n
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, c.Close(ctx))
	require.Eventually(t, func() bool { return conns() <= 1 }, 20*time.Second, 100*time.Millisecond,
		"the pool shrinks back once idle")
	t.Logf("connections: 1 idle, %d under load, back to %d", most, conns())
}

func publish(t *testing.T, exchange, name string, n int) {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	for range n {
		body, err := json.Marshal(map[string]any{"event_id": uuid.New(), "event_name": name,
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": map[string]any{}})
		require.NoError(t, err)
		dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, name, true, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		require.True(t, dc.Wait())
	}
}

func deleteQueue(t *testing.T, queue, exchange string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Logf("delete queue: %v", err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{queue, queue + ".retry.1s"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}
