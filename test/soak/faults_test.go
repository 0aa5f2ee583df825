package soak

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// fault is one fault of the run, for the log, the checker and the
// picture.
type fault struct {
	kind       string
	start, end time.Time
	detail     string
	err        error
}

// faultKinds is the catalogue; faulter.next draws from a shuffled bag of
// it (refilled when empty), so that any 17 faults in a row are 17 kinds.
var faultKinds = []string{
	"daemon-sigkill", "daemon-sigterm", "daemon-reload", "pg-restart", "pg-terminate",
	"node-stop", "node-kill", "node-partition", "acks-lost", "connections-closed",
	"remote-down", "remote-slow", "remote-500", "purge", "replay", "failed-retry", "pool-pause",
}

type faulter struct {
	w     *world
	rng   *mrand.Rand
	a, b  *daemon
	logf  func(format string, args ...any)
	bag   []string
	conc  int // daemon a's stock concurrency, changed by each reload
	t0    time.Time
	rngMu sync.Mutex

	mu     sync.Mutex
	faults []fault
	marks  []fault // the restarts of daemon b besides the faults
}

func (f *faulter) intn(n int) int {
	f.rngMu.Lock()
	defer f.rngMu.Unlock()
	return f.rng.IntN(n)
}

// between is a random duration in [lo, hi).
func (f *faulter) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(f.intn(int(hi-lo)))
}

func (f *faulter) next() string {
	if len(f.bag) == 0 {
		f.bag = append([]string(nil), faultKinds...)
		f.rngMu.Lock()
		f.rng.Shuffle(len(f.bag), func(i, j int) { f.bag[i], f.bag[j] = f.bag[j], f.bag[i] })
		f.rngMu.Unlock()
	}
	k := f.bag[0]
	f.bag = f.bag[1:]
	return k
}

// run injects a fault every 20-40 s, start to start (at once after one
// that outlasted its gap), until ctx ends.
func (f *faulter) run(ctx context.Context) {
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(last.Add(f.between(20*time.Second, 40*time.Second)))):
		}
		last = time.Now()
		if ctx.Err() != nil {
			return
		}
		kind := f.next()
		ft := fault{kind: kind, start: time.Now()}
		ft.detail, ft.err = f.inject(ctx, kind)
		ft.end = time.Now()
		f.mu.Lock()
		f.faults = append(f.faults, ft)
		f.mu.Unlock()
		status := "ok"
		if ft.err != nil {
			status = "error: " + ft.err.Error()
		}
		f.logf("fault %-18s %s (%s, %.1fs)", kind, ft.detail, status, ft.end.Sub(ft.start).Seconds())
	}
}

// restartB restarts daemon b every 45-75 s (SIGTERM and SIGKILL in turn):
// the daemon that is "restarted often".
func (f *faulter) restartB(ctx context.Context) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.between(45*time.Second, 75*time.Second)):
		}
		sig := syscall.SIGTERM
		if i%2 == 1 {
			sig = syscall.SIGKILL
		}
		m := fault{kind: "b-restart", start: time.Now(), detail: sig.String()}
		m.err = f.bounce(ctx, f.b, sig, time.Second)
		m.end = time.Now()
		f.mu.Lock()
		f.marks = append(f.marks, m)
		f.mu.Unlock()
		if m.err != nil {
			f.logf("restart of b (%v): %v", sig, m.err)
		}
	}
}

// bounce signals d and starts it again after pause.
func (f *faulter) bounce(ctx context.Context, d *daemon, sig syscall.Signal, pause time.Duration) error {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	var errs []error
	if d.running() {
		errs = append(errs, d.signal(sig))
	}
	select {
	case <-ctx.Done():
	case <-time.After(pause):
	}
	errs = append(errs, d.start(context.WithoutCancel(ctx)))
	return errors.Join(errs...)
}

// daemon picks a daemon: b twice as often as a.
func (f *faulter) daemon() *daemon {
	if f.intn(3) == 0 {
		return f.a
	}
	return f.b
}

