package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/daemon/daemontest"
)

// A team's handler tested the way River's users test theirs: the very
// daemon it ships, started in the test by daemontest on free ports against
// a database and an exchange of the test's own, fed a duplicated workload;
// each order gets one invoice.
func TestHandlerUnderDaemontest(t *testing.T) {
	ctx := context.Background()
	s := suffix()
	adminURL := getenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := "billing_dt_" + s
	u.Path = "/" + dbName
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
	})
	amqpURL := getenv("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	exchange, queue := "billing.dt."+s, "billing.dt."+s
	// Cleanups run last first: the queues go after the daemon has stopped.
	t.Cleanup(func() { deleteQueues(amqpURL, exchange, queue) })
	t.Setenv("PLATFORMD_ADMIN_LISTEN", "127.0.0.1:0")
	t.Setenv("PLATFORMD_METRICS_LISTEN", "127.0.0.1:0")
	t.Setenv("PLATFORMD_AMQP_URL", amqpURL)
	t.Setenv("PLATFORMD_EXCHANGE", exchange)
	t.Setenv("PLATFORMD_BILLING_DB", u.String())
	t.Setenv("PLATFORMD_BILLING_QUEUE", queue)

	reg := consumer.NewRegistry()
	if err := register(reg); err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, "platformd.yaml", reg, daemon.WithCreateDatabases())
	if d.AdminAddr() == "" || d.MetricsAddr() == "" {
		t.Fatalf("no listen addresses once ready: admin %q, metrics %q", d.AdminAddr(), d.MetricsAddr())
	}
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const orders = 50
	for i := range orders {
		payload := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "1.000"}]}`, uuid.New(), uuid.New(), uuid.New())
		body, _ := json.Marshal(map[string]any{"event_id": uuid.Must(uuid.NewV7()), "event_name": EventOrderPlaced,
			"occurred_at": time.Now().UTC().Format(time.RFC3339Nano), "payload": json.RawMessage(payload)})
		for range 1 + i%2 { // every other order published twice
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, EventOrderPlaced, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				t.Fatalf("publish not confirmed: %v", err)
			}
		}
	}
	db, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	count := func(q string) int {
		var n int
		if err := db.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	eventually(t, 60*time.Second, func() bool { return count(`SELECT count(*) FROM processed_event`) == orders },
		"%d of %d events processed", count(`SELECT count(*) FROM processed_event`), orders)
	if n := count(`SELECT count(*) FROM invoice`); n != orders {
		t.Fatalf("%d invoices for %d orders", n, orders)
	}
}

// deleteQueues removes the test's queue, its retry and failure queues and
// its exchange.
func deleteQueues(amqpURL, exchange, queue string) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{queue, queue + ".failed", queue + ".retry.1s", queue + ".retry.10s", queue + ".retry.1m", queue + ".retry.10m"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}
