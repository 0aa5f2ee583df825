package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/testdb"
)

// pgReady reports whether the server accepts a query.
func pgReady() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		return false
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err == nil
}

// pgCluster returns the Debian cluster version and name of the server.
func pgCluster(t *testing.T) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.AdminURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		t.Fatalf("server version: %v", err)
	}
	name := os.Getenv("PG_CLUSTER")
	if name == "" {
		name = "main"
	}
	return fmt.Sprint(num / 10000), name
}

// TestChaosPostgresRestart restarts the PostgreSQL cluster under load. It
// hits every user of the server, so it runs only with CHAOS_PG_RESTART=1
// (set by `make chaos`), once, quickly, and makes sure the cluster is up
// afterwards.
func TestChaosPostgresRestart(t *testing.T) {
	if os.Getenv("CHAOS_PG_RESTART") != "1" {
		t.Skip("set CHAOS_PG_RESTART=1 to restart the PostgreSQL cluster (it affects every user of the server)")
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		t.Skip("pg_ctlcluster not found: not a Debian PostgreSQL cluster")
	}
	rng := seedRNG(t)
	version, cluster := pgCluster(t)
	n, dur := 4000, 16*time.Second
	if testing.Short() {
		n, dur = 1500, 10*time.Second
	}
	e := newEnv(t)
	d := e.newDaemon(daemonOpts{name: "solo", dbAddr: pgAddr(t)})
	d.migrate()
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

	// Whatever happens, leave the cluster running.
	t.Cleanup(func() {
		if waitUntil(30*time.Second, pgReady) {
			return
		}
		out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "start").CombinedOutput()
		t.Logf("cleanup: pg_ctlcluster start: %v %s", err, out)
		if !waitUntil(60*time.Second, pgReady) {
			t.Errorf("cleanup: PostgreSQL %s/%s is not up", version, cluster)
		}
	})

	waitUntil(time.Minute, func() bool { return prod.published() >= n*2/5 })
	start := time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	out, err := exec.CommandContext(rctx, "pg_ctlcluster", "--skip-systemctl-redirect", "-m", "fast", version, cluster, "restart").CombinedOutput()
	rcancel()
	if err != nil {
		t.Fatalf("pg_ctlcluster restart %s %s: %v: %s", version, cluster, err, strings.TrimSpace(string(out)))
	}
	if !waitUntil(time.Minute, pgReady) {
		t.Fatalf("PostgreSQL not back a minute after the restart")
	}
	c.logf("PostgreSQL %s/%s restarted in %.1fs", version, cluster, time.Since(start).Seconds())
	// The test's own pools lost their connections too.
	for _, db := range e.dbs {
		db.Reset()
	}

	// After the restart the daemon still answers admin calls backed by the
	// database, and a pause still stops consumption.
	var pauseErr error
	if !waitUntil(30*time.Second, func() bool {
		actx, acancel := e.adminCtx()
		defer acancel()
		_, pauseErr = d.adminClient().PausePool(actx, &adminv1.PausePoolRequest{Pool: poolStock, Reason: "after restart"})
		return pauseErr == nil
	}) {
		t.Fatalf("PausePool after the restart: %v", pauseErr)
	}
	n0 := c.stockApplied()
	_ = sleepCtx(ctx, time.Second)
	if n1 := c.stockApplied(); n1 != n0 {
		t.Errorf("stock pool paused after the restart applied %d rows", n1-n0)
	}
	actx, acancel := e.adminCtx()
	_, err = d.adminClient().ResumePool(actx, &adminv1.ResumePoolRequest{Pool: poolStock})
	acancel()
	if err != nil {
		t.Fatalf("ResumePool: %v", err)
	}

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	if err := prod.wait(wctx); err != nil {
		t.Fatalf("producer: %v", err)
	}
	if last, ok := e.quiesce(pl, dbT0, 2*time.Minute); !ok {
		t.Errorf("not quiescent after 2m: %s", last)
	} else {
		c.logf("quiescent: %s", last)
	}
	d.finalScrape()
	d.stop()
	r := e.check(pl, &seeds{})
	for _, p := range r.Problems {
		t.Error(p)
	}
	m := e.totals()
	t.Logf("chaos: pg restart: events: %d, deliveries: %d, duplicates skipped: %d, applied twice: %d, lost: %d, bad inputs quarantined: %d/%d; retried (metrics): %d",
		r.Events, r.Applied+int(m.duplicate), int(m.duplicate), r.Twice, r.Lost, r.BadQuarantined, r.BadTotal, int(m.retried))
}