// call runs an admin RPC on a running daemon (the other on failure).
func (f *faulter) call(ctx context.Context, first *daemon, fn func(ctx context.Context, c adminv1.AdminServiceClient) error) error {
	var last error
	for _, d := range []*daemon{first, f.other(first)} {
		if !d.running() {
			continue
		}
		cctx, cancel := f.w.adminCtx(ctx)
		last = fn(cctx, d.admin())
		cancel()
		if last == nil {
			return nil
		}
	}
	if last == nil {
		last = errors.New("no daemon running")
	}
	return last
}

func (f *faulter) other(d *daemon) *daemon {
	if d == f.a {
		return f.b
	}
	return f.a
}

func (f *faulter) wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// inject runs one fault of kind to its end (what it broke restored).
func (f *faulter) inject(runCtx context.Context, kind string) (string, error) {
	w := f.w
	// A fault that the run's end interrupts still restores what it broke:
	// only its waits end with the run.
	ctx := context.WithoutCancel(runCtx)
	switch kind {
	case "daemon-sigkill", "daemon-sigterm":
		d := f.daemon()
		sig := syscall.SIGKILL
		if kind == "daemon-sigterm" {
			sig = syscall.SIGTERM
		}
		return "daemon " + d.name, f.bounce(runCtx, d, sig, f.between(time.Second, 5*time.Second))
	case "daemon-reload":
		f.a.opMu.Lock()
		defer f.a.opMu.Unlock()
		f.conc = 5 - f.conc // 3 <-> 2
		f.a.writeConfig(f.conc)
		if !f.a.running() {
			return "daemon a down", f.a.start(ctx)
		}
		return fmt.Sprintf("daemon a: stock-events concurrency %d", f.conc), f.a.signal(syscall.SIGHUP)
	case "pg-restart":
		return "private PostgreSQL, pg_ctl restart -m fast", w.pgCtl(ctx, "restart", "-m", "fast")
	case "pg-terminate":
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		n, err := w.pgExec(cctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name LIKE 'platformd%'`)
		return fmt.Sprintf("%d sessions", n), err
	case "node-stop", "node-kill":
		n := 1 + f.intn(3)
		w.setOff(n, true)
		_, err := w.script(ctx, kind, strconv.Itoa(n))
		f.wait(runCtx, f.between(8*time.Second, 20*time.Second))
		_, err2 := w.script(ctx, "node-start", strconv.Itoa(n))
		w.setOff(n, false)
		return fmt.Sprintf("node %d", n), errors.Join(err, err2)
	case "node-partition":
		n := 1 + f.intn(3)
		w.setOff(n, true)
		_, err := w.script(ctx, "partition", strconv.Itoa(n))
		f.wait(runCtx, f.between(20*time.Second, 30*time.Second))
		_, err2 := w.script(ctx, "heal")
		w.setOff(n, false)
		return fmt.Sprintf("node %d", n), errors.Join(err, err2)
	case "acks-lost":
		for _, p := range f.a.proxies {
			p.Freeze()
		}
		f.wait(runCtx, f.between(5*time.Second, 10*time.Second))
		for _, p := range f.a.proxies {
			p.Cut()
			p.Heal()
		}
		return "daemon a's broker connections: acks held, then cut", nil
	case "connections-closed":
		_, err := w.ctl(ctx, "close_all_connections", "soak: forced close")
		return "every broker connection", err
	case "remote-down":
		w.remote.stop()
		f.wait(runCtx, f.between(8*time.Second, 15*time.Second))
		return "python handler stopped", w.remote.start()
	case "remote-slow", "remote-500":
		mode := "slow"
		if kind == "remote-500" {
			mode = "500"
		}
		if err := w.remote.setMode(mode); err != nil {
			return "", err
		}
		f.wait(runCtx, f.between(6*time.Second, 12*time.Second))
		return "python handler " + mode, w.remote.setMode("ok")
	case "purge":
		svc := []string{"stock", "shipping", "billing", "ledger"}[f.intn(4)]
		var got *adminv1.RunPurgeResponse
		err := f.call(ctx, f.daemon(), func(ctx context.Context, c adminv1.AdminServiceClient) error {
			var err error
			got, err = c.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: svc})
			return err
		})
		return fmt.Sprintf("service %s: deleted %d", svc, got.GetRun().GetDeleted()), err
	case "replay":
		var got *adminv1.ReplayEventsResponse
		now := time.Now()
		err := f.call(ctx, f.daemon(), func(ctx context.Context, c adminv1.AdminServiceClient) error {
			var err error
			got, err = c.ReplayEvents(ctx, &adminv1.ReplayEventsRequest{Service: "order", EventNames: []string{evPlaced},
				From: timestamppb.New(now.Add(-3 * time.Minute)), To: timestamppb.New(now.Add(-30 * time.Second)), Rate: 100})
			return err
		})
		return fmt.Sprintf("order's placed events of 3m-30s ago: %d matched", got.GetReplay().GetMatched()), err
	case "failed-retry":
		var got *adminv1.RetryFailedEventsResponse
		err := f.call(ctx, f.daemon(), func(ctx context.Context, c adminv1.AdminServiceClient) error {
			var err error
			got, err = c.RetryFailedEvents(ctx, &adminv1.RetryFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Service: "billing", State: "failed"}})
			return err
		})
		return fmt.Sprintf("billing's failures: %d selected", got.GetRetry().GetSelected()), err
	case "pool-pause":
		pool := []string{poolStock, poolShipping, poolBilling, poolInvoices}[f.intn(4)]
		by := f.daemon()
		err := f.call(ctx, by, func(ctx context.Context, c adminv1.AdminServiceClient) error {
			_, err := c.PausePool(ctx, &adminv1.PausePoolRequest{Pool: pool, Reason: "soak"})
			return err
		})
		f.wait(runCtx, f.between(5*time.Second, 10*time.Second))
		err2 := f.call(ctx, f.other(by), func(ctx context.Context, c adminv1.AdminServiceClient) error {
			_, err := c.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: pool})
			return err
		})
		return fmt.Sprintf("%s paused through %s, resumed through %s", pool, by.name, f.other(by).name), errors.Join(err, err2)
	}
	return "", fmt.Errorf("unknown fault %q", kind)
}

// healAll leaves everything running: nodes up and joined, PostgreSQL up,
// the handler answering, both daemons running, every pool resumed.
func (f *faulter) healAll(ctx context.Context) error {
	w := f.w
	var errs []error
	if _, err := w.script(ctx, "heal"); err != nil {
		errs = append(errs, err)
	}
	for n := 1; n <= 3; n++ {
		if _, err := w.script(ctx, "node-start", strconv.Itoa(n)); err != nil {
			errs = append(errs, err)
		}
		w.setOff(n, false)
	}
	if err := w.pgCtl(ctx, "status"); err != nil {
		errs = append(errs, w.pgCtl(ctx, "start"))
	}
	errs = append(errs, w.remote.setMode("ok"), w.remote.start())
	for _, p := range f.a.proxies {
		p.Heal()
	}
	for _, d := range []*daemon{f.a, f.b} {
		d.opMu.Lock()
		errs = append(errs, d.start(ctx))
		d.opMu.Unlock()
	}
	for _, pool := range []string{poolStock, poolShipping, poolBilling, poolInvoices, poolLedgerSeq} {
		d := f.a
		err := f.call(ctx, d, func(ctx context.Context, c adminv1.AdminServiceClient) error {
			_, err := c.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: pool})
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("resume %s: %w", pool, err))
		}
	}
	return errors.Join(errs...)
}

func (f *faulter) snapshot() (faults, marks []fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fault(nil), f.faults...), append([]fault(nil), f.marks...)
}
