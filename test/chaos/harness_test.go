package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/testdb"
)

// daemonBin is the platformd binary TestMain builds for this run.
var daemonBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "platformd-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "platformd")
		// Tag platformd_testhooks: the outbox test kills a daemon between a
		// confirm and its delete (daemon.TestOutboxKillAfterConfirmEnv).
		args := []string{"build", "-tags", "platformd_testhooks", "-o", bin}
		if os.Getenv("CHAOS_DAEMON_RACE") == "1" {
			args = append(args, "-race")
		}
		// The tests' shop daemon: the chaos tests run the shop's Go
		// handlers, which the release binary (cmd/platformd) does not
		// register; the fixture's copy, so that the example may change.
		args = append(args, "github.com/platformd/platformd/internal/fixture/shop/shopd")
		goCmd := os.Getenv("GO")
		if goCmd == "" {
			goCmd = "go"
		}
		cmd := exec.Command(goCmd, args...)
		if os.Getenv("CHAOS_DAEMON_RACE") != "1" {
			// Static, as the release binary (make image) is built; it
			// shares the compile of the suite's other builds.
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: go %s: %v\n", strings.Join(args, " "), err)
			return 1
		}
		daemonBin = bin
		return m.Run()
	}()
	os.Exit(code)
}

// seedRNG returns the test's random source, seeded from CHAOS_SEED or the
// clock; the seed is logged so that a failing run can be replayed.
func seedRNG(t *testing.T) *mrand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (set CHAOS_SEED=%d to replay the same choices)", seed, seed)
	return mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pgAddr is host:port of the PostgreSQL server the tests use.
func pgAddr(t testing.TB) string {
	u, err := url.Parse(testdb.AdminURL())
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	host := u.Hostname()
	if host == "" {
		host = "127.0.0.1"
	}
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	return net.JoinHostPort(host, port)
}

// freePort returns a currently free loopback TCP address.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func rabbitmqctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// broker is the RabbitMQ a test runs on: the main node, or a cluster.
type broker struct {
	// urls are the nodes' base URLs (vhost "/").
	urls []string
	// ctl runs rabbitmqctl against a running node.
	ctl func(args ...string) (string, error)
}

// mainBroker is the shared node at TEST_AMQP_URL.
func mainBroker() broker { return broker{urls: []string{testenv.AMQPURL()}, ctl: rabbitmqctl} }

// env is one test's isolated world: a RabbitMQ vhost and exchange, two
// service databases, tokens, and the daemons started on them.
type env struct {
	t        *testing.T
	id       string
	vhost    string
	amqpURL  string   // the first node's URL with the vhost
	amqpURLs []string // every node's URL with the vhost
	ctl      func(args ...string) (string, error)
	exchange string
	stockQ   string
	shipQ    string
	stockDB  string
	shipDB   string
	dir      string

	adminToken string
	readToken  string
	dbPassword string // in every DSN: must never show in a log or reply

	dbs map[string]*pgxpool.Pool // the test's own connections to the service databases

	// partitioned gives both services a partitioned processed_event
	// (processed_event: {partitions: daily}); set before newDaemon.
	partitioned bool

	mu       sync.Mutex
	secrets  []string
	daemons  []*daemon
	problems []string // log lines that break a rule
}

// Pool and service names of the shop (the tests' shop, internal/fixture/shop).
const (
	svcStock  = "stock"
	svcShip   = "shipping"
	poolStock = "stock-events"
	poolShip  = "shipping-events"
)

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, mainBroker())
}

