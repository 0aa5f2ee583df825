package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/testdb"
)

// billingService is a third service, SQL handlers only, as a team adds one
// to a running daemon: its own database, migrations and queue.
func (e *env) billingService(t *testing.T, dsn string) string {
	t.Helper()
	dir := filepath.Join(e.dir, "billing-migrations")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "001_invoice.sql"), []byte(`-- +goose Up
CREATE TABLE invoice (order_id uuid PRIMARY KEY, customer_id uuid NOT NULL, opened_at timestamptz NOT NULL);
-- +goose Down
DROP TABLE invoice;
`), 0o600))
	return fmt.Sprintf(`  - name: billing
    database: %q
    migrations: %s
    sql_handlers:
      - name: billing.open_invoice
        events: [order.order.placed.v1]
        sql:
          - |
            INSERT INTO invoice (order_id, customer_id, opened_at)
            VALUES ((@payload->>'order_id')::uuid, (@payload->>'customer_id')::uuid, @occurred_at)
    pools:
      - name: billing-events-%s
        queue: e2e.billing.%s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice]
        retry: {delays: [1s]}
`, dsn, dir, e.suffix, e.suffix)
}

// rewrite writes the config file again with extra after the two services.
func (e *env) rewrite(t *testing.T, path, extra string) {
	t.Helper()
	admin, metrics := e.adminAddr, e.metrics
	_ = e.config(t, extra) // same file name; keep the running daemon's addresses
	e.adminAddr, e.metrics = admin, metrics
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	// e.config picked new free ports: put the running ones back.
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "  listen: "):
			lines[i] = "  listen: " + admin
		case strings.HasPrefix(l, "metrics: "):
			lines[i] = "metrics: {listen: " + metrics + "}"
		}
	}
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600))
}

// consumerTags returns the consumer tags of the daemon's queues: a pool
// that reconnected or restarted consumes under new tags.
func (e *env) consumerTags(t *testing.T, queues ...string) []string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_consumers", "--quiet", "--no-table-headers", "queue_name", "consumer_tag").CombinedOutput()
	require.NoError(t, err, string(out))
	var tags []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && slices.Contains(queues, f[0]) {
			tags = append(tags, f[0]+" "+f[1])
		}
	}
	slices.Sort(tags)
	return tags
}

// progress records the times at which a pool's processed counter moved, to
// find the longest gap in its progress.
type progress struct {
	mu        sync.Mutex
	moves     []time.Time
	processed uint64 // the counter's last value seen
}

// seen returns the pool's processed counter as last seen.
func (p *progress) seen() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.processed
}

// waitFor waits, a bounded poll of what the admin API reported, until the
// pool has processed n more events than now: a measuring window defined by
// work done, not by a fixed sleep.
func (p *progress) waitFor(t *testing.T, n uint64, what string) {
	t.Helper()
	target := p.seen() + n
	require.Eventually(t, func() bool { return p.seen() >= target }, 60*time.Second, 10*time.Millisecond,
		"%s: %d processed, waited for %d", what, p.seen(), target)
}

// watchProgress polls pool's processed counter until ctx ends (ctx
// carries the token).
func watchProgress(ctx context.Context, cli adminv1.AdminServiceClient, pool string) *progress {
	p := &progress{}
	go func() {
		var last uint64
		for ctx.Err() == nil {
			r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{})
			if err == nil {
				for _, pl := range r.GetPools() {
					if pl.GetName() == pool && pl.GetProcessed() > last {
						last = pl.GetProcessed()
						p.mu.Lock()
						p.moves = append(p.moves, time.Now())
						p.processed = last
						p.mu.Unlock()
					}
				}
			}
			time.Sleep(10 * time.Millisecond) //nolint:forbidigo // the sampling period of the measurement, not a wait
		}
	}()
	return p
}

// longestGap is the longest time without progress between from and to.
func (p *progress) longestGap(from, to time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	prev := from
	for _, m := range p.moves {
		if m.Before(from) || m.After(to) {
			continue
		}
		gap = max(gap, m.Sub(prev))
		prev = m
	}
	return max(gap, to.Sub(prev))
}

