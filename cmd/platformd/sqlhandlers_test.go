package main_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// The shop's effects as SQL handlers, as examples/shop-sql declares them.
const (
	reserveSQL = `|
            INSERT INTO reservation (id, order_id, product_id, quantity, created_at)
            SELECT gen_random_uuid(), (@payload->>'order_id')::uuid, (line->>'product_id')::uuid,
                   (line->>'quantity')::numeric(12,3), now()
            FROM jsonb_array_elements(@payload->'lines') AS line`
	trackSQL = `|
            INSERT INTO order_status (order_id, status, version, updated_at)
            VALUES ((@payload->>'order_id')::uuid, @payload->>'status', (@payload->>'version')::int, now())
            ON CONFLICT (order_id) DO UPDATE
            SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
            WHERE order_status.version < EXCLUDED.version`
)

// sqlConfig is e.config's shop with SQL handlers only: the release binary
// runs it, with no Go handler of the shop.
func (e *env) sqlConfig(t *testing.T) string {
	t.Helper()
	e.adminAddr, e.metrics = freePort(t), freePort(t)
	e.bin = binary
	migrations, err := filepath.Abs(filepath.Join("..", "..", "internal", "fixture", "shop", "migrations"))
	require.NoError(t, err)
	cfg := fmt.Sprintf(`log: {level: info, format: json}
admin:
  listen: %[1]s
  tokens:
    - {name: ops, role: admin, token: %[2]q}
metrics: {listen: %[3]s}
broker: {url: %[4]q, exchange: %[5]s}
services:
  - name: stock
    database: %[6]q
    migrations: %[7]s/stock
    sql_handlers:
      - name: stock.reserve_sql
        events: [order.order.placed.v1]
        sql:
          - %[9]s
    pools:
      - name: stock-events-%[8]s
        queue: e2e.stock.%[8]s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve_sql]
        concurrency: 2
        batch: {size: 100, wait: 5ms}
        retry: {delays: [1s, 2s]}
  - name: shipping
    database: %[10]q
    migrations: %[7]s/shipping
    sql_handlers:
      - name: shipping.track_status_sql
        events: [order.order.status_changed.v1]
        sql:
          - %[12]s
    pools:
      - name: shipping-events-%[8]s
        queue: e2e.shipping.%[8]s
        queue_type: quorum
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status_sql]
        retry: {delays: [1s]}
`, e.adminAddr, adminToken, e.metrics, testenv.AMQPURL(), e.exchange, e.stockDSN, migrations, e.suffix, reserveSQL,
		e.shipDSN, migrations, trackSQL)
	path := filepath.Join(e.dir, "platformd-sql.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// publisher publishes envelopes with confirms.
type publisher struct {
	t        *testing.T
	ch       *amqp.Channel
	exchange string
}

func newPublisher(t *testing.T, exchange string) *publisher {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.Confirm(false))
	return &publisher{t: t, ch: ch, exchange: exchange}
}

// publish sends one envelope and returns its body as published.
func (p *publisher) publish(id uuid.UUID, name string, payload any, headers amqp.Table) []byte {
	p.t.Helper()
	raw, ok := payload.(string)
	if !ok {
		b, err := json.Marshal(payload)
		require.NoError(p.t, err)
		raw = string(b)
	}
	body, err := envelope.Encode(envelope.Envelope{EventID: id, EventName: name, OccurredAt: time.Now().UTC(), Payload: json.RawMessage(raw)})
	require.NoError(p.t, err)
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(context.Background(), p.exchange, name, false, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Headers: headers, Body: body})
	require.NoError(p.t, err)
	ok, err = dc.WaitContext(context.Background())
	require.NoError(p.t, err)
	require.True(p.t, ok)
	return body
}

