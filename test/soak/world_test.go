package soak

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/faultproxy"
)

// clusterScript drives the soak's own three RabbitMQ nodes (relative to
// this package's directory, where go test runs); scripts/soak.sh exports
// the RABBITMQ_CLUSTER_* variables that make them its own.
const clusterScript = "../../scripts/rabbitmq-cluster.sh"

// world is the run's private services: PostgreSQL, the cluster, the
// service databases, the remote handler and the two daemons.
type world struct {
	t      *testing.T
	dir    string // the run's directory: logs, configs, curves, picture
	pgURL  string // admin DSN of the private server
	pgData string // its data directory (pg_ctl -D)
	pgBin  string // its server binaries
	pgUser string // the OS user that runs it ("" = this one)
	nodes  []string
	token  string

	remote *remoteHandler

	seededInside map[string][]uuid.UUID // per consumer database: the seeded rows no purge may delete

	mu    sync.Mutex
	pools map[string]*pgxpool.Pool
	off   map[int]bool // cluster nodes stopped or cut on purpose
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func mustEnv(t *testing.T, k string) string {
	t.Helper()
	v := os.Getenv(k)
	if v == "" {
		t.Fatalf("%s is not set: run the soak through scripts/soak.sh (make soak)", k)
	}
	return v
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{
		t: t, dir: mustEnv(t, "SOAK_RUN_DIR"), pgURL: mustEnv(t, "SOAK_PG_URL"),
		pgData: mustEnv(t, "SOAK_PG_DATA"), pgBin: mustEnv(t, "SOAK_PG_BIN"), pgUser: os.Getenv("SOAK_PG_USER"),
		token: "soak-" + randomHex(16), pools: map[string]*pgxpool.Pool{}, off: map[int]bool{},
	}
	out, err := w.script(context.Background(), "urls")
	if err != nil {
		t.Fatal(err)
	}
	w.nodes = strings.Split(strings.TrimSpace(out), ",")
	if len(w.nodes) != 3 {
		t.Fatalf("rabbitmq-cluster.sh urls: %q, want 3", out)
	}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, p := range w.pools {
			p.Close()
		}
	})
	return w
}

// script runs the cluster script.
func (w *world) script(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{clusterScript}, args...)...)
	cmd.WaitDelay = 5 * time.Second // a node started by it must not hold the pipe
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmq-cluster.sh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ctl runs rabbitmqctl on the first node not stopped or cut on purpose
// that answers.
func (w *world) ctl(ctx context.Context, args ...string) (string, error) {
	var out string
	var err error
	for n := 1; n <= 3; n++ {
		w.mu.Lock()
		off := w.off[n]
		w.mu.Unlock()
		if off {
			continue
		}
		if out, err = w.script(ctx, append([]string{"ctl", strconv.Itoa(n)}, args...)...); err == nil {
			return out, nil
		}
	}
	return out, err
}

func (w *world) setOff(n int, off bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.off[n] = off
}

// dsn is a service database's DSN on the private server.
func (w *world) dsn(db string) string {
	u, err := url.Parse(w.pgURL)
	if err != nil {
		w.t.Fatalf("SOAK_PG_URL: %v", err)
	}
	u.Path = "/" + db
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}

// openDBs opens the harness's own pool on every service database (once
// migrate has created them).
func (w *world) openDBs(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, name := range serviceDBs {
		cfg, err := pgxpool.ParseConfig(w.dsn(name))
		if err != nil {
			return fmt.Errorf("db %s: %w", name, err)
		}
		cfg.ConnConfig.RuntimeParams["application_name"] = "soak-harness"
		cfg.MaxConns = 4
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("db %s: %w", name, err)
		}
		w.pools[name] = p
	}
	return nil
}

// db is the harness's pool on a service database (openDBs opened it).
func (w *world) db(name string) *pgxpool.Pool {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.pools[name]
	if !ok {
		panic("soak: no pool on database " + name)
	}
	return p
}

