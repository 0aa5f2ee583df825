package console_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/daemon/daemontest"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// Tokens of every test daemon.
const (
	adminToken = "console-e2e-admin-token-0123456789"
	readToken  = "console-e2e-read-token-0123456789"
)

// freePort returns a loopback address no one listens on right now.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// options tunes a test daemon.
type options struct {
	// sessionTTL is console.session_ttl; "" keeps the default.
	sessionTTL string
	// sampleEvery is console.sample_every.
	sampleEvery string
	// tls serves the admin API and the console with a certificate of the
	// test's own CA.
	tls bool
	// producer adds service order: a producer whose outbox is archived
	// (replays), on a database of its own (env.orderDSN).
	producer bool
}

// env is one daemon's world: its own databases, exchange, queues and ports.
type env struct {
	t                     testing.TB
	dir, suffix           string
	stockDSN, shipDSN     string
	orderDSN              string
	exchange              string
	stockPool, shipPool   string
	stockQueue, shipQueue string
	adminAddr, console    string
	caPool                *x509Pool
	d                     *daemon.Daemon
	stderr                *lockedBuffer
}

func newEnv(t testing.TB, opts options) *env {
	t.Helper()
	suffix := uuid.NewString()[:8]
	e := &env{
		t: t, dir: t.TempDir(), suffix: suffix, exchange: "console.e2e." + suffix,
		stockDSN: testdb.New(t, "console_stock"), shipDSN: testdb.New(t, "console_ship"),
		stockPool: "stock-events-" + suffix, shipPool: "shipping-events-" + suffix,
		stockQueue: "console.stock." + suffix, shipQueue: "console.shipping." + suffix,
		adminAddr: freePort(t), console: freePort(t),
	}
	t.Cleanup(e.deleteBrokerObjects)
	tlsBlock := ""
	if opts.tls {
		e.caPool = newTestPKI(t, e.dir)
		tlsBlock = fmt.Sprintf("  tls: {cert_file: %q, key_file: %q}\n", filepath.Join(e.dir, "server.pem"), filepath.Join(e.dir, "server.key"))
	}
	consoleBlock := "console: {listen: " + e.console
	if opts.sessionTTL != "" {
		consoleBlock += ", session_ttl: " + opts.sessionTTL
	}
	consoleBlock += ", sample_every: " + cmpOr(opts.sampleEvery, "250ms") + "}"
	cfg := fmt.Sprintf(`log: {level: info, format: json}
admin:
  listen: %s
  tokens:
    - {name: ops, role: admin, token: %q}
    - {name: dashboards, role: read, token: %q}
%s%s
metrics: {listen: "-"}
broker: {url: %q, exchange: %s}
services:
  - name: stock
    database: %q
    horizon: 336h
    min_horizon: 24h
    pools:
      - name: %s
        queue: %s
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: 2
        batch: {size: 20, wait: 1ms}
        retry: {delays: [1s]}
  - name: shipping
    database: %q
    pools:
      - name: %s
        queue: %s
        queue_type: classic
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status]
        concurrency: 1
        retry: {delays: [1s]}
`, e.adminAddr, adminToken, readToken, tlsBlock, consoleBlock, testenv.AMQPURL(), e.exchange,
		e.stockDSN, e.stockPool, e.stockQueue, e.shipDSN, e.shipPool, e.shipQueue)
	if opts.producer {
		e.orderDSN = testdb.New(t, "console_order")
		cfg += fmt.Sprintf("  - name: order\n    database: %q\n    outbox: {archive: 24h, poll: 50ms}\n", e.orderDSN)
	}
	path := filepath.Join(e.dir, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	e.start(path)
	return e
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// deleteBrokerObjects removes the exchange and queues the daemon declared.
func (e *env) deleteBrokerObjects() {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, q := range []string{e.stockQueue, e.shipQueue} {
		for _, n := range []string{q, q + ".retry.1s"} {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	}
	_ = ch.ExchangeDelete(e.exchange, false, false)
}

// start runs the daemon in the test's process (daemontest: the daemon
// `platformd run` starts, with the shop's handlers) and waits until it is
// ready, its console listening; it stops when the test ends.
func (e *env) start(cfgPath string) {
	t := e.t
	t.Helper()
	e.stderr = &lockedBuffer{}
	t.Cleanup(func() { // runs after the daemon's stop, registered below
		if t.Failed() {
			t.Logf("daemon log:\n%s", e.stderr)
		}
	})
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	e.d = daemontest.Start(t, cfgPath, reg, daemon.WithLogOutput(e.stderr))
}

// url returns the console URL of path.
func (e *env) url(path string) string {
	scheme := "http"
	if e.caPool != nil {
		scheme = "https"
	}
	return scheme + "://" + e.console + path
}

// httpClient returns a client that trusts the test CA, keeps cookies and
// does not follow redirects.
func (e *env) httpClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{}
	if e.caPool != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: e.caPool.pool, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Jar: jar, Transport: tr, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// waitPoolsRunning waits until both pools consume, through the console's
// own overview (a browser's view of them).
func (e *env) waitPoolsRunning(c *operator) {
	e.t.Helper()
	require.Eventually(e.t, func() bool {
		_, body := c.get("/fragments/overview")
		return strings.Count(body, `data-state>running<`) == 2
	}, 60*time.Second, 50*time.Millisecond, "pools did not connect: %s", e.stderr)
}

// operator is an HTTP client signed in (or not) to the console.
type operator struct {
	t    testing.TB
	e    *env
	http *http.Client
	csrf string
}

func (e *env) operator() *operator { return &operator{t: e.t, e: e, http: e.httpClient()} }

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a browser-like request (Accept: text/html) and returns the
// response with its body read; it remembers the page's CSRF token.
func (o *operator) do(method, path string, form url.Values, header http.Header) (*http.Response, string) {
	o.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, o.e.url(path), body)
	require.NoError(o.t, err)
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := o.http.Do(req)
	require.NoError(o.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(o.t, err)
	if m := csrfRE.FindSubmatch(data); m != nil {
		o.csrf = string(m[1])
	}
	return resp, string(data)
}

func (o *operator) get(path string) (*http.Response, string) {
	o.t.Helper()
	return o.do(http.MethodGet, path, nil, nil)
}

// post sends a form with the operator's CSRF token.
func (o *operator) post(path string, form url.Values) (*http.Response, string) {
	o.t.Helper()
	form.Set("csrf", o.csrf)
	return o.do(http.MethodPost, path, form, nil)
}

func (o *operator) signIn(token string) *operator {
	o.t.Helper()
	resp, body := o.do(http.MethodPost, "/login", url.Values{"token": {token}}, nil)
	require.Equal(o.t, http.StatusSeeOther, resp.StatusCode, body)
	require.Equal(o.t, "/", resp.Header.Get("Location"))
	resp, _ = o.get("/")
	require.Equal(o.t, http.StatusOK, resp.StatusCode)
	require.NotEmpty(o.t, o.csrf)
	return o
}

// publish sends one event, confirmed, and returns its id. An id may be
// given (to make one older than the horizon).
func (e *env) publish(name string, payload any, id uuid.UUID) uuid.UUID {
	e.t.Helper()
	if id == uuid.Nil {
		id = uuid.Must(uuid.NewV7())
	}
	raw, err := json.Marshal(payload)
	require.NoError(e.t, err)
	body, err := envelope.Encode(envelope.Envelope{EventID: id, EventName: name, OccurredAt: time.Now().UTC(), Payload: raw})
	require.NoError(e.t, err)
	e.publishRaw(name, body)
	return id
}

// publishRaw sends body as it is (a message that may not decode) with
// routing key key, confirmed.
func (e *env) publishRaw(key string, body []byte) {
	e.t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(e.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(e.t, err)
	require.NoError(e.t, ch.Confirm(false))
	dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), e.exchange, key, true, false,
		amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
	require.NoError(e.t, err)
	ok, err := dc.WaitContext(context.Background())
	require.NoError(e.t, err)
	require.True(e.t, ok, "publish not confirmed")
}

// order returns a valid order.order.placed.v1 payload.
func order() shop.OrderPlaced {
	return shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(),
		Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "1.000"}}}
}

