package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/testdb"
)

// binary is the release binary (this package's main: no Go handler);
// shopBinary is the tests' shop daemon (internal/fixture/shop/shopd: the
// same command line with the fixture shop's Go handlers, kept apart from
// the example shop so that the example may change freely). A test runs the
// one its config needs: SQL and remote handlers run through binary, which
// is the point of those tests; the shop's Go handlers need shopBinary.
var binary, shopBinary, ctlBinary, grpcurlBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "platformd-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "platformd")
	shopBinary = filepath.Join(dir, "shopd")
	ctlBinary = filepath.Join(dir, "platformctl")
	grpcurlBinary = filepath.Join(dir, "grpcurl")
	for _, b := range [][]string{
		{"build", "-race", "-o", binary, "."},
		{"build", "-race", "-o", shopBinary, "../../internal/fixture/shop/shopd"},
		{"build", "-o", ctlBinary, "../platformctl"},
		// grpcurl is pinned in a tool module of its own.
		{"build", "-modfile=../../tools/grpcurl/go.mod", "-o", grpcurlBinary, "github.com/fullstorydev/grpcurl/cmd/grpcurl"},
	} {
		cmd := exec.Command("go", b...)
		if !slices.Contains(b, "-race") {
			cmd.Env = staticBuild()
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			panic(fmt.Sprintf("go %v: %v\n%s", b, err, out))
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// staticBuild is the environment of the suite's builds without -race:
// CGO_ENABLED=0, as the release binary is built (make image), so that they
// and deploy/image's static build share one compile of the dependencies
// on an empty build cache (-race needs cgo; nothing else does).
func staticBuild() []string { return append(os.Environ(), "CGO_ENABLED=0") }

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

const adminToken = "e2e-admin-token-0123456789"

// env is one daemon's world: its own databases, exchange, queues and ports.
type env struct {
	t                  *testing.T
	dir                string
	stockDSN, shipDSN  string
	exchange, suffix   string
	adminAddr, metrics string
	// bin is the binary that can run the config last written: shopBinary
	// after config (the shop's Go handlers), binary after sqlConfig and
	// remoteConfig.
	bin string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	suffix := uuid.NewString()[:8]
	e := &env{t: t, dir: t.TempDir(), suffix: suffix, exchange: "e2e.events." + suffix,
		stockDSN: testdb.New(t, "e2e_stock"), shipDSN: testdb.New(t, "e2e_ship")}
	t.Cleanup(func() {
		conn, err := amqp.Dial(testenv.AMQPURL())
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, q := range []string{"stock", "shipping"} {
			base := "e2e." + q + "." + suffix
			for _, n := range []string{base, base + ".retry.1s", base + ".retry.2s"} {
				_, _ = ch.QueueDelete(n, false, false, false)
			}
		}
		_ = ch.ExchangeDelete(e.exchange, false, false)
	})
	return e
}

// config writes the shop's config (its Go handlers, run by shopBinary)
// with extra appended, and returns its path.
func (e *env) config(t *testing.T, extra string) string {
	t.Helper()
	e.adminAddr, e.metrics = freePort(t), freePort(t)
	e.bin = shopBinary
	cfg := fmt.Sprintf(`log: {level: info, format: json}
admin:
  listen: %s
  tokens:
    - {name: ops, role: admin, token: %q}
metrics: {listen: %s}
broker: {url: %q, exchange: %s}
services:
  - name: stock
    database: %q
    horizon: 336h
    min_horizon: 24h
    pools:
      - name: stock-events-%[7]s
        queue: e2e.stock.%[7]s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: 2
        batch: {size: 50, wait: 2ms}
        retry: {delays: [1s, 2s]}
  - name: shipping
    database: %q
    pools:
      - name: shipping-events-%[7]s
        queue: e2e.shipping.%[7]s
        queue_type: quorum
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status]
        retry: {delays: [1s]}
%[9]s`, e.adminAddr, adminToken, e.metrics, testenv.AMQPURL(), e.exchange, e.stockDSN, e.suffix, e.shipDSN, extra)
	path := filepath.Join(e.dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// daemon is a running platformd subprocess.
type daemon struct {
	cmd    *exec.Cmd
	stderr *lockedWriter
	done   chan error
}

func (e *env) start(t *testing.T, cfgPath string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(e.bin, "run", "-config", cfgPath), stderr: &lockedWriter{buf: &bytes.Buffer{}}, done: make(chan error, 1)}
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		err := <-d.done
		d.done <- err
	})
	require.Eventually(t, func() bool {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("daemon exited at start: %v\n%s", err, d.stderr)
		default:
		}
		c, err := net.Dial("tcp", e.adminAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 60*time.Second, 50*time.Millisecond, "daemon did not start: %s", d.stderr)
	// The pools declare the topology when they connect: wait for every one
	// to consume (or sit paused) before producers publish.
	cli, ctx := adminClient(t, e.adminAddr, adminToken)
	broker, err := amqp.ParseURI(testenv.AMQPURL())
	require.NoError(t, err)
	node := net.JoinHostPort(broker.Host, strconv.Itoa(broker.Port))
	var last []*adminv1.Pool
	require.Eventually(t, func() bool {
		r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{})
		if err != nil {
			return false
		}
		last = r.GetPools()
		for _, p := range r.GetPools() {
			if s := p.GetState(); s != adminv1.PoolState_POOL_STATE_RUNNING && s != adminv1.PoolState_POOL_STATE_PAUSED {
				return false
			}
			// A connected pool says which broker node it is on.
			if p.GetBrokerNode() != node {
				return false
			}
		}
		return len(r.GetPools()) == 2
	}, 60*time.Second, 50*time.Millisecond, "pools did not connect to %s: %v; %s", node, last, d.stderr)
	return d
}

// lockedWriter serialises the child's stderr copy with the test's reads.
type lockedWriter struct {
	mu  sync.Mutex
	buf *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (d *daemon) terminate(t *testing.T) error {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("daemon did not stop within 60s after SIGTERM")
		return nil
	}
}

func (e *env) publishOrders(t *testing.T, n int, dupEvery int) int {
	t.Helper()
	sent, err := e.publish(n, dupEvery)
	require.NoError(t, err)
	return sent
}

// publish sends n one-line orders, every dupEvery-th twice (a relay
// republish), each confirmed; it returns the number of distinct orders.
func (e *env) publish(n int, dupEvery int) (int, error) {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	if err := ch.Confirm(false); err != nil {
		return 0, err
	}
	for i := range n {
		o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}}
		payload, _ := json.Marshal(o)
		body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced, OccurredAt: time.Now().UTC(), Payload: payload})
		if err != nil {
			return i, err
		}
		copies := 1
		if dupEvery > 0 && i%dupEvery == 0 {
			copies = 2
		}
		for range copies {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.exchange, shop.EventOrderPlaced, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			if err != nil {
				return i, err
			}
			if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
				return i, fmt.Errorf("publish %d not confirmed: %w", i, err)
			}
		}
	}
	return n, nil
}

