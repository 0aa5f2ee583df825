package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// The outbox chain of the shop: order (a producer with no pools) writes
// order.order.placed.v1 to its outbox; stock reserves and announces
// stock.stock.reserved.v1 through its own outbox; shipping prepares a
// parcel. {{RELAY}} turns the consumers' relays on or off.
const outboxServices = `  - name: order
    database: "{{ORDER_DSN}}"
    outbox: {relay: true, batch_size: 40, poll: 500ms}
  - name: stock
    database: "{{STOCK_DSN}}"
    horizon: 48h
    min_horizon: 24h
    outbox: {relay: {{RELAY}}, batch_size: 40}
    pools:
      - name: stock-events
        queue: {{STOCK_QUEUE}}
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve, stock.announce_reserved]
        concurrency: 2
        batch: {size: 50, wait: 5ms}
        retry: {delays: [1s, 2s]}
  - name: shipping
    database: "{{SHIP_DSN}}"
    horizon: 48h
    min_horizon: 24h
    outbox: {relay: {{RELAY}}}
    pools:
      - name: shipping-events
        queue: {{SHIP_QUEUE}}
        bindings: [stock.stock.reserved.v1]
        handlers: [shipping.prepare_parcel]
        concurrency: 2
        batch: {size: 50, wait: 5ms}
        retry: {delays: [1s, 2s]}
`

// outboxWorld is one run of the chain: its databases, a tap queue that
// sees every message published to the test's exchange, and what the
// producer wrote.
type outboxWorld struct {
	t       *testing.T
	e       *env
	orderDB string

	mu        sync.Mutex
	tap       map[string]int // event id -> copies seen on the exchange
	orders    []uuid.UUID    // committed
	placed    []string       // committed order.order.placed.v1 ids
	lines     map[uuid.UUID]int
	rolledBck []string // ids of rolled-back rows
}