// pgCtl runs pg_ctl on the private server, as its owner.
func (w *world) pgCtl(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	argv := append([]string{filepath.Join(w.pgBin, "pg_ctl"), "-D", w.pgData, "-w", "-t", "90"}, args...)
	if len(args) > 0 && (args[0] == "start" || args[0] == "restart") {
		// The server's output to its log: a server writing to pg_ctl's
		// stdout holds the pipe open, and CombinedOutput then waits for
		// its end for as long as the server lives (the soak's first
		// find, in its own harness).
		argv = append(argv, "-l", filepath.Join(w.dir, "postgresql.log"))
	}
	if w.pgUser != "" {
		argv = append([]string{"runuser", "-u", w.pgUser, "--"}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// pgExec runs one statement on the server's admin database.
func (w *world) pgExec(ctx context.Context, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, w.pgURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// daemon is one platformd process, restartable with the same config.
type daemon struct {
	w           *world
	name        string
	cfgPath     string
	adminAddr   string
	metricsAddr string
	logPath     string
	proxies     []*faultproxy.Proxy // in front of each node, or none
	ordered     bool                // runs the partitioned ledger pool

	// opMu serialises the faults and restarts of this daemon.
	opMu sync.Mutex

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	expect  bool
	starts  int
	unasked []string // exits nobody asked for
	conn    *grpc.ClientConn
	stats   []dupSnapshot // last scrape of each run
}

// dupSnapshot is what the metrics say of one run: duplicates skipped by
// source and messages by outcome.
type dupSnapshot struct {
	bySource  map[string]float64
	byOutcome map[string]float64
}

func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

func (d *daemon) running() bool { return d.pid() != 0 }

// start starts the daemon and waits for its admin API to serve.
func (d *daemon) start(ctx context.Context) error {
	d.mu.Lock()
	if d.cmd != nil {
		d.mu.Unlock()
		return nil
	}
	logf, err := os.OpenFile(d.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.mu.Unlock()
		return err
	}
	cmd := exec.Command(daemonBin, "run", "-config", d.cfgPath)
	cmd.Env = append(os.Environ(), "SOAK_ADMIN_TOKEN="+d.w.token)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		d.mu.Unlock()
		logf.Close()
		return fmt.Errorf("daemon %s: start: %w", d.name, err)
	}
	d.starts++
	run := d.starts
	d.cmd, d.exited, d.expect = cmd, make(chan struct{}), false
	d.stats = append(d.stats, dupSnapshot{})
	exited := d.exited
	d.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		d.mu.Lock()
		if !d.expect {
			d.unasked = append(d.unasked, fmt.Sprintf("run %d: %v", run, err))
		}
		d.cmd = nil
		d.mu.Unlock()
		close(exited)
	}()
	// The scraper lives as long as this run of the daemon, not the call.
	bg := context.WithoutCancel(ctx)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-exited:
				return
			case <-tick.C:
				if s, err := d.scrape(bg); err == nil {
					d.mu.Lock()
					d.stats[run-1] = s.dups
					d.mu.Unlock()
				}
			}
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("daemon %s: start: %w", d.name, err)
		}
		select {
		case <-exited:
			return fmt.Errorf("daemon %s exited during start (log %s)", d.name, d.logPath)
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := grpc_health_v1.NewHealthClient(d.client()).Check(cctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon %s: not serving after 2m: %w", d.name, err)
		}
		time.Sleep(200 * time.Millisecond) //nolint:forbidigo // a bounded poll of a subprocess's health (2 min deadline above)
	}
}

// signal sends sig and, for SIGKILL and SIGTERM, waits for the exit.
func (d *daemon) signal(sig syscall.Signal) error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	if cmd == nil {
		d.mu.Unlock()
		return errors.New("not running")
	}
	if sig != syscall.SIGHUP {
		d.expect = true
	}
	err := cmd.Process.Signal(sig)
	d.mu.Unlock()
	if err != nil || sig == syscall.SIGHUP {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return fmt.Errorf("daemon %s: no exit within 90s of %v: killed", d.name, sig)
	}
}

func (d *daemon) client() *grpc.ClientConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == nil {
		c, err := grpc.NewClient(d.adminAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			d.w.t.Fatalf("grpc client: %v", err)
		}
		d.conn = c
	}
	return d.conn
}

func (d *daemon) admin() adminv1.AdminServiceClient { return adminv1.NewAdminServiceClient(d.client()) }

// adminCtx is a 30 s context carrying the admin token.
func (w *world) adminCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+w.token), cancel
}

// scrapeResult is one read of a daemon's /metrics.
type scrapeResult struct {
	dups       dupSnapshot
	goroutines float64
}

var (
	metricRE = regexp.MustCompile(`^(platformd_messages_total|platformd_duplicates_total|go_goroutines)(?:\{([^}]*)\})? (\S+)$`)
	labelRE  = regexp.MustCompile(`(\w+)="([^"]*)"`)
)

func (d *daemon) scrape(ctx context.Context) (scrapeResult, error) {
	r := scrapeResult{dups: dupSnapshot{bySource: map[string]float64{}, byOutcome: map[string]float64{}}}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		m := metricRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range labelRE.FindAllStringSubmatch(m[2], -1) {
			labels[l[1]] = l[2]
		}
		switch m[1] {
		case "go_goroutines":
			r.goroutines = v
		case "platformd_duplicates_total":
			r.dups.bySource[labels["source"]] += v
		default:
			r.dups.byOutcome[labels["outcome"]] += v
		}
	}
	return r, sc.Err()
}