// queueState is queue's ready messages and consumers, as the broker
// counts them.
func queueState(t *testing.T, queue string) (ready, consumers int) {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages, q.Consumers
}

func count(t *testing.T, dsn, q string) int {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), q).Scan(&n))
	return n
}

// failedRow is a row of a service database's failure store
// (platform.failed_event), as the tests read it.
type failedRow struct {
	Pool, FailureKey, EventName, RoutingKey string
	EventID                                 *uuid.UUID
	Headers                                 map[string]any
	Body                                    []byte
	Reason, Error, Handler, State           string
	Attempt, Copies                         int
}

// failedRows reads every row of pool's failures in the service database
// dsn, oldest first.
func failedRows(t *testing.T, dsn, pool string) []failedRow {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(context.Background(), `SELECT pool, failure_key, event_name, routing_key, event_id, headers, body,
		reason, error, handler, state, attempt, copies FROM platform.failed_event WHERE pool = $1 ORDER BY id`, pool)
	require.NoError(t, err)
	defer rows.Close()
	var out []failedRow
	for rows.Next() {
		var f failedRow
		require.NoError(t, rows.Scan(&f.Pool, &f.FailureKey, &f.EventName, &f.RoutingKey, &f.EventID, &f.Headers, &f.Body,
			&f.Reason, &f.Error, &f.Handler, &f.State, &f.Attempt, &f.Copies))
		out = append(out, f)
	}
	require.NoError(t, rows.Err())
	return out
}

