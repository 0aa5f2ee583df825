package daemon_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/testdb"
)

// invoiceYAML is a one-service config for the billing handler below, on
// dsn, with its pool on a queue of its own bound on exchange.
func invoiceYAML(dsn, exchange, queue string) string {
	return fmt.Sprintf(`log: {level: warn, format: text}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "127.0.0.1:0"}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: %s}
services:
  - name: billing
    database: %q
    pools:
      - name: billing-events
        queue: %s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice]
`, exchange, dsn, queue)
}

// invoiceRegistry registers billing.open_invoice, which records each order
// in invoice (its migration creates the table).
func invoiceRegistry() *consumer.Registry {
	reg := consumer.NewRegistry()
	reg.MustRegister(consumer.Registration{
		Name:   "billing.open_invoice",
		Events: []string{"order.order.placed.v1"},
		Migrations: fstest.MapFS{"001_invoice.sql": {Data: []byte(
			"-- +goose Up\nCREATE TABLE invoice (event_id uuid PRIMARY KEY, order_id uuid NOT NULL);\n-- +goose Down\nDROP TABLE invoice;\n")}},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO invoice (event_id, order_id) VALUES ($1, ($2::jsonb->>'order_id')::uuid)`, ev.ID, string(ev.Payload))
			return err
		}),
	})
	return reg
}

// A daemon run from Go: ready, consuming (an event published twice is
// applied once), reachable on the free ports it picked, and stopped by
// Stop, after which Run has returned nil and cannot run again.
func TestNewRunStop(t *testing.T) {
	dsn := testdb.New(t, "embed")
	suffix := uuid.NewString()[:8]
	exchange, queue := "embed.events."+suffix, "embed.billing."+suffix
	reg := invoiceRegistry()
	cfg, err := daemon.ParseConfig("embed.yaml", []byte(invoiceYAML(dsn, exchange, queue)), reg)
	require.NoError(t, err)
	require.Equal(t, []string{"billing"}, cfg.Services())
	d, err := daemon.New(cfg, reg, daemon.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	d.Stop() // before Run: nothing to stop
	require.Empty(t, d.AdminAddr())

	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready")
	}
	require.NotEmpty(t, d.MetricsAddr())
	require.Empty(t, d.ConsoleAddr())
	conn, err := grpc.NewClient(d.AdminAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	health, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, health.GetStatus())

	orderID := uuid.New()
	publishTwice(t, exchange, orderID)
	db, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	defer db.Close(context.Background())
	count := func() (n int) {
		require.NoError(t, db.QueryRow(t.Context(), `SELECT count(*) FROM invoice WHERE order_id = $1`, orderID).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return count() == 1 }, 30*time.Second, 10*time.Millisecond)

	d.Stop()
	require.NoError(t, <-errc)
	d.Stop() // twice: fine
	require.ErrorIs(t, d.Run(context.Background()), daemon.ErrRunning)
	require.Equal(t, 1, count())
}

// A configuration with mistakes is refused with each key's path; a start
// that fails is Run's error, and Ready never closes.
func TestLoadErrorsAndFailedStart(t *testing.T) {
	reg := invoiceRegistry()
	_, err := daemon.ParseConfig("bad.yaml", []byte("services:\n  - name: billing\n    pools: [{name: p, queue: q, bindings: [a], handlers: [nope]}]\n"), reg)
	require.ErrorContains(t, err, "services[0].database")
	require.ErrorContains(t, err, "services[0].pools[0].handlers[0]")

	// The admin port is taken: the start fails, Run says why.
	taken := daemontest.StartYAML(t, invoiceYAML(testdb.New(t, "embed_taken"), "embed.events."+uuid.NewString()[:8], "embed.taken."+uuid.NewString()[:8]), reg,
		daemon.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	yaml := invoiceYAML(testdb.New(t, "embed_fail"), "embed.events."+uuid.NewString()[:8], "embed.fail."+uuid.NewString()[:8])
	cfg, err := daemon.ParseConfig("fail.yaml", []byte(replaceOnce(t, yaml, `admin: {listen: "127.0.0.1:0"}`, `admin: {listen: "`+taken.AdminAddr()+`"}`)), reg)
	require.NoError(t, err)
	d, err := daemon.New(cfg, reg, daemon.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	require.NoError(t, err)
	err = d.Run(context.Background())
	require.ErrorContains(t, err, "address already in use")
	select {
	case <-d.Ready():
		t.Fatal("ready after a failed start")
	default:
	}
	require.NotErrorIs(t, err, daemon.ErrRunning)
}

func replaceOnce(t *testing.T, s, old, repl string) string {
	t.Helper()
	require.Equal(t, 1, strings.Count(s, old), "%q must occur once in the config", old)
	return strings.Replace(s, old, repl, 1)
}

// publishTwice publishes one order placed event twice (a relay republish),
// with publisher confirms.
func publishTwice(t *testing.T, exchange string, orderID uuid.UUID) {
	t.Helper()
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: "order.order.placed.v1",
		OccurredAt: time.Now().UTC(), Payload: []byte(fmt.Sprintf(`{"order_id": %q}`, orderID))})
	require.NoError(t, err)
	for range 2 {
		dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), exchange, "order.order.placed.v1", false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		require.NoError(t, err)
		ok, err := dc.WaitContext(t.Context())
		require.NoError(t, err)
		require.True(t, ok)
	}
}
