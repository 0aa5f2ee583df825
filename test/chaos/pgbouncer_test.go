package chaos

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// pgBouncerEnv, set to 1 (as in CI), makes TestChaosExactlyOnceThroughPgBouncer
// fail rather than skip where pgbouncer is not installed.
const pgBouncerEnv = "PLATFORMD_PGBOUNCER"

// pgBouncer is a PgBouncer of one test's own, in transaction pooling mode
// in front of the shared PostgreSQL: its own port, config and log in a
// directory of its own, its process a child of the test's, so that the
// test may kill and restart it without touching anyone else's.
type pgBouncer struct {
	t    *testing.T
	addr string // 127.0.0.1:port
	dir  string
	ini  string
	cred *syscall.Credential // the postgres user's when the test runs as root

	cmd    *exec.Cmd
	exited chan struct{}
}

// startPgBouncer writes the config of a PgBouncer in front of server
// (host:port) and starts it; it is killed when the test ends. It skips
// the test where pgbouncer is not installed (unless PLATFORMD_PGBOUNCER=1).
func startPgBouncer(t *testing.T, server string) *pgBouncer {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv(pgBouncerEnv) == "1" {
			t.Fatalf("pgbouncer not installed (scripts/pgbouncer.sh start installs it)")
		}
		t.Skip("pgbouncer not installed: scripts/pgbouncer.sh start installs it (set " + pgBouncerEnv + "=1 to require it)")
	}
	pb := &pgBouncer{t: t, addr: freePort(t)}
	// Not t.TempDir: PgBouncer refuses to run as root, and the user it
	// runs as must reach its directory (a test's temp dir is private).
	pb.dir, err = os.MkdirTemp("", "platformd-chaos-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pb.dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no postgres user to run pgbouncer as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pb.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)} //nolint:gosec // ids of a local user
		if err := os.Chown(pb.dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	host, port, err := net.SplitHostPort(server)
	if err != nil {
		t.Fatal(err)
	}
	_, listen, _ := net.SplitHostPort(pb.addr)
	users := filepath.Join(pb.dir, "userlist.txt")
	pb.ini = filepath.Join(pb.dir, "pgbouncer.ini")
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 20
max_client_conn = 500
server_idle_timeout = 10
ignore_startup_parameters = extra_float_digits
logfile = %s
`, host, port, listen, users, filepath.Join(pb.dir, "pgbouncer.log"))
	for _, f := range []struct{ path, text string }{{users, `"postgres" ""` + "\n"}, {pb.ini, ini}} {
		if err := os.WriteFile(f.path, []byte(f.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if pb.cred != nil {
			if err := os.Chown(f.path, int(pb.cred.Uid), int(pb.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	pb.start(bin)
	t.Cleanup(func() { pb.kill(syscall.SIGKILL) })
	return pb
}

// start runs the PgBouncer in the foreground, as a child, and waits until
// it accepts connections.
func (pb *pgBouncer) start(bin string) {
	pb.t.Helper()
	cmd := exec.Command(bin, pb.ini)
	attr := childProcAttr()
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Credential = pb.cred
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		pb.t.Fatalf("pgbouncer: start: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	pb.cmd, pb.exited = cmd, exited
	if !waitUntil(10*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", pb.addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}) {
		pb.t.Fatalf("pgbouncer does not answer on %s: %s", pb.addr, pb.log())
	}
	select {
	case <-exited:
		pb.t.Fatalf("pgbouncer exited at start: %s", pb.log())
	default:
	}
}

// kill sends sig to the PgBouncer and waits for it to exit: SIGTERM is
// its immediate shutdown (every client and server connection dropped, open
// transactions cut), SIGKILL a crash.
func (pb *pgBouncer) kill(sig syscall.Signal) {
	if pb.cmd == nil {
		return
	}
	_ = pb.cmd.Process.Signal(sig)
	<-pb.exited
	pb.cmd = nil
}

// restart kills the PgBouncer with sig, leaves it down for down, and
// starts it again on the same port and config.
func (pb *pgBouncer) restart(ctx context.Context, sig syscall.Signal, down time.Duration) {
	pb.t.Helper()
	bin := pb.cmd.Path
	pb.kill(sig)
	_ = sleepCtx(ctx, down) // the outage is the scenario
	pb.start(bin)
}

// logins counts the client logins to database db in the PgBouncer's log
// (every run's: the log is appended to).
func (pb *pgBouncer) logins(db string) int {
	b, err := os.ReadFile(filepath.Join(pb.dir, "pgbouncer.log"))
	if err != nil {
		pb.t.Errorf("pgbouncer log: %v", err)
		return 0
	}
	return strings.Count(string(b), "login attempt: db="+db+" ")
}

// log returns the end of the PgBouncer's log, for failure reports.
func (pb *pgBouncer) log() string {
	b, err := os.ReadFile(filepath.Join(pb.dir, "pgbouncer.log"))
	if err != nil {
		return err.Error()
	}
	s := string(b)
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// TestChaosExactlyOnceThroughPgBouncer runs the exactly-once check with
// stock in `database_mode: pooler` behind a PgBouncer of the test's own in
// transaction mode (shipping stays direct): while the producer publishes
// with duplicates and bad inputs, PgBouncer is shut down at once (SIGTERM:
// transactions cut mid-flight, commits whose outcome the daemon cannot
// know) and restarted, the daemon is SIGKILLed and restarted, and
// PgBouncer crashes (SIGKILL) and stays down two seconds. Every good event
// must be applied exactly once, none lost, every bad one stored once.
func TestChaosExactlyOnceThroughPgBouncer(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	rng := seedRNG(t)
	n, dur := 3000, 20*time.Second
	if testing.Short() {
		n, dur = 1500, 12*time.Second
	}
	e := newEnv(t)
	pb := startPgBouncer(t, pgAddr(t))
	direct := pgAddr(t)
	stock := strings.NewReplacer("{{DSN}}", e.dsn(pb.addr, e.stockDB, ""), "{{QUEUE}}", e.stockQ).Replace(stockService)
	stock = strings.Replace(stock, "    horizon:", "    database_mode: pooler\n    horizon:", 1)
	shipping := strings.NewReplacer("{{DSN}}", e.dsn(direct, e.shipDB, ""), "{{QUEUE}}", e.shipQ).Replace(shippingService)
	d := e.newDaemon(daemonOpts{name: "pooler", servicesYAML: stock + shipping})
	d.migrate() // stock's through PgBouncer too
	pl := newPlan(rng, n, e)
	stats := &pubStats{}
	prod := newProducer(e, pl, rng, dur, stats)
	dbT0 := e.dbNow()
	d.start()
	c := &chaos{t: t, e: e, a: d, prod: prod, t0: time.Now(), rng: rng}
	c.waitPools(d, adminv1.PoolState_POOL_STATE_RUNNING, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.ctx = ctx
	go prod.run(ctx)

	at := func(frac float64) {
		waitUntil(time.Minute, func() bool { return prod.published() >= int(frac*float64(n)) })
	}
	at(0.2)
	pb.restart(ctx, syscall.SIGTERM, 0)
	c.logf("PgBouncer shut down at once and restarted")
	at(0.45)
	d.kill()
	d.start()
	c.logf("daemon SIGKILLed and restarted")
	at(0.7)
	pb.restart(ctx, syscall.SIGKILL, 2*time.Second)
	c.logf("PgBouncer crashed, down 2s, restarted")

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := prod.wait(wctx); err != nil {
		t.Fatalf("producer: %v", err)
	}
	if last, ok := e.quiesce(pl, dbT0, 2*time.Minute); !ok {
		t.Errorf("not quiescent after 2m: %s\nPgBouncer's log:\n%s", last, pb.log())
	} else {
		c.logf("quiescent: %s", last)
	}
	d.finalScrape()
	d.stop()
	r := e.check(pl, &seeds{})
	for _, p := range r.Problems {
		t.Error(p)
	}
	if !r.OK() {
		t.Errorf("through PgBouncer: %s", r.Summary())
	}
	// stock's traffic went through the test's PgBouncer, in each of its
	// three runs.
	if n := pb.logins(e.stockDB); n < 3 {
		t.Errorf("PgBouncer logged %d logins to %s, want one per run at least (3)", n, e.stockDB)
	}
	m := e.totals()
	t.Logf("chaos: pgbouncer: events: %d, deliveries: %d, duplicates skipped: %d, applied twice: %d, lost: %d, bad inputs quarantined: %d/%d; retried (metrics): %d",
		r.Events, r.Applied+int(m.duplicate), int(m.duplicate), r.Twice, r.Lost, r.BadQuarantined, r.BadTotal, int(m.retried))
}