// newEnvOn is newEnv on the given broker.
func newEnvOn(t *testing.T, br broker) *env {
	t.Helper()
	id := randomHex(4)
	e := &env{
		t: t, id: id,
		vhost:      "chaos-" + id,
		exchange:   "chaos.events." + id,
		stockQ:     "stock.events." + id,
		shipQ:      "shipping.events." + id,
		stockDB:    testdb.Name("chaos_stock"),
		shipDB:     testdb.Name("chaos_shipping"),
		dir:        t.TempDir(),
		adminToken: "adm-" + randomHex(16),
		readToken:  "rd-" + randomHex(16),
		dbPassword: "pw-" + randomHex(12),
		dbs:        map[string]*pgxpool.Pool{},
		ctl:        br.ctl,
	}
	e.secrets = []string{e.adminToken, e.readToken, e.dbPassword}
	if _, err := e.ctl("add_vhost", e.vhost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := e.ctl("delete_vhost", e.vhost); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	if _, err := e.ctl("set_permissions", "-p", e.vhost, "guest", ".*", ".*", ".*"); err != nil {
		t.Fatal(err)
	}
	for _, u := range br.urls {
		e.amqpURLs = append(e.amqpURLs, strings.TrimSuffix(u, "/")+"/"+e.vhost)
	}
	e.amqpURL = e.amqpURLs[0]
	t.Cleanup(func() {
		testdb.Drop(e.stockDB)
		testdb.Drop(e.shipDB)
	})
	// Registered after the drops, so run before them: stop every daemon
	// first, then check what they logged.
	t.Cleanup(e.shutdown)
	return e
}

// addSecret records a string that must never appear in a log line.
func (e *env) addSecret(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.secrets = append(e.secrets, s)
}

func (e *env) secretList() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.secrets...)
}