// A configuration with mistakes: the daemon refuses to start, names each
// key, and exits 2 without touching the broker.
func TestConfigMistakesRefuseToStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := `log: {level: loud}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: never_declared_` + uuid.NewString()[:8] + `}
services:
  - name: stock
    database: postgres://postgres@127.0.0.1:5432/stock
    horizon: 1h
    min_horizon: 24h
    pools:
      - name: p1
        queue: q1
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve, nope.handler]
        concurrency: 0
        batchsize: 3
        retry: {delays: [1s, "3 days"]}
      - name: p1
        queue: q2
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
`
	path := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
	for _, args := range [][]string{{binary, "run"}, {binary, "check"}, {shopBinary, "run"}, {shopBinary, "check"}} {
		out, err := exec.Command(args[0], args[1], "-config", path).CombinedOutput()
		var exitErr *exec.ExitError
		require.ErrorAs(t, err, &exitErr)
		require.Equal(t, 2, exitErr.ExitCode(), string(out))
		for _, key := range []string{"log.level", "services[0].pools[0].handlers[1]", "services[0].pools[0].concurrency",
			"services[0].pools[0].batchsize", "services[0].pools[0].retry.delays[1]", "services[0].pools[1].name", "services[0].horizon"} {
			require.Contains(t, string(out), key, "output must name %s:\n%s", key, out)
		}
	}
}

// SIGTERM under load: the daemon finishes and acks its in-flight batches
// and exits 0; after a restart everything is applied exactly once.
func TestSIGTERMUnderLoadThenRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(t, "")
	d := e.start(t, cfg)
	n := 2000
	if testing.Short() {
		n = 500
	}
	done := make(chan int)
	go func() {
		sent, err := e.publish(n, 10)
		if err != nil {
			t.Errorf("publish: %v", err)
		}
		done <- sent
	}()
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) > 100 }, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, d.terminate(t), "exit 0 after SIGTERM; logs:\n%s", d.stderr)
	require.Contains(t, d.stderr.String(), "daemon: stopped")
	sent := <-done
	d2 := e.start(t, cfg)
	defer func() {
		if t.Failed() {
			out, _ := exec.Command("rabbitmqctl", "list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers").CombinedOutput()
			t.Logf("queues:\n%s", out)
			_ = d2.cmd.Process.Signal(syscall.SIGQUIT)
			select { // the goroutine dump is complete once the process has exited on it
			case err := <-d2.done:
				d2.done <- err
			case <-time.After(10 * time.Second):
			}
			t.Logf("first daemon:\n%s", d.stderr)
			t.Logf("daemon goroutines:\n%s", d2.stderr)
		}
	}()
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent }, 90*time.Second, 50*time.Millisecond,
		"sent %d, reservations %d, processed_event %d; logs:\n%s", sent, count(t, e.stockDSN, `SELECT count(*) FROM reservation`),
		count(t, e.stockDSN, `SELECT count(*) FROM processed_event`), d2.stderr)
	// Nothing more can be applied once the queue holds nothing, ready or
	// unacked: then the counts are final, and a duplicate applied late
	// would show in them.
	stockQ := "e2e.stock." + e.suffix
	require.Eventually(t, func() bool { return queueMessages(t, stockQ) == 0 }, 30*time.Second, 50*time.Millisecond,
		"%s drained and settled", stockQ)
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM reservation`))
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`))

	// The metrics of the contract, with their labels.
	resp, err := http.Get("http://" + e.metrics + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, want := range []string{
		`platformd_messages_total{outcome="processed",pool="stock-events-` + e.suffix + `",service="stock"}`,
		`platformd_duplicates_total{pool="stock-events-` + e.suffix + `",service="stock",source="republish"}`,
		`platformd_batch_duration_seconds_bucket{pool="stock-events-` + e.suffix + `",service="stock"`,
		`platformd_handler_duration_seconds_bucket{`,
		`platformd_pool_paused{pool="stock-events-` + e.suffix + `",service="stock"} 0`,
		`platformd_processed_event_rows_estimate{service="stock"}`,
	} {
		require.Contains(t, string(body), want)
	}
}

func adminClient(t *testing.T, addr, token string) (adminv1.AdminServiceClient, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	return adminv1.NewAdminServiceClient(conn), ctx
}