// oldEventID returns a UUID v7 whose timestamp is age ago: an event older
// than the horizon, which the beyond-horizon guard quarantines.
func oldEventID(age time.Duration) uuid.UUID {
	id := uuid.Must(uuid.NewV7())
	ms := uint64(time.Now().Add(-age).UnixMilli())
	for i := range 6 {
		id[i] = byte(ms >> (40 - 8*i))
	}
	return id
}

// queueState returns a queue's ready messages and consumers.
func queueState(t testing.TB, queue string) (messages, consumers int) {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages, q.Consumers
}

// processed reports whether the service database has id in
// processed_event.
func processed(t testing.TB, dsn string, id uuid.UUID) bool {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	var ok bool
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM processed_event WHERE event_id = $1)`, id).Scan(&ok))
	return ok
}

// failedEvent is a row of platform.failed_event as the tests read it.
type failedEvent struct {
	ID uuid.UUID
	// EventID is uuid.Nil when the body did not decode.
	EventID                  uuid.UUID
	Pool, Reason, State      string
	ResolvedBy               string
	Edited                   bool
	EditedBody, OriginalBody []byte
}

// failedEvents returns the rows of the service database's failure store,
// oldest first.
func failedEvents(t testing.TB, dsn string) []failedEvent {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(context.Background(), `SELECT id, coalesce(event_id, '00000000-0000-0000-0000-000000000000'), pool,
		reason, state, coalesce(resolved_by, ''), edited_body IS NOT NULL, coalesce(edited_body, ''::bytea), body
		FROM platform.failed_event ORDER BY first_failed_at, id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []failedEvent
	for rows.Next() {
		var f failedEvent
		require.NoError(t, rows.Scan(&f.ID, &f.EventID, &f.Pool, &f.Reason, &f.State, &f.ResolvedBy, &f.Edited, &f.EditedBody, &f.OriginalBody))
		out = append(out, f)
	}
	require.NoError(t, rows.Err())
	return out
}

// waitFailedEvents waits (a bounded poll: the store is another process's
// state) until the service database holds n failures in state, and returns
// every row.
func (e *env) waitFailedEvents(dsn string, n int, state string) []failedEvent {
	e.t.Helper()
	var rows []failedEvent
	require.Eventually(e.t, func() bool {
		rows = failedEvents(e.t, dsn)
		k := 0
		for _, r := range rows {
			if r.State == state {
				k++
			}
		}
		return k == n
	}, 30*time.Second, 50*time.Millisecond, "%d failures %s in the store: %+v", n, state, &rows)
	return rows
}

// auditActions returns "actor action target" of the service's audit log,
// oldest first.
func auditActions(t testing.TB, dsn string) []string {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	rows, err := db.Query(context.Background(), `SELECT actor || ' ' || action || ' ' || target FROM platform.audit_log ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// lockedBuffer collects the daemon's stderr for the test to read.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