// shutdown kills whatever still runs, closes the test's connections and
// reports log lines that broke a rule.
func (e *env) shutdown() {
	e.mu.Lock()
	ds := append([]*daemon(nil), e.daemons...)
	e.mu.Unlock()
	for _, d := range ds {
		d.kill()
		d.closeClient()
	}
	for _, db := range e.dbs {
		db.Close()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.problems {
		e.t.Errorf("daemon log: %s", p)
	}
}

// dsn is a service database's DSN through addr (the server or a proxy),
// with the password that must stay secret.
func (e *env) dsn(addr, db, params string) string {
	u, err := url.Parse(testdb.AdminURL())
	if err != nil {
		e.t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	user := u.User.Username()
	if user == "" {
		user = "postgres"
	}
	pw, ok := u.User.Password()
	if ok && pw != "" {
		e.addSecret(pw)
	} else {
		// The server trusts loopback connections; the password is sent
		// nowhere and serves to catch DSNs leaking into logs.
		pw = e.dbPassword
	}
	out := url.URL{Scheme: "postgres", User: url.UserPassword(user, pw), Host: addr, Path: "/" + db}
	q := url.Values{"sslmode": {"disable"}}
	if params != "" {
		extra, err := url.ParseQuery(params)
		if err != nil {
			e.t.Fatalf("dsn params %q: %v", params, err)
		}
		for k, v := range extra {
			q[k] = v
		}
	}
	out.RawQuery = q.Encode()
	return out.String()
}

// db returns the test's own pool on a service database (created by the
// daemons' migrate).
func (e *env) db(name string) *pgxpool.Pool {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.dbs[name]; ok {
		return p
	}
	cfg, err := pgxpool.ParseConfig(testdb.WithDatabase(testdb.AdminURL(), name))
	if err != nil {
		e.t.Fatalf("db %s: %v", name, err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-checker"
	cfg.MaxConns = 4
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		e.t.Fatalf("db %s: %v", name, err)
	}
	e.dbs[name] = p
	return p
}

// tlsFiles are the admin server's PEM files.
type tlsFiles struct{ cert, key, clientCA string }

// daemonOpts shape one daemon's configuration.
type daemonOpts struct {
	name      string
	dbAddr    string // host:port of PostgreSQL or of a proxy in front of it
	dsnParams string // extra DSN parameters (session settings)
	services  []string
	tls       *tlsFiles
	creds     credentials.TransportCredentials // of the harness's admin client; default plaintext
	env       []string                         // extra environment
	// servicesYAML, when set, is the config's services list verbatim
	// (services is then ignored).
	servicesYAML string
}

// daemon is one platformd process (restartable with the same config).
type daemon struct {
	e           *env
	name        string
	cfgPath     string
	adminAddr   string
	metricsAddr string
	extraEnv    []string

	mu        sync.Mutex
	cmd       *exec.Cmd
	exited    chan struct{}
	logDone   chan struct{}
	expectEnd bool // we sent the signal that ends it
	starts    int
	kills     int
	tail      []string // last log lines, for failure reports
	dump      []string // every line after a SIGQUIT: the goroutine dump
	dumping   bool
	lines     int

	clientMu sync.Mutex
	creds    credentials.TransportCredentials
	conn     *grpc.ClientConn

	statsMu sync.Mutex
	stats   []metricsSnapshot // last snapshot of each run
}

const configTemplate = `log: {level: info, format: json}
admin:
  listen: {{ADMIN}}
  tokens:
    - {name: ops, role: admin, token: "${CHAOS_ADMIN_TOKEN}"}
    - {name: dashboards, role: read, token_file: read.token}
{{TLS}}metrics: {listen: {{METRICS}}}
broker: {{{BROKER}}, exchange: {{EXCHANGE}}, max_body_bytes: {{MAXBODY}}}
services:
{{SERVICES}}`

const stockService = `  - name: stock
    database: "{{DSN}}"
    horizon: 48h
    min_horizon: 24h
    purge: {every: 1h, batch_size: 1000}
    pools:
      - name: stock-events
        queue: {{QUEUE}}
        queue_type: quorum
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: 3
        # batch.size and prefetch unset: the defaults users run (a kill
        # then finds a whole derived prefetch in flight)
        retry: {delays: [1s, 2s, 4s]}
`

const shippingService = `  - name: shipping
    database: "{{DSN}}"
    horizon: 48h
    min_horizon: 24h
    purge: {every: 1h, batch_size: 1000}
    pools:
      - name: shipping-events
        queue: {{QUEUE}}
        queue_type: quorum
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status]
        concurrency: 2
        prefetch: 200
        batch: {size: 50, wait: 5ms}
        retry: {delays: [1s, 2s, 4s]}
`

// maxBody is broker.max_body_bytes in the chaos configs: small, so the
// oversized bad input stays cheap.
const maxBody = 64 << 10

// newDaemon writes a config for o and returns the (not started) daemon.
func (e *env) newDaemon(o daemonOpts) *daemon {
	e.t.Helper()
	if len(o.services) == 0 && o.servicesYAML == "" {
		o.services = []string{svcStock, svcShip}
	}
	d := &daemon{e: e, name: o.name, adminAddr: freePort(e.t), metricsAddr: freePort(e.t), extraEnv: o.env, creds: o.creds}
	if d.creds == nil {
		d.creds = insecure.NewCredentials()
	}
	dir := filepath.Join(e.dir, o.name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "read.token"), []byte(e.readToken+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	var svcs strings.Builder
	svcs.WriteString(o.servicesYAML)
	for _, s := range o.services {
		switch s {
		case svcStock:
			svcs.WriteString(strings.NewReplacer("{{DSN}}", e.dsn(o.dbAddr, e.stockDB, o.dsnParams), "{{QUEUE}}", e.stockQ).Replace(stockService))
		case svcShip:
			svcs.WriteString(strings.NewReplacer("{{DSN}}", e.dsn(o.dbAddr, e.shipDB, o.dsnParams), "{{QUEUE}}", e.shipQ).Replace(shippingService))
		default:
			e.t.Fatalf("unknown service %q", s)
		}
	}
	if e.partitioned {
		svcs = *partitionedServices(&svcs)
	}
	tlsBlock := ""
	if o.tls != nil {
		tlsBlock = fmt.Sprintf("  tls: {cert_file: %q, key_file: %q, client_ca_file: %q}\n", o.tls.cert, o.tls.key, o.tls.clientCA)
	}
	brokerKey := fmt.Sprintf("url: %q", e.amqpURL)
	if len(e.amqpURLs) > 1 {
		quoted := make([]string, len(e.amqpURLs))
		for i, u := range e.amqpURLs {
			quoted[i] = strconv.Quote(u)
		}
		brokerKey = "urls: [" + strings.Join(quoted, ", ") + "]"
	}
	cfg := strings.NewReplacer(
		"{{ADMIN}}", d.adminAddr, "{{METRICS}}", d.metricsAddr, "{{TLS}}", tlsBlock,
		"{{BROKER}}", brokerKey, "{{EXCHANGE}}", e.exchange, "{{MAXBODY}}", strconv.Itoa(maxBody),
		"{{SERVICES}}", svcs.String(),
	).Replace(configTemplate)
	d.cfgPath = filepath.Join(dir, "platformd.yaml")
	if err := os.WriteFile(d.cfgPath, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.daemons = append(e.daemons, d)
	e.mu.Unlock()
	return d
}

func (d *daemon) environ() []string {
	return append(append(os.Environ(), "CHAOS_ADMIN_TOKEN="+d.e.adminToken), d.extraEnv...)
}

// migrate runs `platformd migrate -config F -create-db` and requires exit 0.
func (d *daemon) migrate() {
	t := d.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemonBin, "migrate", "-config", d.cfgPath, "-create-db")
	cmd.Env = d.environ()
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		d.checkLine(line)
	}
	if err != nil {
		t.Fatalf("platformd migrate: %v\n%s", err, out)
	}
}

// start starts the daemon and waits until its admin API is SERVING.
func (d *daemon) start() {
	t := d.e.t
	t.Helper()
	d.mu.Lock()
	if d.cmd != nil {
		d.mu.Unlock()
		t.Fatalf("daemon %s: already running", d.name)
	}
	cmd := exec.Command(daemonBin, "run", "-config", d.cfgPath)
	cmd.Env = d.environ()
	cmd.SysProcAttr = childProcAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		d.mu.Unlock()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		d.mu.Unlock()
		t.Fatalf("daemon %s: start: %v", d.name, err)
	}
	d.starts++
	run := d.starts
	d.cmd, d.exited, d.logDone, d.expectEnd = cmd, make(chan struct{}), make(chan struct{}), false
	exited, logDone := d.exited, d.logDone
	d.statsMu.Lock()
	d.stats = append(d.stats, metricsSnapshot{})
	d.statsMu.Unlock()
	d.mu.Unlock()

	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			d.checkLine(sc.Text())
		}
	}()
	go func() {
		<-logDone // Wait closes the pipe: read it all first
		err := cmd.Wait()
		d.mu.Lock()
		expected := d.expectEnd
		d.cmd = nil
		tail := strings.Join(d.tail, "\n")
		d.mu.Unlock()
		close(exited)
		if !expected {
			d.e.recordProblem(fmt.Sprintf("daemon %s (run %d) exited on its own: %v; last log lines:\n%s", d.name, run, err, tail))
		}
	}()

	// Keep a recent metrics snapshot of this run: a SIGKILL loses the rest.
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-exited:
				return
			case <-tick.C:
				if s, err := d.scrape(); err == nil {
					d.statsMu.Lock()
					d.stats[run-1] = s
					d.statsMu.Unlock()
				}
			}
		}
	}()

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-exited:
			d.mu.Lock()
			tail := strings.Join(d.tail, "\n")
			d.mu.Unlock()
			t.Fatalf("daemon %s exited during start; last log lines:\n%s", d.name, tail)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := grpc_health_v1.NewHealthClient(d.client()).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return
		}
		if time.Now().After(deadline) {
			d.mu.Lock()
			tail := strings.Join(d.tail, "\n")
			d.mu.Unlock()
			t.Fatalf("daemon %s: admin API not serving after 90s: %v; last log lines:\n%s\nsessions on the test's databases:\n%s",
				d.name, err, tail, d.e.dbActivity())
		}
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // a bounded poll of a subprocess's admin port (90 s deadline above)
	}
}