// The admin API against the real daemon: pause through daemon A stops the
// pool on daemon B sharing the database; a lower horizon is refused, then
// forced with audit and used by the next purge; failed messages are listed
// without being removed and retried into exactly-once processing.
func TestAdminAcrossDaemons(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfgA := e.config(t, "")
	a := e.start(t, cfgA)
	addrA := e.adminAddr
	cfgB := filepath.Join(e.dir, "b.yaml")
	raw, err := os.ReadFile(cfgA)
	require.NoError(t, err)
	addrB, metricsB := freePort(t), freePort(t)
	bcfg := strings.Replace(strings.Replace(string(raw), addrA, addrB, 1), e.metrics, metricsB, 1)
	require.NoError(t, os.WriteFile(cfgB, []byte(bcfg), 0o600))
	e.adminAddr = addrB
	e.start(t, cfgB)
	cliA, ctx := adminClient(t, addrA, adminToken)
	cliB, _ := adminClient(t, addrB, adminToken)
	pool := "stock-events-" + e.suffix

	// Pause through A: B's pool pauses too.
	_, err = cliA.PausePool(ctx, &adminv1.PausePoolRequest{Pool: pool, Reason: "e2e"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := cliB.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
		return err == nil && r.GetPools()[0].GetState() == adminv1.PoolState_POOL_STATE_PAUSED
	}, 10*time.Second, 50*time.Millisecond)
	// Paused workers cancel their consumers: once the queue has none, the
	// broker can deliver nothing, and every order published stays ready.
	queue := "e2e.stock." + e.suffix
	require.Eventually(t, func() bool {
		_, consumers := queueState(t, queue)
		return consumers == 0
	}, 10*time.Second, 20*time.Millisecond, "the paused pools still consume")
	sent := e.publishOrders(t, 50, 0)
	ready, consumers := queueState(t, queue)
	require.Equal(t, sent, ready, "nothing delivered while paused")
	require.Zero(t, consumers)
	require.Zero(t, count(t, e.stockDSN, `SELECT count(*) FROM reservation`), "nothing consumed while paused")
	_, err = cliB.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: pool})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent }, 30*time.Second, 50*time.Millisecond)

	// Horizon: below the floor refused, then forced and audited.
	_, err = cliA.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(time.Hour)})
	require.Equal(t, codes.FailedPrecondition, status.Code(err))
	h, err := cliA.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(time.Hour), Force: true})
	require.NoError(t, err)
	require.Equal(t, "ops", h.GetHorizon().GetUpdatedBy())
	require.Equal(t, 1, count(t, e.stockDSN, `SELECT count(*) FROM platform.horizon_audit WHERE forced AND changed_by = 'ops'`))
	// The next purge uses it: rows 2h old go, the fresh ones stay.
	db, err := pgxpool.New(context.Background(), e.stockDSN)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(context.Background(), `INSERT INTO processed_event SELECT gen_random_uuid(), now() - interval '2 hours' FROM generate_series(1, 30)`)
	require.NoError(t, err)
	// While another holder has the purge lease (as a daemon killed mid-purge
	// leaves it until it expires), RunPurge is refused, naming the holder.
	other, err := lease.New(lease.Config{Name: scheduler.PurgeLockName("stock"), Holder: "gone:1:dead", TTL: time.Minute, DB: db})
	require.NoError(t, err)
	took, err := other.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, took)
	_, err = cliA.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: "stock"})
	require.Equal(t, codes.Unavailable, status.Code(err))
	require.Contains(t, status.Convert(err).Message(), "a purge of stock is already running (held by gone:1:dead; free in ")
	require.NoError(t, other.Release(ctx))
	run, err := cliB.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: "stock"})
	require.NoError(t, err)
	require.EqualValues(t, 30, run.GetRun().GetDeleted())
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`))
	runs, err := cliA.ListPurgeRuns(ctx, &adminv1.ListPurgeRunsRequest{Service: "stock"})
	require.NoError(t, err)
	require.NotEmpty(t, runs.GetRuns())

	// Failed messages: a permanent payload error lands in the failure
	// queue; listing leaves it there; retry brings it back (and it fails
	// again, permanently, since the cause is not fixed).
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	badID := uuid.Must(uuid.NewV7())
	body, err := envelope.Encode(envelope.Envelope{EventID: badID, EventName: shop.EventOrderPlaced, OccurredAt: time.Now().UTC(),
		Payload: json.RawMessage(`{"order_id": 5}`)})
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, e.exchange, shop.EventOrderPlaced, false, false, amqp.Publishing{Body: body}))
	var listed *adminv1.ListFailedMessagesResponse
	require.Eventually(t, func() bool {
		listed, err = cliA.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: pool})
		return err == nil && len(listed.GetMessages()) == 1
	}, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, badID.String(), listed.GetMessages()[0].GetEventId())
	require.Equal(t, "permanent", listed.GetMessages()[0].GetFailureReason())
	again, err := cliA.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: pool})
	require.NoError(t, err)
	require.Len(t, again.GetMessages(), 1, "listing leaves messages in place")
	retried, err := cliA.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: pool, EventIds: []string{badID.String()}})
	require.NoError(t, err)
	require.EqualValues(t, 1, retried.GetRetried())
	require.Eventually(t, func() bool {
		l, err := cliA.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: pool})
		return err == nil && len(l.GetMessages()) == 1
	}, 20*time.Second, 100*time.Millisecond, "the retried copy fails again and comes back")

	// Unknown pool.
	_, err = cliA.PausePool(ctx, &adminv1.PausePoolRequest{Pool: "nope"})
	require.Equal(t, codes.NotFound, status.Code(err))

	// grpcurl through server reflection, as outside tooling does.
	out, err := exec.Command(grpcurlBinary, "-plaintext", "-H", "authorization: Bearer "+adminToken, addrA, "list").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "platform.admin.v1.AdminService")
	out, err = exec.Command(grpcurlBinary, "-plaintext", "-H", "authorization: Bearer "+adminToken, "-d", `{"service":"stock"}`,
		addrA, "platform.admin.v1.AdminService/GetHorizon").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), `"updatedBy": "ops"`)

	// platformctl against the real daemon, both output formats, and the
	// exit codes scripts rely on.
	ctl := func(args ...string) (string, int) {
		cmd := exec.Command(ctlBinary, append([]string{"--addr", addrA}, args...)...)
		cmd.Env = append(os.Environ(), "PLATFORMD_TOKEN="+adminToken)
		out, err := cmd.CombinedOutput()
		code := 0
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			code = exitErr.ExitCode()
		}
		return string(out), code
	}
	out2, code := ctl("pools", "--service", "stock")
	require.Zero(t, code, out2)
	require.Contains(t, out2, pool)
	require.Contains(t, out2, "running")
	out2, code = ctl("-o", "json", "lookup", badID.String(), "--service", "stock")
	require.Zero(t, code, out2)
	var lookup struct {
		Results []struct {
			Service   string `json:"service"`
			Processed bool   `json:"processed"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out2), &lookup), out2)
	require.Equal(t, "stock", lookup.Results[0].Service)
	require.False(t, lookup.Results[0].Processed)
	out2, code = ctl("pool", "pause", "nope")
	require.Equal(t, 3, code, out2)
	require.Contains(t, out2, "NotFound")
	out2, code = ctl("lookup", "{"+badID.String()+"}")
	require.Equal(t, 4, code, out2)
	_ = a
}