// SQL handlers end to end through the release binary: a duplicated workload
// applied once; bad payloads rows of the failure store (one each) as
// permanent with their SQLSTATE while the others commit; a SIGKILL mid-stream and the broker's
// redelivery; a replay; the versioned upsert under shuffled versions.
func TestSQLHandlersEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.sqlConfig(t)
	d := e.start(t, cfg)
	cli, ctx := adminClient(t, e.adminAddr, adminToken)
	stockPool := "stock-events-" + e.suffix
	pub := newPublisher(t, e.exchange)

	// Bad payloads amid good ones, all queued while the pool is paused so
	// that they share batches.
	_, err := cli.PausePool(ctx, &adminv1.PausePoolRequest{Pool: stockPool, Reason: "e2e"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
		return err == nil && r.GetPools()[0].GetState() == adminv1.PoolState_POOL_STATE_PAUSED
	}, 20*time.Second, 50*time.Millisecond)
	badQty, badLines := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	badBodies := map[uuid.UUID][]byte{}
	var ids []uuid.UUID
	var orders []shop.OrderPlaced
	lines := 0
	for i := range 150 {
		switch i {
		case 50:
			badBodies[badQty] = pub.publish(badQty, shop.EventOrderPlaced, `{"order_id": "`+uuid.NewString()+`", "lines": [{"product_id": "`+uuid.NewString()+`", "quantity": "abc"}]}`, nil)
		case 100:
			badBodies[badLines] = pub.publish(badLines, shop.EventOrderPlaced, `{"order_id": "`+uuid.NewString()+`", "lines": {"product_id": "`+uuid.NewString()+`"}}`, nil)
		}
		id := uuid.Must(uuid.NewV7())
		o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
		for range 1 + i%3 {
			o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: "1.500"})
		}
		lines += len(o.Lines)
		ids, orders = append(ids, id), append(orders, o)
		copies := 1 + i%2 // every other one republished by the relay
		for range copies {
			pub.publish(id, shop.EventOrderPlaced, o, nil)
		}
	}
	_, err = cli.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: stockPool})
	require.NoError(t, err)
	reservations := func() int { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) }
	require.Eventually(t, func() bool { return reservations() == lines }, 60*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)

	// The failure store: both bad payloads, one row each, permanent, with
	// the SQLSTATE and PostgreSQL's message, their bodies byte for byte.
	var failed []failedRow
	require.Eventually(t, func() bool {
		failed = failedRows(t, e.stockDSN, stockPool)
		return len(failed) >= 2
	}, 30*time.Second, 50*time.Millisecond)
	require.Len(t, failed, 2, "one row per bad payload, nothing else failed")
	byID := map[uuid.UUID]failedRow{}
	for _, f := range failed {
		require.NotNil(t, f.EventID)
		byID[*f.EventID] = f
	}
	for id, want := range map[uuid.UUID]string{
		badQty:   `stock.reserve_sql: statement 1: 22P02 invalid input syntax for type numeric: "abc"`,
		badLines: `stock.reserve_sql: statement 1: 22023 cannot extract elements from an object`,
	} {
		f, ok := byID[id]
		require.True(t, ok, "event %s in the failure store", id)
		require.Equal(t, "permanent", f.Reason)
		require.Equal(t, want, f.Error)
		require.Equal(t, stockPool, f.Pool)
		require.Equal(t, "failed", f.State)
		require.Equal(t, "stock.reserve_sql", f.Handler)
		require.Equal(t, shop.EventOrderPlaced, f.EventName)
		require.Equal(t, 1, f.Copies)
		require.Equal(t, badBodies[id], f.Body, "the body byte for byte")
	}
	require.Equal(t, len(ids), count(t, e.stockDSN, `SELECT count(*) FROM processed_event`), "the good events once, the bad ones not")

	// A bigger stream, SIGKILLed mid-way: RabbitMQ redelivers what was not
	// acked, and the restarted daemon applies each event once. A kill finds
	// a delivery committed but not acked only when a worker holds one (its
	// ack waits for the next batch's); one that lands when every worker has
	// caught up with the stream finds none, and its redeliveries are all
	// fresh. So up to three streams are killed, until one kill found such a
	// delivery: its redelivery meets the row (a duplicate of source
	// redelivery, counted by the restarted daemon).
	redelivered := func() float64 {
		return metric(t, e.metrics, `platformd_duplicates_total{pool="`+stockPool+`",service="stock",source="redelivery"}`)
	}
	want := lines
	for round := 1; round <= 3; round++ {
		base := want
		done := make(chan int)
		go func() {
			sent, err := e.publish(1500, 7)
			if err != nil {
				t.Errorf("publish: %v", err)
			}
			done <- sent
		}()
		require.Eventually(t, func() bool { return reservations() > base+200 }, 60*time.Second, 20*time.Millisecond)
		require.NoError(t, d.cmd.Process.Kill())
		waitErr := <-d.done
		d.done <- waitErr
		sent := <-done
		d = e.start(t, cfg)
		want = base + sent // e.publish sends one-line orders
		require.Eventually(t, func() bool { return reservations() == want }, 90*time.Second, 50*time.Millisecond,
			"want %d reservations, have %d; logs:\n%s", want, reservations(), d.stderr)
		// The duplicates add no reservation: give their redelivery a
		// moment to come through.
		for deadline := time.Now().Add(2 * time.Second); redelivered() == 0 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond) //nolint:forbidigo // a bounded poll (2 s) for the redeliveries to show in the broker's counters
		}
		if redelivered() > 0 {
			break
		}
		t.Logf("kill %d found no delivery committed but not acked", round)
	}

	// A replay of the first events: duplicates, no effect.
	for i, id := range ids[:40] {
		pub.publish(id, shop.EventOrderPlaced, orders[i], amqp.Table{"x-replay": "e2e"})
	}
	// Status changes, out of order and duplicated: the newest version stays.
	order := uuid.New()
	changes := map[int]uuid.UUID{1: uuid.Must(uuid.NewV7()), 2: uuid.Must(uuid.NewV7()), 3: uuid.Must(uuid.NewV7())}
	for _, v := range []int{3, 1, 3, 2, 1, 2, 3} {
		pub.publish(changes[v], shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: order, Status: fmt.Sprintf("v%d", v), Version: int32(v)}, nil)
	}
	require.Eventually(t, func() bool {
		return count(t, e.shipDSN, `SELECT count(*) FROM processed_event`) == 3 &&
			metric(t, e.metrics, `platformd_duplicates_total{pool="`+stockPool+`",service="stock",source="replay"}`) == 40
	}, 30*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Equal(t, want, reservations(), "a replay has no effect")
	require.Equal(t, 1, count(t, e.shipDSN, `SELECT count(*) FROM order_status WHERE status = 'v3' AND version = 3`))
	t.Logf("after the restart: %v redelivered duplicates, %v republished", redelivered(),
		metric(t, e.metrics, `platformd_duplicates_total{pool="`+stockPool+`",service="stock",source="republish"}`))
	require.Positive(t, redelivered(), "the deliveries committed before the SIGKILL but not acked come back")
	require.NoError(t, d.terminate(t), "logs:\n%s", d.stderr)
}