func newOutboxWorld(t *testing.T, e *env) *outboxWorld {
	w := &outboxWorld{t: t, e: e, orderDB: testdb.Name("chaos_order"), tap: map[string]int{}, lines: map[uuid.UUID]int{}}
	t.Cleanup(func() { testdb.Drop(w.orderDB) })
	// The tap: bound with # before anything is published.
	deliveries, _ := e.tap("tap." + e.id)
	go func() {
		for d := range deliveries {
			w.mu.Lock()
			w.tap[d.MessageId]++
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *outboxWorld) daemon(name string, consumerRelays bool, env []string) *daemon {
	relay := "false"
	if consumerRelays {
		relay = "true"
	}
	pgAddr := pgAddr(w.t)
	svcs := strings.NewReplacer(
		"{{ORDER_DSN}}", w.e.dsn(pgAddr, w.orderDB, ""), "{{STOCK_DSN}}", w.e.dsn(pgAddr, w.e.stockDB, ""),
		"{{SHIP_DSN}}", w.e.dsn(pgAddr, w.e.shipDB, ""), "{{STOCK_QUEUE}}", w.e.stockQ, "{{SHIP_QUEUE}}", w.e.shipQ,
		"{{RELAY}}", relay,
	).Replace(outboxServices)
	return w.e.newDaemon(daemonOpts{name: name, dbAddr: pgAddr, servicesYAML: svcs, env: env})
}

// write commits about n orders, 10 per transaction, as plain INSERTs into
// platform.outbox (ids of the producer's own), and rolls back one more
// transaction every 5.
func (w *outboxWorld) write(ctx context.Context, n int) {
	db := w.e.db(w.orderDB) //nolint:contextcheck // the harness's pool outlives this call
	for i := 0; i < n; i += 10 {
		rollback := (i/10)%5 == 4
		var ids []string
		var orders []uuid.UUID
		lines := map[uuid.UUID]int{}
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			for k := 0; k < 10; k++ {
				o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New()}
				for range 1 + k%3 {
					o.Lines = append(o.Lines, shop.OrderLine{ProductID: uuid.New(), Quantity: "1.500"})
				}
				payload, _ := json.Marshal(o)
				id := uuid.Must(uuid.NewV7())
				if _, err := tx.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload) VALUES ($1, $2, $3)`,
					id, shop.EventOrderPlaced, string(payload)); err != nil {
					return err
				}
				ids, orders = append(ids, id.String()), append(orders, o.OrderID)
				lines[o.OrderID] = len(o.Lines)
			}
			if rollback {
				return errOutboxRollback
			}
			return nil
		})
		w.mu.Lock()
		switch {
		case rollback && errors.Is(err, errOutboxRollback):
			w.rolledBck = append(w.rolledBck, ids...)
		case err != nil:
			w.mu.Unlock()
			w.t.Errorf("write orders: %v", err) // may run on another goroutine: no Fatal
			return
		default:
			w.placed, w.orders = append(w.placed, ids...), append(w.orders, orders...)
			for o, l := range lines {
				w.lines[o] = l
			}
		}
		w.mu.Unlock()
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // the producer's pace: the scenario, not a wait
	}
}

var errOutboxRollback = errors.New("rolled back on purpose")

// complete reports whether every committed order has its parcel and every
// outbox is empty.
func (w *outboxWorld) complete() bool {
	w.mu.Lock()
	orders := append([]uuid.UUID(nil), w.orders...)
	w.mu.Unlock()
	n, err := w.e.count(w.e.shipDB, `SELECT count(DISTINCT order_id) FROM parcel WHERE order_id = ANY($1)`, orders)
	if err != nil || n < len(orders) {
		return false
	}
	for _, db := range []string{w.orderDB, w.e.stockDB, w.e.shipDB} {
		if p, err := w.e.count(db, `SELECT count(*) FROM platform.outbox`); err != nil || p > 0 {
			return false
		}
	}
	return true
}

// checkEffects requires every downstream effect once: one reservation per
// line, one parcel per order, nothing of the rolled-back rows.
func (w *outboxWorld) checkEffects() {
	t := w.t
	w.mu.Lock()
	defer w.mu.Unlock()
	counts := func(db, q string) map[uuid.UUID]int {
		rows, err := w.e.db(db).Query(context.Background(), q, w.orders)
		if err != nil {
			t.Fatal(err)
		}
		out := map[uuid.UUID]int{}
		for rows.Next() {
			var id uuid.UUID
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				t.Fatal(err)
			}
			out[id] = n
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return out
	}
	res := counts(w.e.stockDB, `SELECT order_id, count(*) FROM reservation WHERE order_id = ANY($1) GROUP BY 1`)
	par := counts(w.e.shipDB, `SELECT order_id, count(*) FROM parcel WHERE order_id = ANY($1) GROUP BY 1`)
	bad := 0
	for _, o := range w.orders {
		if res[o] != w.lines[o] || par[o] != 1 {
			if bad++; bad <= 5 {
				t.Errorf("order %s: %d reservations for %d lines, %d parcels (want exactly once)", o, res[o], w.lines[o], par[o])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d orders not applied exactly once", bad, len(w.orders))
	}
	for _, id := range w.rolledBck {
		if w.tap[id] > 0 {
			t.Errorf("rolled-back outbox row %s was published", id)
		}
	}
	if n, err := w.e.count(w.e.stockDB, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1::uuid[])`, w.rolledBck); err != nil || n > 0 {
		t.Errorf("rolled-back rows processed by stock: %d (%v)", n, err)
	}
	for _, id := range w.placed {
		if w.tap[id] == 0 {
			t.Errorf("committed outbox row %s never published", id)
		}
	}
}

var killLineRE = regexp.MustCompile(`killing itself between outbox confirm and delete`)

// killedBatch returns the rows, first and last id of the batch the daemon
// confirmed and did not delete before it killed itself, from its log.
func (d *daemon) killedBatch() (rows int, first, last string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.tail) - 1; i >= 0; i-- {
		if !killLineRE.MatchString(d.tail[i]) {
			continue
		}
		var l struct {
			Rows  int    `json:"rows"`
			First string `json:"first_event_id"`
			Last  string `json:"last_event_id"`
		}
		if json.Unmarshal([]byte(d.tail[i]), &l) != nil {
			return 0, "", "", false
		}
		return l.Rows, l.First, l.Last, true
	}
	return 0, "", "", false
}

// relayActive reads platformd_outbox_relay_active{service} from the
// daemon's metrics.
func (d *daemon) relayActive(service string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	return strings.Contains(string(b), `platformd_outbox_relay_active{service="`+service+`"} 1`), nil
}

