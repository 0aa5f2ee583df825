package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/testdb"
)

// TestOutboxUnroutableFromConfig: services[].outbox.unroutable reaches each
// service's relay. Two producers publish an event no queue is bound for:
// the one on the default has the broker keep its rows in the exchange's
// unroutable queue, the one with drop has them deleted; both outboxes
// empty, each counted under its own outcome.
func TestOutboxUnroutableFromConfig(t *testing.T) {
	t.Parallel()
	keepDSN, dropDSN := testdb.New(t, "unroutable_keep"), testdb.New(t, "unroutable_drop")
	e := newReloadEnv(t, testdb.New(t, "unroutable_stock"))
	e.write(t, "", fmt.Sprintf("  - name: keep\n    database: %q\n    outbox: {poll: 50ms}\n", keepDSN)+
		fmt.Sprintf("  - name: drop\n    database: %q\n    outbox: {poll: 50ms, unroutable: drop}\n", dropDSN))
	exchange := "reload." + e.suffix
	conn, err := amqp.Dial(e.broker)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(broker.UnroutableQueue(exchange), false, false, false)
			_ = ch.ExchangeDelete(broker.UnroutableExchange(exchange), false, false)
			_ = ch.Close()
		}
	})
	d := e.start(t)
	t.Cleanup(d.Stop)

	ctx := context.Background()
	dbs := map[string]*pgxpool.Pool{}
	for name, dsn := range map[string]string{"keep": keepDSN, "drop": dropDSN} {
		db, err := pgxpool.New(ctx, dsn)
		require.NoError(t, err)
		t.Cleanup(db.Close)
		dbs[name] = db
		_, err = db.Exec(ctx, `SELECT platform.publish('nobody.listens.v1', jsonb_build_object('i', g)) FROM generate_series(1, 3) g`)
		require.NoError(t, err)
	}
	m := d.metrics.Outbox.Unroutable
	require.Eventually(t, func() bool {
		return count(t, dbs["keep"], `SELECT count(*) FROM platform.outbox`) == 0 &&
			count(t, dbs["drop"], `SELECT count(*) FROM platform.outbox`) == 0 &&
			testutil.ToFloat64(m.WithLabelValues("keep", metrics.UnroutableKept)) == 3 &&
			testutil.ToFloat64(m.WithLabelValues("drop", metrics.UnroutableDropped)) == 3
	}, 30*time.Second, 20*time.Millisecond, "both outboxes empty, 3 kept and 3 dropped")
	require.InDelta(t, 0, testutil.ToFloat64(m.WithLabelValues("keep", metrics.UnroutableDropped)), 0)
	require.InDelta(t, 0, testutil.ToFloat64(m.WithLabelValues("drop", metrics.UnroutableKept)), 0)
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(broker.UnroutableQueue(exchange), true, false, false, false, nil)
	require.NoError(t, err)
	require.Equal(t, 3, q.Messages, "the kept service's three events, none of the dropped one's")
}