// metric returns the value of one sample of the daemon's metrics, 0 when
// absent.
func metric(t *testing.T, addr, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			_, err := fmt.Sscan(rest, &v)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// exitCode runs the release binary and returns its output and exit code.
func exitCode(t *testing.T, args ...string) (string, int) {
	t.Helper()
	return exitCodeOf(t, binary, args...)
}

// exitCodeOf runs bin and returns its output and exit code.
func exitCodeOf(t *testing.T, bin string, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return string(out), exitErr.ExitCode()
	}
	require.NoError(t, err, string(out))
	return string(out), 0
}

// Every SQL handler mistake `check` can see, with its key's path, and the
// daemon exits 2 (run too) without touching a database or the broker.
func TestSQLHandlerMistakesRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "billing"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "billing", "001_invoice.sql"), []byte("-- +goose Up\nCREATE TABLE invoice (order_id uuid);\n"), 0o600))
	bad := `services:
  - name: billing
    database: postgres://postgres@127.0.0.1:1/never
    migrations: billing
    sql_handlers:
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        sql:
          - INSERT INTO invoice (order_id) VALUES ((@paylod->>'order_id')::uuid)
          - "  "
          - COMMIT
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        sql: [SELECT 1]
      - name: billing.audit
        events: []
        sql: [SELECT @event_id]
      - name: stock.reserve
        events: [order.order.placed.v1]
        sql: [SELECT 1]
    pools:
      - name: billing-events
        queue: billing.events
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice]
`
	path := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
	const taken = `services[0].sql_handlers[3].name: handler name "stock.reserve" is taken by a Go handler of this binary`
	for _, bin := range []string{binary, shopBinary} {
		for _, cmd := range []string{"check", "run", "migrate"} {
			out, code := exitCodeOf(t, bin, cmd, "-config", path)
			require.Equal(t, 2, code, out)
			for _, want := range []string{
				"services[0].sql_handlers[0].sql[0]: unknown parameter @paylod",
				"services[0].sql_handlers[0].sql[1]: empty statement",
				"services[0].sql_handlers[0].sql[2]: COMMIT is not allowed in a SQL handler",
				`services[0].sql_handlers[1].name: duplicate handler name "billing.open_invoice" (also services[0].sql_handlers[0])`,
				"services[0].sql_handlers[2].events: at least one event name is required",
			} {
				require.Contains(t, out, want, "%s %s", bin, cmd)
			}
			// The name is taken only where the shop's Go handlers are.
			if bin == shopBinary {
				require.Contains(t, out, taken, "%s %s", bin, cmd)
			} else {
				require.NotContains(t, out, "services[0].sql_handlers[3]", "%s %s", bin, cmd)
			}
		}
	}
}