// TestOutboxRelayKilled kills a daemon's relay between a confirm and its
// delete (the daemon's test hook: TestOutboxKillAfterConfirmEnv, a SIGKILL
// of its own process at exactly that point), then runs two daemons, checks
// that one relay is active, SIGKILLs that daemon and checks that the other
// takes over. Every committed row must arrive, the only copies on the
// exchange are the rows of the killed batch, and the downstream chain has
// every effect once.
func TestOutboxRelayKilled(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	e := newEnv(t)
	w := newOutboxWorld(t, e)
	ctx := context.Background()
	n := 600
	if testing.Short() {
		n = 300
	}

	// Daemon a relays only the order service, so the killed batch is the
	// only source of copies on the exchange.
	a := w.daemon("a", false, []string{"PLATFORMD_TEST_OUTBOX_KILL_AFTER_CONFIRM=4"})
	a.migrate()
	a.start()
	a.mu.Lock()
	a.expectEnd = true // it kills itself
	exited := a.exited
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); w.write(ctx, n) }()
	select {
	case <-exited:
	case <-time.After(90 * time.Second):
		t.Fatal("daemon a did not kill itself after its 4th outbox batch")
	}
	rows, first, last, ok := a.killedBatch()
	if !ok || rows == 0 {
		t.Fatal("daemon a's log has no kill line with its batch")
	}
	t.Logf("daemon a killed itself with %d rows confirmed and not deleted (%s..%s)", rows, first, last)

	// Two daemons now: b and c, every relay on.
	b := w.daemon("b", true, nil)
	c := w.daemon("c", true, nil)
	b.start()
	c.start()
	<-done
	if !waitUntil(2*time.Minute, w.complete) {
		t.Fatal("the chain did not complete within 2m after the relay kill")
	}
	var active, standby *daemon
	if !waitUntil(10*time.Second, func() bool {
		ab, err1 := b.relayActive("order")
		ac, err2 := c.relayActive("order")
		switch {
		case err1 != nil || err2 != nil || ab == ac:
			return false
		case ab:
			active, standby = b, c
		default:
			active, standby = c, b
		}
		return true
	}) {
		t.Fatal("not exactly one of daemons b and c has the order relay active")
	}
	// The copies on the exchange are exactly the killed batch.
	w.mu.Lock()
	copies := 0
	for id, k := range w.tap {
		if k > 1 {
			copies++
			if id < first || id > last || k > 2 {
				t.Errorf("event %s published %d times, outside the killed batch %s..%s", id, k, first, last)
			}
		}
	}
	w.mu.Unlock()
	if copies != rows {
		t.Errorf("%d events published twice, want the %d rows of the killed batch", copies, rows)
	}

	// Kill the active relay's daemon: the standby takes over.
	t.Logf("SIGKILL daemon %s (active relay); %s must take over", active.name, standby.name)
	active.kill()
	start := time.Now()
	if !waitUntil(30*time.Second, func() bool { ok, _ := standby.relayActive("order"); return ok }) {
		t.Fatal("the standby relay did not take over within 30s")
	}
	t.Logf("takeover after %s", time.Since(start).Round(10*time.Millisecond))
	w.write(ctx, n/3)
	if !waitUntil(2*time.Minute, w.complete) {
		t.Fatal("the chain did not complete after the takeover")
	}
	// ListServices reports the producer and its empty outbox.
	ctx2, cancel := e.readCtx()
	defer cancel()
	resp, err := standby.adminClient().ListServices(ctx2, &adminv1.ListServicesRequest{})
	if err != nil {
		t.Fatalf("ListServices: %v", err)
	}
	found := false
	for _, s := range resp.GetServices() {
		if s.GetName() == "order" {
			found = true
			if s.GetOutboxPending() != 0 || s.GetOutboxOldest().AsDuration() != 0 {
				t.Errorf("order outbox: pending %d, oldest %s after the drain", s.GetOutboxPending(), s.GetOutboxOldest().AsDuration())
			}
		}
	}
	if !found {
		t.Error("ListServices does not list the producer service order")
	}
	standby.stop()
	w.checkEffects()
}
