package soak

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// TestSoak is the whole run: load, faults, curves, then the checker and
// the verdicts (see the package doc). SOAK=1 and the services of
// scripts/soak.sh are required.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK") != "1" {
		t.Skip("set SOAK=1 and run through scripts/soak.sh (make soak): it needs a PostgreSQL and a RabbitMQ cluster of its own")
	}
	dur := 60 * time.Minute
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SOAK_DURATION=%q: %v", s, err)
		}
		dur = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOAK_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t0 := time.Now()
	logf := func(format string, args ...any) {
		t.Logf("[%6.1fs] %s", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	logf("seed %d (SOAK_SEED=%d replays the same choices), duration %s, break %q", seed, seed, dur, os.Getenv("SOAK_BREAK"))
	rng := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	w := newWorld(t)
	w.writeMigrations()
	remote, err := newRemote(w.dir, freePort(t))
	if err != nil {
		t.Fatal(err)
	}
	w.remote = remote
	if err := remote.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.stop)
	a := w.newDaemon("a", true, true)
	b := w.newDaemon("b", false, false)
	t.Cleanup(func() {
		for _, d := range []*daemon{a, b} {
			if d.running() {
				_ = d.signal(syscall.SIGKILL)
			}
			d.mu.Lock()
			if d.conn != nil {
				_ = d.conn.Close()
			}
			d.mu.Unlock()
		}
	})
	migrate := exec.Command(daemonBin, "migrate", "-config", a.cfgPath, "-create-db")
	migrate.Env = append(os.Environ(), "SOAK_ADMIN_TOKEN="+w.token)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("platformd migrate: %v\n%s", err, out)
	}
	ctx := context.Background()
	if err := w.openDBs(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.seed(ctx); err != nil {
		t.Fatal(err)
	}
	tp, err := newTap(w)
	if err != nil {
		t.Fatal(err)
	}
	tapCtx, stopTap := context.WithCancel(ctx)
	defer stopTap()
	go tp.run(tapCtx)
	for _, d := range []*daemon{a, b} {
		if err := d.start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	logf("daemons a (ordered pool, broker through proxies) and b running; logs in %s", w.dir)

	var bg sync.WaitGroup
	smp := &sampler{w: w, a: a, b: b}
	smpCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	bg.Add(1)
	go func() { defer bg.Done(); smp.run(smpCtx, 10*time.Second) }()

	prod := &producer{w: w, rng: mrand.New(mrand.NewPCG(rng.Uint64(), rng.Uint64())), tick: 25 * time.Millisecond}
	prodCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	var prodWG sync.WaitGroup
	prodWG.Add(1)
	go func() { defer prodWG.Done(); prod.run(prodCtx) }()

	ft := &faulter{w: w, rng: mrand.New(mrand.NewPCG(rng.Uint64(), rng.Uint64())), a: a, b: b, logf: logf, conc: 3, t0: t0}
	faultCtx, stopFaults := context.WithTimeout(ctx, dur)
	defer stopFaults()
	var faultWG sync.WaitGroup
	faultWG.Add(2)
	go func() { defer faultWG.Done(); ft.run(faultCtx) }()
	go func() { defer faultWG.Done(); ft.restartB(faultCtx) }()

	progress := time.NewTicker(time.Minute)
	for done := false; !done; {
		select {
		case <-faultCtx.Done():
			done = true
		case <-progress.C:
			ev, cp := tp.seen()
			logf("progress: %d events written, tap saw %d events in %d copies", prod.count(), ev, cp)
		}
	}
	progress.Stop()
	faultWG.Wait()
	stopProducer()
	prodWG.Wait()
	logf("load and faults stopped: %d events written; healing", prod.count())
	if err := ft.healAll(ctx); err != nil {
		logf("heal: %v", err)
	}

	// Quiesce: until nothing waits anywhere, twice in a row; billing's
	// failures from the faults are retried as an operator would.
	retry := func() {
		_ = ft.call(ctx, a, func(ctx context.Context, c adminv1.AdminServiceClient) error {
			_, err := c.RetryFailedEvents(ctx, &adminv1.RetryFailedEventsRequest{Filter: &adminv1.FailureFilter{Service: "billing", State: "failed"}})
			return err
		})
	}
	retry()
	drainedOK := false
	var left string
	calm := 0
	for deadline, nextRetry := time.Now().Add(10*time.Minute), time.Now().Add(time.Minute); time.Now().Before(deadline); {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		left = w.drained(cctx)
		cancel()
		if left == "" {
			calm++
			if calm == 2 {
				drainedOK = true
				break
			}
		} else {
			calm = 0
		}
		if time.Now().After(nextRetry) && strings.Contains(left, "failure") {
			retry()
			nextRetry = time.Now().Add(time.Minute)
		}
		time.Sleep(5 * time.Second) //nolint:forbidigo // the drain check's pace: a bounded poll of the pools and the failure store
	}
	logf("drained: %v %s", drainedOK, left)
	// The tap's last copies, then the last samples.
	time.Sleep(3 * time.Second) //nolint:forbidigo // the tap's last copies in flight: a grace the scenario allows, not a wait for a result
	stopTap()
	smp.take(ctx)
	stopSampler()
	bg.Wait()

	faults, marks := ft.snapshot()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	rep, err := w.check(cctx, prod.snapshot(), faults, tp.events())
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	samples := smp.snapshot()
	verdicts := judge(samples)

	// The log: faults, duplicates by source, curves, failures, problems.
	kinds := map[string]int{}
	faultErrs := 0
	for _, f := range faults {
		kinds[f.kind]++
		if f.err != nil {
			faultErrs++
		}
	}
	var kindList []string
	for k, n := range kinds {
		kindList = append(kindList, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kindList)
	logf("faults: %d of %d kinds (%d with errors): %s; restarts of b: %d", len(faults), len(kinds), faultErrs, strings.Join(kindList, ", "), len(marks))
	dups := map[string]float64{}
	outcomes := map[string]float64{}
	for _, d := range []*daemon{a, b} {
		d.mu.Lock()
		for _, s := range d.stats {
			for k, v := range s.bySource {
				dups[k] += v
			}
			for k, v := range s.byOutcome {
				outcomes[k] += v
			}
		}
		unasked := d.unasked
		d.mu.Unlock()
		for _, u := range unasked {
			rep.problem("daemon %s exited unasked: %s", d.name, u)
		}
	}
	tapEvents, tapCopies := tp.seen()
	logf("duplicates skipped by source (metrics, lower bound): %v; outcomes: %v", dups, outcomes)
	logf("producer: %d events, %d uncertain inserts, %d republished copies; tap: %d events in %d copies",
		len(prod.snapshot()), prod.failures, prod.republished, tapEvents, tapCopies)
	logf("checked %d events and %d chained invoices in %d (event, service) applications: twice %d, lost %d, wrong %d, out of order %d; failures explained %d, unexplained %d; tap: %d missing, %d unknown",
		rep.events, rep.chain, rep.applications, rep.twice, rep.lost, rep.wrong, rep.outOfOrder, rep.failuresExplained, rep.failuresUnexplained,
		rep.tapMissing, rep.tapUnknown)
	var leaks []string
	for _, v := range verdicts {
		state := "flat"
		if v.growing {
			state = "GROWING"
			leaks = append(leaks, v.name)
		}
		logf("curve %-16s %s: slope %+.3f%s/min over the last two thirds (%d points), growth %.1f, step %+.1f, tolerance %.1f, median %.1f",
			v.name, state, v.slopePerMin, v.unit, v.points, v.growth, v.step, v.tol, v.median)
	}
	for _, p := range rep.problems {
		logf("PROBLEM %s", p)
	}
	if err := writeCSV(filepath.Join(w.dir, "curves.csv"), samples); err != nil {
		logf("curves.csv: %v", err)
	}
	leakText := "none"
	if len(leaks) > 0 {
		leakText = strings.Join(leaks, " ")
	}
	summary := fmt.Sprintf("soak: %s, faults: %d (kinds: %d), events: %d, applied twice: %d, lost: %d, leaks: %s",
		dur, len(faults), len(kinds), rep.events+rep.chain, rep.twice, rep.lost, leakText)
	svgPath := filepath.Join(w.dir, "soak.svg")
	if err := writeSVG(svgPath, samples, faults, marks, verdicts, summary); err != nil {
		logf("soak.svg: %v", err)
	} else {
		logf("picture: %s", svgPath)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "summary.txt"), []byte(summary+"\n"), 0o644); err != nil {
		logf("summary: %v", err)
	}
	if !drainedOK {
		t.Errorf("not drained after the run: %s", left)
	}
	if rep.twice > 0 || rep.lost > 0 || rep.wrong > 0 || rep.outOfOrder > 0 || rep.failuresUnexplained > 0 || len(rep.problems) > 0 {
		t.Errorf("checker: %d problems (see PROBLEM lines)", len(rep.problems))
	}
	if len(leaks) > 0 {
		t.Errorf("leaks: %s (curves in %s)", leakText, svgPath)
	}
	t.Log(summary)
}
