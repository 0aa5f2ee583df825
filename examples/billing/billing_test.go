package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// syncBuffer is the daemon's stderr, written by its copier and read by the
// test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+format, append([]any{timeout}, args...)...)
		}
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // this module's one bounded poll helper
	}
}

// scratch gives a test a database (dropped at its end, name prefix plus a
// random suffix), the broker's URL, and an exchange and a queue of its
// own, deleted with the queue's retry queues at its end.
func scratch(t *testing.T, prefix string) (dsn, amqpURL, exchange, queue string) {
	t.Helper()
	ctx := context.Background()
	s := suffix()
	adminURL := getenv("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
	u, err := url.Parse(adminURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := prefix + s
	u.Path = "/" + dbName
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{dbName}.Sanitize()+" WITH (FORCE)")
	})
	amqpURL = getenv("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	exchange, queue = "billing.test."+s, "billing.test."+s
	t.Cleanup(func() { deleteQueues(amqpURL, exchange, queue) })
	return u.String(), amqpURL, exchange, queue
}

// deleteQueues removes a test's queue, its retry queues and its exchange
// (failures are rows of the service database, dropped with it).
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
	for _, q := range []string{queue, queue + ".retry.1s", queue + ".retry.10s", queue + ".retry.1m", queue + ".retry.10m"} {
		_, _ = ch.QueueDelete(q, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}

// What a team outside the repository does: build its own daemon from
// consumer and daemon, check and migrate with it (its handler's goose
// files embedded), run it against PostgreSQL and RabbitMQ, and see a
// duplicated workload applied exactly once, a bad payload one row of the
// failure store (platform.failed_event), and a clean SIGTERM.
func TestOwnDaemonAppliesEachEventOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "billing")
	build := exec.Command(getenv("GO", "go"), "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // shares the suite's other builds' compile
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// A database, an exchange and a queue of this test's own.
	dsn, amqpURL, exchange, queue := scratch(t, "billing_test_")
	metricsAddr := freeAddr(t)
	env := append(os.Environ(),
		"PLATFORMD_ADMIN_LISTEN="+freeAddr(t), "PLATFORMD_METRICS_LISTEN="+metricsAddr,
		"PLATFORMD_AMQP_URL="+amqpURL, "PLATFORMD_EXCHANGE="+exchange,
		"PLATFORMD_BILLING_DB="+dsn, "PLATFORMD_BILLING_QUEUE="+queue)
	command := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("billing %v: %v\n%s", args, err, out)
		}
		return string(out)
	}

	command("check", "-config", "platformd.yaml")
	command("migrate", "-config", "platformd.yaml", "-create-db")
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM platform.goose_billing_open_invoice WHERE version_id = 1`); n != 1 {
		t.Fatalf("the handler's migration was not applied")
	}

	stderr := &syncBuffer{}
	run := exec.Command(bin, "run", "-config", "platformd.yaml")
	run.Env, run.Stderr = env, stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	var runErr error // set before exited is closed
	exited := make(chan struct{})
	go func() { runErr = run.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = run.Process.Kill()
		<-exited
	})

	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	consumers := func(q string) int {
		c, err := conn.Channel()
		if err != nil {
			return -1
		}
		defer c.Close()
		info, err := c.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			return -1
		}
		return info.Consumers
	}
	eventually(t, 60*time.Second, func() bool { return consumers(queue) > 0 }, "the daemon does not consume %s:\n%s", queue, stderr)

	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish := func(id uuid.UUID, payload string) []byte {
		t.Helper()
		body, _ := json.Marshal(map[string]any{
			"event_id": id, "event_name": EventOrderPlaced, "occurred_at": time.Now().UTC().Format(time.RFC3339Nano),
			"payload": json.RawMessage(payload),
		})
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, EventOrderPlaced, false, false,
			amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			t.Fatalf("publish not confirmed: %v", err)
		}
		return body
	}
	const orders = 300
	orderIDs := make([]uuid.UUID, orders)
	var badID uuid.UUID
	var badBody []byte
	for i := range orders {
		orderIDs[i] = uuid.New()
		payload := fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "2.000"}, {"product_id": %q, "quantity": "0.500"}]}`,
			orderIDs[i], uuid.New(), uuid.New(), uuid.New())
		id := uuid.Must(uuid.NewV7())
		for range 1 + i%3/2 { // every third published twice, as a relay republishing
			publish(id, payload)
		}
		if i == orders/2 {
			badID = uuid.Must(uuid.NewV7())
			badBody = publish(badID, fmt.Sprintf(`{"order_id": %q, "customer_id": %q, "lines": [{"product_id": %q, "quantity": "abc"}]}`,
				uuid.New(), uuid.New(), uuid.New()))
		}
	}

	eventually(t, 60*time.Second, func() bool { return count(`SELECT count(*) FROM processed_event`) == orders },
		"%d of %d events processed:\n%s", count(`SELECT count(*) FROM processed_event`), orders, stderr)
	// The bad payload: one row of the failure store, permanent, its body
	// byte for byte, the handler named; nothing else failed.
	eventually(t, 30*time.Second, func() bool { return count(`SELECT count(*) FROM platform.failed_event`) == 1 },
		"the bad payload is not in platform.failed_event (%d rows):\n%s", count(`SELECT count(*) FROM platform.failed_event`), stderr)
	var (
		pool, reason, state, handler, errText string
		eventID                               *uuid.UUID
		body                                  []byte
		copies                                int
	)
	if err := db.QueryRow(ctx, `SELECT pool, event_id, reason, state, handler, error, body, copies FROM platform.failed_event`).
		Scan(&pool, &eventID, &reason, &state, &handler, &errText, &body, &copies); err != nil {
		t.Fatal(err)
	}
	if pool != "billing-events" || eventID == nil || *eventID != badID {
		t.Fatalf("failure of pool %q, event %v; want billing-events, %s", pool, eventID, badID)
	}
	if reason != "permanent" || state != "failed" || copies != 1 {
		t.Fatalf("reason %q, state %q, copies %d; want permanent, failed, 1 (error %q)", reason, state, copies, errText)
	}
	if handler != "billing.open_invoice" || errText == "" {
		t.Fatalf("handler %q, error %q; want billing.open_invoice and its error", handler, errText)
	}
	if !bytes.Equal(body, badBody) {
		t.Fatalf("stored body %q, published %q", body, badBody)
	}
	// No failure queue: the pool does not declare one.
	c, err := conn.Channel() // a failed passive declare closes its channel
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.QueueDeclarePassive(queue+".failed", true, false, false, false, nil)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
		t.Fatalf("%s.failed: passive declare %v, want NOT_FOUND (failures belong in platform.failed_event)", queue, err)
	}
	if n := count(`SELECT count(*) FROM invoice`); n != orders {
		t.Fatalf("%d invoices for %d orders", n, orders)
	}
	if n := count(`SELECT count(*) FROM (SELECT order_id FROM invoice WHERE order_id = ANY($1) GROUP BY order_id HAVING count(*) = 1 AND sum(quantity) = 2.5) o`, orderIDs); n != orders {
		t.Fatalf("%d of %d orders have exactly one invoice of quantity 2.5", n, orders)
	}

	if err := run.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if runErr != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", runErr, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM:\n%s", stderr)
	}
}