// publishLoad publishes orders until ctx ends, a few hundred a second, and
// returns how many once it has stopped.
func (e *env) publishLoad(ctx context.Context, t *testing.T) <-chan int {
	sent := make(chan int, 1)
	go func() {
		n := 0
		for ctx.Err() == nil {
			k, err := e.publish(20, 0) //nolint:contextcheck // each publish is confirmed whatever ctx says; ctx only ends the loop
			n += k
			if err != nil {
				t.Errorf("publish: %v", err)
				break
			}
			time.Sleep(20 * time.Millisecond) //nolint:forbidigo // the load's pace: the scenario, not a wait
		}
		sent <- n
	}()
	return sent
}

// Under load on two services, a third service with a SQL handler is added
// by editing the file and sending SIGHUP: its pool consumes within seconds,
// while the two running services are not touched (same consumers, no
// redelivery, their progress never stalls long); removed again, its pool
// drains and nothing it was sent is lost.
func TestReloadAddsAndRemovesAServiceUnderLoad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := e.config(t, "")
	d := e.start(t, path)
	cli, actx := adminClient(t, e.adminAddr, adminToken)
	stockQ, shipQ, billQ := "e2e.stock."+e.suffix, "e2e.shipping."+e.suffix, "e2e.billing."+e.suffix
	tagsBefore := e.consumerTags(t, stockQ, shipQ)
	require.NotEmpty(t, tagsBefore)

	ctx, stopLoad := context.WithCancel(actx) // actx carries the admin token
	defer stopLoad()
	prog := watchProgress(ctx, cli, "stock-events-"+e.suffix)
	load := e.publishLoad(ctx, t)
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) > 100 }, 30*time.Second, 20*time.Millisecond)
	// The same load without a reload, for comparison, over as much work
	// as a few seconds of it (a loaded machine stretches the window rather
	// than shrinking the sample).
	quietFrom := time.Now()
	prog.waitFor(t, 600, "the load's baseline")
	baseline := prog.longestGap(quietFrom, time.Now())

	// Add billing.
	billDSN := testdb.New(t, "e2e_bill")
	e.rewrite(t, path, e.billingService(t, billDSN))
	reloadAt := time.Now()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	var firstInvoice time.Duration
	require.Eventually(t, func() bool {
		db, err := pgx.Connect(context.Background(), billDSN)
		if err != nil {
			return false
		}
		defer db.Close(context.Background())
		var n int
		if db.QueryRow(context.Background(), `SELECT count(*) FROM invoice`).Scan(&n) != nil || n == 0 {
			return false
		}
		firstInvoice = time.Since(reloadAt)
		return true
	}, 30*time.Second, 20*time.Millisecond, "billing consumes after the reload: %s", d.stderr)
	settled := time.Now()
	prog.waitFor(t, 200, "stock's progress after the reload") // measure a moment after the reload too
	gap := prog.longestGap(reloadAt, time.Now())
	t.Logf("billing's first invoice %.2fs after SIGHUP; stock's longest gap in progress from SIGHUP to %.1fs after: %s (%s over %.1fs of the same load without a reload)",
		firstInvoice.Seconds(), time.Since(settled).Seconds(), gap, baseline, reloadAt.Sub(quietFrom).Seconds())
	require.Less(t, gap, max(2*baseline, time.Second), "stock kept going through the reload as without it")
	require.Equal(t, tagsBefore, e.consumerTags(t, stockQ, shipQ), "the running pools kept their consumers: not touched")

	// Quiet the load, let billing catch up, then remove it with a burst of
	// orders on its queue: what it was given drains, the rest waits in its
	// queue, nothing is lost.
	stopLoad()
	sent := <-load
	invoices := func() int { return count(t, billDSN, `SELECT count(*) FROM invoice`) }
	require.Eventually(t, func() bool {
		return queueDepth(t, billQ) == 0 && invoices() == count(t, billDSN, `SELECT count(*) FROM processed_event`)
	},
		30*time.Second, 50*time.Millisecond)
	before := invoices()
	const burst = 300
	sent += e.publishOrders(t, burst, 0)
	e.rewrite(t, path, "")
	r, err := cli.ReloadConfig(actx, &adminv1.ReloadConfigRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"billing"}, r.GetServicesRemoved())
	require.ElementsMatch(t, []string{"stock-events-" + e.suffix, "shipping-events-" + e.suffix}, r.GetPoolsUnchanged())
	require.Empty(t, e.consumerTags(t, billQ), "billing's pool stopped consuming")
	require.Equal(t, tagsBefore, e.consumerTags(t, stockQ, shipQ))
	drained, waiting := invoices()-before, queueDepth(t, billQ)
	t.Logf("burst of %d on billing's queue: %d applied before it stopped, %d waiting in its queue", burst, drained, waiting)
	require.Equal(t, burst, drained+waiting, "removed: what billing held drained, the rest waits; none lost")
	require.Equal(t, before+drained, count(t, billDSN, `SELECT count(*) FROM processed_event`))

	// Every order reached stock once.
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent }, 60*time.Second, 50*time.Millisecond)
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`))
	require.Zero(t, metric(t, e.metrics, `platformd_duplicates_total{pool="stock-events-`+e.suffix+`",service="stock",source="redelivery"}`),
		"no redelivery: the running pools were not restarted")
	require.InDelta(t, 2, metric(t, e.metrics, `platformd_config_reloads_total{result="applied"}`), 0)
	require.Contains(t, d.stderr.String(), "daemon: config reloaded")
	audit := count(t, e.stockDSN, `SELECT count(*) FROM platform.audit_log WHERE action = 'config.reload'`)
	require.Equal(t, 2, audit, "each reload audited in stock's database")
}

// queueDepth returns the ready messages of queue.
func queueDepth(t *testing.T, queue string) int {
	t.Helper()
	return queueColumn(t, queue, "messages_ready")
}

// queueMessages returns the messages of queue, ready and unacked.
func queueMessages(t *testing.T, queue string) int {
	t.Helper()
	return queueColumn(t, queue, "messages")
}

// queueColumn returns one numeric column of rabbitmqctl list_queues for
// queue (0 when the queue is not listed).
func queueColumn(t *testing.T, queue, column string) int {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_queues", "--quiet", "--no-table-headers", "name", column).CombinedOutput()
	require.NoError(t, err, string(out))
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == queue {
			var n int
			_, _ = fmt.Sscan(f[1], &n)
			return n
		}
	}
	return 0
}

// An invalid edit changes nothing: ReloadConfig answers INVALID_ARGUMENT
// with every problem at its key path (also as field violations), a SQL
// statement that does not prepare is refused the same way, SIGHUP logs it,
// a change that needs a restart is FAILED_PRECONDITION, and the running
// pools never stop.
func TestReloadRefusesInvalidEdits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := e.config(t, "")
	d := e.start(t, path)
	cli, actx := adminClient(t, e.adminAddr, adminToken)
	stockQ, shipQ := "e2e.stock."+e.suffix, "e2e.shipping."+e.suffix
	tags := e.consumerTags(t, stockQ, shipQ)
	good, err := os.ReadFile(path)
	require.NoError(t, err)

	// Mistakes the validation finds.
	bad := strings.Replace(string(good), "concurrency: 2", "concurrency: 0\n        colour: blue", 1) +
		e.billingService(t, testdb.New(t, "e2e_bill_bad"))
	bad = strings.Replace(bad, "@occurred_at)", "@opened_at)", 1) // not a parameter
	require.NoError(t, os.WriteFile(path, []byte(bad), 0o600))
	_, err = cli.ReloadConfig(actx, &adminv1.ReloadConfigRequest{})
	st := status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	for _, want := range []string{
		"services[0].pools[0].colour: unknown key",
		"services[0].pools[0].concurrency: must be between 1 and 256",
		"services[2].sql_handlers[0].sql[0]",
	} {
		require.Contains(t, st.Message(), want)
	}
	var fields []string
	for _, det := range st.Details() {
		if br, ok := det.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	require.Contains(t, fields, "services[0].pools[0].colour")

	// A statement that validates but does not prepare (a column that does
	// not exist): refused with its key path, nothing started.
	noPrepare := string(good) + e.billingService(t, testdb.New(t, "e2e_bill_prep"))
	noPrepare = strings.Replace(noPrepare, "INSERT INTO invoice (order_id, customer_id, opened_at)", "INSERT INTO invoice (order_id, customer, opened_at)", 1)
	require.NoError(t, os.WriteFile(path, []byte(noPrepare), 0o600))
	_, err = cli.ReloadConfig(actx, &adminv1.ReloadConfigRequest{})
	st = status.Convert(err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
	require.Contains(t, st.Message(), "services[2].sql_handlers[0].sql[0]: does not prepare: 42703")

	// SIGHUP with the same file: logged, nothing changes. The RPC refusals
	// above logged the same message, so wait for the signal's own count
	// before the file changes again.
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return metric(t, e.metrics, `platformd_config_reloads_total{result="invalid"}`) == 3
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, d.stderr.String(), `"msg":"daemon: config reload refused; nothing changed","actor":"signal:SIGHUP"`)

	// A change that needs a restart.
	moved := strings.Replace(string(good), "  listen: "+e.adminAddr, "  listen: 127.0.0.1:1", 1)
	require.NoError(t, os.WriteFile(path, []byte(moved), 0o600))
	_, err = cli.ReloadConfig(actx, &adminv1.ReloadConfigRequest{})
	st = status.Convert(err)
	require.Equal(t, codes.FailedPrecondition, st.Code(), "%v", err)
	require.Contains(t, st.Message(), "admin.listen cannot change while the daemon runs")

	r, err := cli.ListPools(actx, &adminv1.ListPoolsRequest{})
	require.NoError(t, err)
	require.Len(t, r.GetPools(), 2, "no pool added")
	require.Equal(t, tags, e.consumerTags(t, stockQ, shipQ), "the running pools never stopped")
	sent := e.publishOrders(t, 50, 0)
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent }, 30*time.Second, 20*time.Millisecond)
	require.InDelta(t, 3, metric(t, e.metrics, `platformd_config_reloads_total{result="invalid"}`), 0)
	require.InDelta(t, 1, metric(t, e.metrics, `platformd_config_reloads_total{result="refused"}`), 0)
}

// setConnections allows or forbids new connections to the database of
// dsn, terminating its sessions when forbidding: what an unreachable
// database looks like to platformd.
func setConnections(t *testing.T, dsn string, allow bool) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{cfg.Database}.Sanitize()+` ALLOW_CONNECTIONS `+fmt.Sprint(allow))
	require.NoError(t, err)
	if !allow {
		_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, cfg.Database)
		require.NoError(t, err)
	}
}

// health asks the daemon's grpc.health.v1 for service.
func health(t *testing.T, addr, service string) grpc_health_v1.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	r, err := grpc_health_v1.NewHealthClient(conn).Check(context.Background(), &grpc_health_v1.HealthCheckRequest{Service: service})
	if err != nil {
		return grpc_health_v1.HealthCheckResponse_UNKNOWN
	}
	return r.GetStatus()
}

// A service whose database is unreachable at start does not stop the
// daemon or the other service: it starts, that service's pools report
// connecting with the error and its health NOT_SERVING while the other
// consumes; it comes up by itself when connections are allowed again.
// Then the other service's database goes away while both run: the first
// keeps consuming, the second stalls and recovers. Exactly once throughout.
func TestServiceDatabaseAwayDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	path := e.config(t, "")
	// Migrate both first (a fresh database), then forbid stock's.
	out, code := exitCodeOf(t, e.bin, "migrate", "-config", path)
	require.Zero(t, code, out)
	setConnections(t, e.stockDSN, false)
	t.Cleanup(func() { setConnections(t, e.stockDSN, true) })

	d := &daemon{cmd: exec.Command(e.bin, "run", "-config", path), stderr: &lockedWriter{buf: &bytes.Buffer{}}, done: make(chan error, 1)}
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		if err := <-d.done; err != nil {
			t.Logf("daemon: %v", err)
		}
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", e.adminAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 60*time.Second, 50*time.Millisecond, "the daemon starts: %s", d.stderr)
	cli, actx := adminClient(t, e.adminAddr, adminToken)
	stockPool, shipPool := "stock-events-"+e.suffix, "shipping-events-"+e.suffix
	pool := func(name string) *adminv1.Pool {
		r, err := cli.ListPools(actx, &adminv1.ListPoolsRequest{})
		require.NoError(t, err)
		for _, p := range r.GetPools() {
			if p.GetName() == name {
				return p
			}
		}
		return nil
	}
	require.Eventually(t, func() bool {
		p := pool(stockPool)
		return p.GetState() == adminv1.PoolState_POOL_STATE_CONNECTING && strings.Contains(p.GetError(), "not currently accepting connections")
	}, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return pool(shipPool).GetState() == adminv1.PoolState_POOL_STATE_RUNNING }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, health(t, e.adminAddr, ""))
	require.Eventually(t, func() bool {
		return health(t, e.adminAddr, "platform.service.shipping") == grpc_health_v1.HealthCheckResponse_SERVING &&
			health(t, e.adminAddr, "platform.service.stock") == grpc_health_v1.HealthCheckResponse_NOT_SERVING
	}, 30*time.Second, 50*time.Millisecond)
	svcs, err := cli.ListServices(actx, &adminv1.ListServicesRequest{})
	require.NoError(t, err, "one service away does not fail the listing")
	require.Len(t, svcs.GetServices(), 2)

	pub := newPublisher(t, e.exchange)
	statuses := 0
	publishStatuses := func(n int) {
		for range n {
			pub.publish(uuid.Must(uuid.NewV7()), "order.order.status_changed.v1", map[string]any{"order_id": uuid.New(), "status": "placed", "version": 1}, nil)
			statuses++
		}
	}
	publishStatuses(50)
	sent := e.publishOrders(t, 100, 10)
	require.Eventually(t, func() bool { return count(t, e.shipDSN, `SELECT count(*) FROM order_status`) == statuses }, 30*time.Second, 20*time.Millisecond,
		"shipping consumes while stock's database is away")

	setConnections(t, e.stockDSN, true)
	require.Eventually(t, func() bool {
		return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent && pool(stockPool).GetState() == adminv1.PoolState_POOL_STATE_RUNNING
	}, 60*time.Second, 50*time.Millisecond, "stock comes up by itself and applies what waited: %s", d.stderr)
	require.Eventually(t, func() bool {
		return health(t, e.adminAddr, "platform.service.stock") == grpc_health_v1.HealthCheckResponse_SERVING
	}, 30*time.Second, 50*time.Millisecond)

	// Now shipping's database goes away while both run.
	setConnections(t, e.shipDSN, false)
	t.Cleanup(func() { setConnections(t, e.shipDSN, true) })
	publishStatuses(50)
	var more atomic.Int64
	more.Store(int64(e.publishOrders(t, 200, 10)))
	require.Eventually(t, func() bool { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) == sent+int(more.Load()) }, 30*time.Second, 20*time.Millisecond,
		"stock keeps consuming while shipping's database is away")
	require.Eventually(t, func() bool {
		p := pool(shipPool)
		return p.GetState() == adminv1.PoolState_POOL_STATE_CONNECTING && p.GetError() != ""
	}, 30*time.Second, 50*time.Millisecond)
	setConnections(t, e.shipDSN, true)
	require.Eventually(t, func() bool { return count(t, e.shipDSN, `SELECT count(*) FROM order_status`) == statuses }, 60*time.Second, 50*time.Millisecond,
		"shipping recovers by itself: %s", d.stderr)
	require.NoError(t, d.terminate(t))
	total := sent + int(more.Load())
	require.Equal(t, total, count(t, e.stockDSN, `SELECT count(*) FROM reservation`), "exactly once")
	require.Equal(t, total, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`))
	require.Equal(t, statuses, count(t, e.shipDSN, `SELECT count(*) FROM processed_event`))
}