// A statement naming a column that does not exist stops migrate (and run,
// with or without its migrations) with the statement's key path and
// PostgreSQL's message, before any message is consumed.
func TestSQLHandlerThatDoesNotPrepareStopsMigrate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "billing"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "billing", "001_invoice.sql"), []byte(
		"-- +goose Up\nCREATE TABLE invoice (order_id uuid PRIMARY KEY, total numeric, opened_at timestamptz);\n"), 0o600))
	dsn := testdb.New(t, "e2e_billing")
	cfg := fmt.Sprintf(`metrics: {listen: %s}
admin: {listen: %s}
broker: {url: %q, exchange: e2e.never.%s}
services:
  - name: billing
    database: %q
    migrations: billing
    sql_handlers:
      - name: billing.audit
        events: [order.order.placed.v1]
        sql: [SELECT @event_id]
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        sql:
          - INSERT INTO invoice (order_id, opened_at) VALUES ((@payload->>'order_id')::uuid, @occurred_at)
          - |
            UPDATE invoice
            SET totl = (@payload->>'total')::numeric
            WHERE order_id = (@payload->>'order_id')::uuid
    pools:
      - name: billing-events-%[4]s
        queue: e2e.billing.%[4]s
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice, billing.audit]
`, freePort(t), freePort(t), testenv.AMQPURL(), uuid.NewString()[:8], dsn)
	path := filepath.Join(dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))

	out, code := exitCode(t, "check", "-config", path)
	require.Equal(t, 0, code, "only the database knows the columns: %s", out)
	const want = `services[0].sql_handlers[1].sql[1]: does not prepare: 42703 column \"totl\" of relation \"invoice\" does not exist, at line 2, column 5`
	for _, args := range [][]string{{"migrate"}, {"run"}, {"run", "-no-migrate"}} {
		out, code = exitCode(t, append(args, "-config", path)...)
		require.Equal(t, 1, code, "platformd %v: %s", args, out)
		require.Contains(t, out, want, "platformd %v", args)
		require.NotContains(t, out, "daemon: running")
	}
	require.Equal(t, 1, count(t, dsn, `SELECT count(*) FROM platform.goose__service_billing WHERE version_id = 1`),
		"the service's migrations were applied first")
}