func (e *env) recordProblem(p string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.problems = append(e.problems, p)
}

var stackRE = regexp.MustCompile(`goroutine \d+ \[|\.go:\d+|runtime/debug\.Stack|"stack"|DATA RACE|^panic:|^fatal error:`)

// checkLine applies the log rules to one stderr line: JSON (anything else
// is a panic, a stack or a stray print), no secret, no stack.
func (d *daemon) checkLine(line string) {
	if line == "" {
		return
	}
	d.mu.Lock()
	d.lines++
	if d.dumping {
		d.dump = append(d.dump, line)
		d.mu.Unlock()
		return
	}
	d.tail = append(d.tail, line)
	if len(d.tail) > 40 {
		d.tail = d.tail[len(d.tail)-40:]
	}
	d.mu.Unlock()
	short := line
	if len(short) > 400 {
		short = short[:400] + "..."
	}
	for _, s := range d.e.secretList() {
		if strings.Contains(line, s) {
			d.e.recordProblem(fmt.Sprintf("daemon %s logged a secret: %s", d.name, strings.ReplaceAll(short, s, "<SECRET>")))
			return
		}
	}
	if !json.Valid([]byte(line)) {
		d.e.recordProblem(fmt.Sprintf("daemon %s: log line is not JSON (panic or stray output?): %s", d.name, short))
		return
	}
	if stackRE.MatchString(line) {
		d.e.recordProblem(fmt.Sprintf("daemon %s: log line carries a stack or race report: %s", d.name, short))
	}
}