// The binary as built has no way to run handlers without the dedup insert:
// the no-dedup build's code (tag platformd_nodedup, which only the bench
// builds) is not in it. Each mark is first found in a no-dedup build, so
// that the check can fail.
func TestShippedBinaryCannotSkipTheDedupInsert(t *testing.T) {
	t.Parallel()
	nodedup := filepath.Join(t.TempDir(), "platformd-nodedup")
	build := exec.Command("go", "build", "-tags", "platformd_nodedup", "-o", nodedup, ".")
	build.Env = staticBuild()
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	const warning = "the dedup insert is OFF"
	for bin, nd := range map[string]bool{binary: false, nodedup: true} {
		data, err := os.ReadFile(bin)
		require.NoError(t, err)
		require.Equal(t, nd, strings.Contains(string(data), warning), "%s: the no-dedup build's warning", bin)
		out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, nd, strings.Contains(string(out), "platformd_nodedup"), "%s: the build tag", bin)
	}
}

// The binary as built never kills itself between an outbox confirm and its
// delete: that hook is in test builds only (tag platformd_testhooks).
func TestShippedBinaryHasNoKillHook(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NotContains(t, string(data), "SIGKILLs itself between an outbox confirm")
	out, err := exec.Command("go", "version", "-m", binary).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "platformd_testhooks")
}
