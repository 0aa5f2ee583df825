package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	// Cleanups run last first: the database and the queues go after the
	// daemon has stopped.
	dsn, amqpURL, exchange, queue := scratch(t, "billing_dt_")
	t.Setenv("PLATFORMD_ADMIN_LISTEN", "127.0.0.1:0")
	t.Setenv("PLATFORMD_METRICS_LISTEN", "127.0.0.1:0")
	t.Setenv("PLATFORMD_AMQP_URL", amqpURL)
	t.Setenv("PLATFORMD_EXCHANGE", exchange)
	t.Setenv("PLATFORMD_BILLING_DB", dsn)
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
	db, err := pgx.Connect(ctx, dsn)
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