// dbActivity describes the sessions on the test's databases and the
// advisory locks they hold or wait for, for failure reports.
func (e *env) dbActivity() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT a.pid, a.datname, a.application_name, coalesce(a.client_port, 0), a.state,
			coalesce(a.wait_event_type || ':' || a.wait_event, ''), left(a.query, 120),
			coalesce((SELECT string_agg(l.locktype || ' ' || l.mode || CASE WHEN l.granted THEN ' held' ELSE ' WAITING' END, ', ')
				FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory'), '')
		FROM pg_stat_activity a WHERE a.datname = ANY($1) ORDER BY a.pid`, []string{e.stockDB, e.shipDB})
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var pid, port int
		var db, app, state, wait, query, locks string
		if err := rows.Scan(&pid, &db, &app, &port, &state, &wait, &query, &locks); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "  pid %d %s app=%s port=%d %s wait=%s locks=[%s] %q\n", pid, db, app, port, state, wait, locks, query)
	}
	return b.String()
}

// kill sends SIGKILL (if running) and waits for the exit.
func (d *daemon) kill() {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	if cmd != nil {
		d.expectEnd = true
		d.kills++
		_ = cmd.Process.Signal(syscall.SIGKILL)
	}
	d.mu.Unlock()
	if exited != nil {
		<-exited
	}
}

// stop sends SIGTERM and requires a graceful exit 0 within a minute.
func (d *daemon) stop() {
	t := d.e.t
	t.Helper()
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	if cmd == nil {
		d.mu.Unlock()
		return
	}
	d.expectEnd = true
	_ = cmd.Process.Signal(syscall.SIGTERM)
	d.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(time.Minute):
		// The goroutine dump says where the shutdown hangs.
		d.mu.Lock()
		d.dumping = true
		if d.cmd != nil {
			_ = d.cmd.Process.Signal(syscall.SIGQUIT)
		}
		d.mu.Unlock()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
		d.kill()
		d.mu.Lock()
		tail, dump := strings.Join(d.tail, "\n"), strings.Join(d.dump, "\n")
		d.mu.Unlock()
		t.Errorf("daemon %s: no exit within 1m of SIGTERM; last log lines:\n%s\ngoroutines (SIGQUIT):\n%s", d.name, tail, dump)
		return
	}
	if st := cmd.ProcessState; st == nil || st.ExitCode() != 0 {
		d.mu.Lock()
		tail := strings.Join(d.tail, "\n")
		d.mu.Unlock()
		t.Errorf("daemon %s: SIGTERM ended in %v, want exit 0; last log lines:\n%s", d.name, st, tail)
	}
}

func (d *daemon) running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd != nil
}

// client is the harness's gRPC connection to the daemon's admin API.
func (d *daemon) client() *grpc.ClientConn {
	d.clientMu.Lock()
	defer d.clientMu.Unlock()
	if d.conn == nil {
		c, err := grpc.NewClient(d.adminAddr, grpc.WithTransportCredentials(d.creds))
		if err != nil {
			d.e.t.Fatalf("grpc client: %v", err)
		}
		d.conn = c
	}
	return d.conn
}

func (d *daemon) closeClient() {
	d.clientMu.Lock()
	defer d.clientMu.Unlock()
	if d.conn != nil {
		_ = d.conn.Close()
		d.conn = nil
	}
}

func (d *daemon) adminClient() adminv1.AdminServiceClient {
	return adminv1.NewAdminServiceClient(d.client())
}

// withToken returns ctx carrying "authorization: Bearer token".
func withToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// adminCtx is a 30s context with the admin token.
func (e *env) adminCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return withToken(ctx, e.adminToken), cancel
}

func (e *env) readCtx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return withToken(ctx, e.readToken), cancel
}

// poolInfo returns a pool as the daemon's ListPools reports it.
func (d *daemon) poolInfo(pool string) (*adminv1.Pool, error) {
	ctx, cancel := d.e.readCtx()
	defer cancel()
	resp, err := d.adminClient().ListPools(ctx, &adminv1.ListPoolsRequest{})
	if err != nil {
		return nil, err
	}
	for _, p := range resp.GetPools() {
		if p.GetName() == pool {
			return p, nil
		}
	}
	return nil, fmt.Errorf("pool %s not listed", pool)
}

// tlsClient dials the admin API with TLS: rootCA verifies the server;
// cert, when set, is the client certificate.
func tlsClient(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// metricsSnapshot holds the counters the summary reports.
type metricsSnapshot struct {
	processed, duplicate, rejected, failed, retried float64
	dupBySource                                     map[string]float64
}

var metricLineRE = regexp.MustCompile(`^(platformd_messages_total|platformd_duplicates_total)\{([^}]*)\} (\S+)$`)
var labelRE = regexp.MustCompile(`(\w+)="([^"]*)"`)

