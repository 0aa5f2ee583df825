package main_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/health/grpc_health_v1"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// stockHandler is the shop's stock effect as a remote handler: a Go HTTP
// server of the test's, answering one reservation per order line. It
// logs every event it is asked about, and can be taken down and brought
// back on the same address.
type stockHandler struct {
	t    *testing.T
	addr string

	mu    sync.Mutex
	srv   *http.Server
	asked map[string][]int // event id -> the attempts it was asked about
	// poison answers a permanent error; flaky an error on attempt 0.
	poison, flaky string
}

func newStockHandler(t *testing.T) *stockHandler {
	t.Helper()
	h := &stockHandler{t: t, addr: freePort(t), asked: map[string][]int{}}
	h.up()
	t.Cleanup(h.down)
	return h
}

func (h *stockHandler) up() {
	h.t.Helper()
	var l net.Listener
	require.Eventually(h.t, func() bool {
		var err error
		l, err = net.Listen("tcp", h.addr)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	srv := &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 5 * time.Second}
	h.mu.Lock()
	h.srv = srv
	h.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
}

// down stops the handler: connections are refused until up.
func (h *stockHandler) down() {
	h.mu.Lock()
	srv := h.srv
	h.srv = nil
	h.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

func (h *stockHandler) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Events []struct {
			EventID string          `json:"event_id"`
			Payload json.RawMessage `json:"payload"`
			Attempt int             `json:"attempt"`
		} `json:"events"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	type effect struct {
		Statement string         `json:"statement"`
		Args      map[string]any `json:"args"`
	}
	type result struct {
		EventID   string   `json:"event_id"`
		Effects   []effect `json:"effects,omitempty"`
		Error     string   `json:"error,omitempty"`
		Permanent bool     `json:"permanent,omitempty"`
	}
	var out struct {
		Results []result `json:"results"`
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range req.Events {
		h.asked[ev.EventID] = append(h.asked[ev.EventID], ev.Attempt)
		var o shop.OrderPlaced
		_ = json.Unmarshal(ev.Payload, &o)
		res := result{EventID: ev.EventID}
		switch {
		case ev.EventID == h.poison:
			res.Error, res.Permanent = "quantity must be positive", true
		case ev.EventID == h.flaky && ev.Attempt == 0:
			res.Error = "inventory service busy"
		default:
			for _, l := range o.Lines {
				res.Effects = append(res.Effects, effect{Statement: "reserve", Args: map[string]any{
					"order_id": o.OrderID, "product_id": l.ProductID, "quantity": json.Number(l.Quantity)}})
			}
		}
		out.Results = append(out.Results, res)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (h *stockHandler) askedAbout() map[string][]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]int, len(h.asked))
	for k, v := range h.asked {
		out[k] = append([]int(nil), v...)
	}
	return out
}

// remoteConfig is e.config's shop for the release binary: the stock
// service's effect as a remote handler served at url, shipping's as the
// SQL handler of examples/shop-sql.
func (e *env) remoteConfig(t *testing.T, url, timeout string) string {
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
    remote_handlers:
      - name: stock.reserve_remote
        events: [order.order.placed.v1]
        url: %[9]s
        timeout: %[10]s
        headers: {Authorization: "Bearer ${E2E_HANDLER_TOKEN:-t0ken}"}
        statements:
          reserve: |
            INSERT INTO reservation (id, order_id, product_id, quantity, created_at)
            VALUES (gen_random_uuid(), @order_id::uuid, @product_id::uuid, @quantity::numeric(12,3), now())
    pools:
      - name: stock-events-%[8]s
        queue: e2e.stock.%[8]s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve_remote]
        concurrency: 2
        batch: {size: 50, wait: 2ms}
        retry: {delays: [1s, 2s]}
  - name: shipping
    database: %[11]q
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
`, e.adminAddr, adminToken, e.metrics, testenv.AMQPURL(), e.exchange, e.stockDSN, migrations, e.suffix, url, timeout, e.shipDSN, trackSQL)
	path := filepath.Join(e.dir, "platformd-remote.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// A remote handler end to end through the release binary: a duplicated
// workload applied once, asked once per event; a poison event fails
// alone with its text; a transient error retried and applied once; the
// handler down for a while under load (3 s here, the 30 s
// shortened to keep the suite fast): nothing applied, no attempt counted,
// nothing failed, the pool CONNECTING with the error and the service
// SERVING, then everything applied once when it returns.
func TestRemoteHandlerEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := newStockHandler(t)
	d := e.start(t, e.remoteConfig(t, "http://"+h.addr+"/handle", "2s"))
	cli, ctx := adminClient(t, e.adminAddr, adminToken)
	stockPool := "stock-events-" + e.suffix
	reservations := func() int { return count(t, e.stockDSN, `SELECT count(*) FROM reservation`) }
	serving := func() bool {
		return health(t, e.adminAddr, "platform.service.stock") == grpc_health_v1.HealthCheckResponse_SERVING
	}
	require.Eventually(t, serving, 30*time.Second, 50*time.Millisecond)

	// A duplicated workload: each event asked about once.
	sent := e.publishOrders(t, 200, 4)
	require.Eventually(t, func() bool { return reservations() == sent }, 60*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	asked := h.askedAbout()
	require.Len(t, asked, sent)
	for id, attempts := range asked {
		require.Equal(t, []int{0}, attempts, "event %s asked once", id)
	}
	require.Equal(t, sent, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`))

	// A poison event and a flaky one.
	pub := newPublisher(t, e.exchange)
	poison, flaky := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	h.mu.Lock()
	h.poison, h.flaky = poison.String(), flaky.String()
	h.mu.Unlock()
	order := func() shop.OrderPlaced {
		return shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "2.500"}}}
	}
	pub.publish(poison, shop.EventOrderPlaced, order(), nil)
	pub.publish(flaky, shop.EventOrderPlaced, order(), nil)
	require.Eventually(t, func() bool { return reservations() == sent+1 }, 30*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Equal(t, []int{0, 1}, h.askedAbout()[flaky.String()], "retried once, then applied")
	require.Equal(t, []int{0}, h.askedAbout()[poison.String()], "permanent: asked once")
	var failed []*adminv1.FailedMessage
	require.Eventually(t, func() bool {
		r, err := cli.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: stockPool})
		failed = r.GetMessages()
		return err == nil && len(failed) == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, poison.String(), failed[0].GetEventId())
	require.Equal(t, "permanent", failed[0].GetFailureReason())
	require.Equal(t, "stock.reserve_remote: quantity must be positive", failed[0].GetError())
	require.Equal(t, 1, count(t, e.stockDSN, `SELECT count(*) FROM reservation WHERE quantity::text = '2.500'`), "the flaky event's line, its quantity as written")
	pools, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
	require.NoError(t, err)
	retriedBefore := pools.GetPools()[0].GetRetried()
	require.EqualValues(t, 1, retriedBefore)

	// The handler down under load.
	h.down()
	before := reservations()
	more := make(chan int, 1)
	go func() {
		n, err := e.publish(300, 5)
		if err != nil {
			n = -1
		}
		more <- n
	}()
	var pool *adminv1.Pool
	require.Eventually(t, func() bool {
		r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
		if err != nil {
			return false
		}
		pool = r.GetPools()[0]
		return pool.GetState() == adminv1.PoolState_POOL_STATE_CONNECTING
	}, 30*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Contains(t, pool.GetError(), "remote handler stock.reserve_remote unavailable")
	require.Zero(t, metric(t, e.metrics, `platformd_remote_handler_up{handler="stock.reserve_remote",service="stock"}`))
	require.Positive(t, metric(t, e.metrics, `platformd_remote_handler_calls_total{handler="stock.reserve_remote",result="unavailable",service="stock"}`))
	// Down for a while (3 s): nothing applied, nothing retried or failed,
	// the service SERVING (its database is fine).
	require.Never(t, func() bool { return reservations() != before || !serving() }, 3*time.Second, 100*time.Millisecond)
	n := <-more
	require.Positive(t, n)
	r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
	require.NoError(t, err)
	require.Equal(t, retriedBefore, r.GetPools()[0].GetRetried(), "no attempt counted")
	require.EqualValues(t, 1, r.GetPools()[0].GetFailed())

	h.up()
	require.Eventually(t, func() bool { return reservations() == before+n }, 60*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Eventually(t, func() bool {
		r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
		return err == nil && r.GetPools()[0].GetState() == adminv1.PoolState_POOL_STATE_RUNNING
	}, 30*time.Second, 50*time.Millisecond)
	r, err = cli.ListPools(ctx, &adminv1.ListPoolsRequest{Service: "stock"})
	require.NoError(t, err)
	require.Equal(t, retriedBefore, r.GetPools()[0].GetRetried(), "no attempt counted")
	require.EqualValues(t, 1, r.GetPools()[0].GetFailed(), "nothing more failed")
	// The failure store holds the poison event alone: one row, permanent,
	// with the handler's text; the outage stored nothing.
	stored := failedRows(t, e.stockDSN, stockPool)
	require.Len(t, stored, 1)
	require.Equal(t, poison, *stored[0].EventID)
	require.Equal(t, "permanent", stored[0].Reason)
	require.Equal(t, "failed", stored[0].State)
	require.Equal(t, "stock.reserve_remote: quantity must be positive", stored[0].Error)
	require.Equal(t, "stock.reserve_remote", stored[0].Handler)
	require.Equal(t, 1, stored[0].Copies)
	require.InDelta(t, 1, metric(t, e.metrics, `platformd_remote_handler_up{handler="stock.reserve_remote",service="stock"}`), 0)
	require.Equal(t, sent+1+n, count(t, e.stockDSN, `SELECT count(*) FROM processed_event`), "each event once (the poison one not)")
	// Asked at attempt 0 only, however often the requeued batches asked.
	for id, attempts := range h.askedAbout() {
		for _, a := range attempts {
			if id != flaky.String() {
				require.Zero(t, a, "event %s", id)
			}
		}
	}

	// A reload moving the handler to another URL: the next events go
	// there, each applied once.
	moved := newStockHandler(t)
	cfgPath := filepath.Join(e.dir, "platformd-remote.yaml")
	data, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(cfgPath, []byte(strings.Replace(string(data), "http://"+h.addr+"/handle", "http://"+moved.addr+"/handle", 1)), 0o600))
	_, err = cli.ReloadConfig(ctx, &adminv1.ReloadConfigRequest{})
	require.NoError(t, err)
	total := reservations()
	last := e.publishOrders(t, 20, 0)
	require.Eventually(t, func() bool { return reservations() == total+last }, 30*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)
	require.Len(t, moved.askedAbout(), last, "the reloaded config's URL")
}

// The config's mistakes about remote handlers stop check and run with
// their key path; a statement that does not prepare stops migrate with
// the key path and PostgreSQL's message.
func TestRemoteHandlerMistakesRefuseToStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	good := e.remoteConfig(t, "http://127.0.0.1:1/handle", "1s")
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	for _, tt := range []struct {
		name, old, new, want string
		code                 int
		cmd                  string
		bin                  string // the release binary when empty
	}{
		{"NoURL", "        url: http://127.0.0.1:1/handle\n", "", "services[0].remote_handlers[0].url: must not be empty", 2, "check", ""},
		{"BadURL", "url: http://127.0.0.1:1/handle", "url: 127.0.0.1:1/handle", "services[0].remote_handlers[0].url: invalid URL", 2, "check", ""},
		// The shop's daemon has a Go handler of that name; the release
		// binary has none (TestReleaseBinaryHasNoShop).
		{"NameTaken", "name: stock.reserve_remote", "name: stock.reserve", `services[0].remote_handlers[0].name: handler name "stock.reserve" is taken by a Go handler`, 2, "check", shopBinary},
		{"WrongColumn", "product_id, quantity, created_at)", "product_id, quantty, created_at)",
			`services[0].remote_handlers[0].statements.reserve: does not prepare: 42703 column \"quantty\" of relation`, 1, "migrate", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, 1, strings.Count(string(data), tt.old))
			path := filepath.Join(e.dir, tt.name+".yaml")
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(data), tt.old, tt.new, 1)), 0o600))
			out, code := exitCodeOf(t, cmp.Or(tt.bin, binary), tt.cmd, "-config", path)
			require.Equal(t, tt.code, code, out)
			require.Contains(t, out, tt.want)
		})
	}
	out, code := exitCode(t, "check", "-config", good)
	require.Zero(t, code, out)
}