func (d *daemon) scrape() (metricsSnapshot, error) {
	s := metricsSnapshot{dupBySource: map[string]float64{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := metricLineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		if m[1] == "platformd_duplicates_total" {
			s.dupBySource[labels["source"]] += v
			continue
		}
		switch labels["outcome"] {
		case "processed":
			s.processed += v
		case "duplicate":
			s.duplicate += v
		case "rejected":
			s.rejected += v
		case "failed":
			s.failed += v
		case "retried":
			s.retried += v
		}
	}
	return s, sc.Err()
}

// totals sums the last snapshot of every run of every daemon: exact for
// runs that ended gracefully, a lower bound (by at most a quarter second
// of work) for killed ones.
func (e *env) totals() metricsSnapshot {
	sum := metricsSnapshot{dupBySource: map[string]float64{}}
	e.mu.Lock()
	ds := append([]*daemon(nil), e.daemons...)
	e.mu.Unlock()
	for _, d := range ds {
		d.statsMu.Lock()
		for _, s := range d.stats {
			sum.processed += s.processed
			sum.duplicate += s.duplicate
			sum.rejected += s.rejected
			sum.failed += s.failed
			sum.retried += s.retried
			for k, v := range s.dupBySource {
				sum.dupBySource[k] += v
			}
		}
		d.statsMu.Unlock()
	}
	return sum
}

// finalScrape records the daemon's counters just before a graceful stop.
func (d *daemon) finalScrape() {
	s, err := d.scrape()
	if err != nil {
		return
	}
	d.statsMu.Lock()
	d.stats[len(d.stats)-1] = s
	d.statsMu.Unlock()
}

// terminateBackends ends the daemons' PostgreSQL sessions on the test's
// databases and returns how many it ended.
func (e *env) terminateBackends() (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name LIKE 'platformd%' AND datname = ANY($1)`,
		[]string{e.stockDB, e.shipDB}).Scan(&n)
	return n, err
}

// closeAllConnections force-closes every connection of the test's vhost.
func (e *env) closeAllConnections() error {
	_, err := e.ctl("close_all_connections", "-p", e.vhost, "chaos: forced close")
	return err
}

// dialAMQP connects the harness to the first node that answers.
func (e *env) dialAMQP() (*amqp.Connection, error) {
	var last error
	for _, u := range e.amqpURLs {
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "chaos-checker"}})
		if err == nil {
			return conn, nil
		}
		last = err
	}
	return nil, last
}

// waitUntil polls cond every 100ms until it holds or timeout passes.
func waitUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // waitUntil is the suite's one bounded poll, for state held by subprocesses and servers
	}
}

// count runs a count query on a service database.
func (e *env) count(db, q string, args ...any) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var n int
	err := e.db(db).QueryRow(ctx, q, args...).Scan(&n)
	return n, err
}

var errStopped = errors.New("stopped")

// sleepCtx sleeps d unless ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return errStopped
	case <-time.After(d):
		return nil
	}
}

// tap binds a queue of the test's own (name, exclusive, deleted with its
// connection at the end of the test) to every routing key of the
// exchange, before anything is published, and returns its deliveries
// (auto-acked): what producers and replays sent, copy for copy, and the
// channel it consumes on (free to publish on too).
func (e *env) tap(name string) (<-chan amqp.Delivery, *amqp.Channel) {
	t := e.t
	t.Helper()
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(e.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare(name, false, false, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "#", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return deliveries, ch
}
