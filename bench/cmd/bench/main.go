// Command bench measures platformd against its alternatives on the local
// PostgreSQL and RabbitMQ (`make bench`; docs/performance.md explains the
// method). In one run it pre-loads the same workload into a durable queue
// per contender and measures each contender draining it, in turns, for
// several rounds: messages per second (median and spread), effects checked
// exactly once, the CPU split between broker, database and consumer, the
// consumer's peak RSS, and publish-to-commit latency at a fixed rate. It
// prints a table and writes a JSON report and an SVG chart under results/.
//
// The contenders: raw (consume and ack, no database), the seed port (the
// article's one transaction per message, N workers), peer (a Watermill
// router, built from bench/peer, its own Go module), and platformd as the
// shop's daemon built from ./examples/shop/cmd/shopd (the release binary,
// ./cmd/platformd, plus the shop's Go handlers the workloads need) with
// batch size 1, with its default batch, and with the dedup insert switched
// off.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/tracing/tracingtest"
)

// roleArg as the first argument makes the bench binary run as one of its
// own contenders (raw, seed) or as a profiled platformd.
const roleArg = "__role"

type options struct {
	events      int
	dupShare    float64
	order       string
	lines       int
	rounds      int
	slowRounds  int
	contenders  string
	queueType   string
	amqpURL     string
	databaseURL string
	out         string
	seed        uint64

	workers   int
	prefetch  int
	batch     int
	batchWait time.Duration
	bigBatch  int
	bigWait   time.Duration

	rawConsumers, rawPrefetch, rawAckEvery int

	latencyRate     int
	latencyDuration time.Duration
	latencyWarmup   time.Duration

	loadChannels int
	settle       time.Duration
	poll         time.Duration
	checkpoint   bool
	drainTimeout time.Duration
	keep         bool
	platformdBin string
	pprofDir     string
	strict       bool
	retries      int
	trace        bool
	probe        string
	altBin       string
	rerender     string
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.events, "events", 100000, "distinct order events in the workload")
	fs.Float64Var(&o.dupShare, "dup", 0.10, "share of the events delivered twice (0..1)")
	fs.StringVar(&o.order, "order", orderShuffled, "message order: shuffled (copies anywhere, ids in random order) or producer (as outbox relays publish: ids ascending, each copy 1 to 1,000 messages after its original, so copies often meet their original in flight in another worker)")
	fs.IntVar(&o.lines, "lines", 1, "lines per order (one reservation row each)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each contender drains once per round, in turns")
	fs.IntVar(&o.slowRounds, "slow-rounds", 2, "rounds of the one-commit-per-message contenders (seed, peer, platformd-b1): the first min(rounds, slow-rounds); their drains take minutes and vary little")
	fs.StringVar(&o.contenders, "contenders", "raw,seed,peer,platformd-b1,platformd,platformd-nodedup,platformd-big,floor,floor-nodedup", "comma-separated subset of contenders (also platformd-alt, platformd-ceiling, platformd-otel, platformd-otel10, platformd-part, platformd-sql, platformd-remote)")
	fs.StringVar(&o.queueType, "queue-type", "quorum", "type of every bench queue: quorum (platformd's default) or classic")
	fs.StringVar(&o.amqpURL, "amqp-url", envOr("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL (default $TEST_AMQP_URL)")
	fs.StringVar(&o.databaseURL, "database-url", envOr("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
		"PostgreSQL URL of a maintenance database; the bench creates and drops its own database beside it (default $TEST_DATABASE_URL)")
	fs.StringVar(&o.out, "out", "results", "directory for the JSON report and the chart")
	fs.Uint64Var(&o.seed, "seed", 1, "workload random seed")
	fs.IntVar(&o.workers, "workers", 4, "consumers of seed and peer, platformd's pool concurrency (the sample's)")
	fs.IntVar(&o.prefetch, "prefetch", 0, "platformd pool prefetch (0: unset, derived by each binary as a user's would be); seed and peer get prefetch/workers per worker (0: the one this build derives)")
	fs.IntVar(&o.batch, "batch", 0, "platformd's batch.size (0: unset, each binary's own default, as a user's would be; the floor then runs this build's default)")
	fs.DurationVar(&o.batchWait, "batch-wait", 5*time.Millisecond, "platformd's batch.wait")
	fs.IntVar(&o.bigBatch, "big-batch", 1000, "platformd-big's batch.size (its prefetch is 8 times that)")
	fs.DurationVar(&o.bigWait, "big-wait", 20*time.Millisecond, "platformd-big's batch.wait")
	fs.IntVar(&o.rawConsumers, "raw-consumers", 2, "raw: channels consuming in parallel")
	fs.IntVar(&o.rawPrefetch, "raw-prefetch", 2000, "raw: prefetch per channel")
	fs.IntVar(&o.rawAckEvery, "raw-ack-every", 250, "raw: multiple-ack every this many deliveries (and whenever none is waiting)")
	fs.IntVar(&o.latencyRate, "latency-rate", 1000, "latency phase: publish rate, msgs/s")
	fs.DurationVar(&o.latencyDuration, "latency-duration", 10*time.Second, "latency phase: measured time per contender (0 skips the phase)")
	fs.DurationVar(&o.latencyWarmup, "latency-warmup", 2*time.Second, "latency phase: warm-up before measuring")
	fs.IntVar(&o.loadChannels, "load-channels", 4, "channels publishing the workload in parallel")
	fs.DurationVar(&o.settle, "settle", time.Second, "pause between loading a queue and starting its contender")
	fs.DurationVar(&o.poll, "poll", 10*time.Millisecond, "queue depth polling period (the drain time's resolution)")
	fs.BoolVar(&o.checkpoint, "checkpoint", true, "CHECKPOINT and sync(2) before each drain and latency phase so no contender pays for the previous one's dirty pages")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Minute, "give up on a drain after this long")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench database and queues")
	fs.StringVar(&o.platformdBin, "platformd-bin", "", "platformd binary to run, one with the shop's handlers (default: built from ./examples/shop/cmd/shopd)")
	fs.StringVar(&o.pprofDir, "pprof", "", "run platformd as daemon.Main inside the bench binary with CPU and allocation profiles written to this directory")
	fs.BoolVar(&o.strict, "strict", false, "exit 3 when a target is missed")
	fs.StringVar(&o.probe, "commit-probe", probePoll, "how the latency phase sees commits: poll (a trigger-fed table read every 2 ms) or notify (LISTEN/NOTIFY, which serialises commits)")
	fs.StringVar(&o.altBin, "alt-bin", "", "a second platformd binary, run as contender platformd-alt (add it to -contenders): A/B of a change in one run")
	fs.StringVar(&o.rerender, "report", "", "print the table of an earlier JSON report, its targets judged again, and redraw its chart beside it (nothing is measured)")
	fs.BoolVar(&o.trace, "trace", false, "print every queue poll of the drains (debugging)")
	fs.IntVar(&o.retries, "retries", 2, "measure a drain again, up to this many times, when it fails for a reason other than an exactly-once check (a restart of the shared services)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.queueType != "quorum" && o.queueType != "classic" {
		return nil, fmt.Errorf("-queue-type: quorum or classic, not %q", o.queueType)
	}
	if o.probe != probePoll && o.probe != probeNotify {
		return nil, fmt.Errorf("-commit-probe: poll or notify, not %q", o.probe)
	}
	if o.rounds < 1 || o.slowRounds < 1 || o.workers < 1 || o.latencyRate < 1 || o.poll <= 0 {
		return nil, errors.New("-rounds, -workers, -latency-rate and -poll must be positive")
	}
	if o.batch < 0 || o.prefetch < 0 {
		return nil, errors.New("-batch and -prefetch must be 0 (unset) or positive")
	}
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 2 && os.Args[1] == roleArg {
		os.Exit(runRole(ctx, os.Args[2], os.Args[3:]))
	}
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.rerender != "" {
		if err := rerender(o.rerender); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	code, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "\nbench: FAILED:", err)
	}
	os.Exit(code)
}

func runRole(ctx context.Context, role string, args []string) int {
	var err error
	switch role {
	case "raw":
		err = runRaw(ctx, args)
	case "seed":
		err = runSeed(ctx, args)
	case "floor":
		err = runFloor(ctx, args)
	case "remote-handler":
		err = runRemoteHandler(ctx, args)
	case "platformd":
		return runProfiledPlatformd(args) //nolint:contextcheck // daemon.Main owns its signal context, as in the shop's daemon
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		return 1
	}
	return 0
}

// bench is one run.
type bench struct {
	o        *options
	runID    string
	exchange string
	tmp      string
	self     string
	bins     map[string]string
	brk      *broker
	db       *benchDB
	partDB   *benchDB // the partitioned contenders' database (nil without one)
	wl       *workload
	otlp     *tracingtest.Receiver // platformd-otel's collector
	// remoteURL and remoteCmd are the platformd-remote contender's
	// handler, started at its first run (role_remote.go).
	remoteURL string
	remoteCmd *exec.Cmd
}

// dbFor is the database contender c works on: the partitioned
// processed_event contenders have their own (platformd converts its empty
// table at start).
func (b *bench) dbFor(c contender) *benchDB {
	if c.Partitioned {
		return b.partDB
	}
	return b.db
}

func (b *bench) queueOf(c contender) string { return "bench_" + b.runID + "_" + c.Name }

// run returns the exit code: 0, 1 on failure (an exactly-once check
// included), 3 with -strict when a target is missed.
func run(ctx context.Context, o *options) (int, error) {
	var selected []contender
	all := contenders(o)
	for name := range strings.SplitSeq(o.contenders, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(all, func(c contender) bool { return c.Name == name })
		if i < 0 {
			return 2, fmt.Errorf("unknown contender %q", name)
		}
		c := all[i]
		if c.Alt && o.altBin == "" {
			return 2, errors.New("contender platformd-alt needs -alt-bin")
		}
		selected = append(selected, c)
	}
	idb := make([]byte, 4)
	_, _ = rand.Read(idb)
	b := &bench{o: o, runID: hex.EncodeToString(idb), bins: map[string]string{}}
	b.exchange = "bench_" + b.runID
	rep := &report{Started: time.Now(), Settings: map[string]any{
		"queue_type": o.queueType, "rounds": o.rounds, "slow_rounds": min(o.slowRounds, o.rounds), "workers": o.workers, "prefetch": o.prefetch,
		"batch": o.batch, "batch_wait": o.batchWait.String(), "big_batch": o.bigBatch, "big_wait": o.bigWait.String(), "raw_consumers": o.rawConsumers,
		"raw_prefetch": o.rawPrefetch, "raw_ack_every": o.rawAckEvery, "latency_rate": o.latencyRate,
		"latency_duration": o.latencyDuration.String(), "settle": o.settle.String(), "poll": o.poll.String(),
		"checkpoint": o.checkpoint, "contenders": o.contenders, "commit_probe": o.probe,
	}}
	var err error
	if b.self, err = os.Executable(); err != nil {
		return 1, err
	}
	if b.tmp, err = os.MkdirTemp("", "platformd-bench-"); err != nil {
		return 1, err
	}
	fmt.Printf("bench %s: logs and generated configs in %s\n", b.runID, b.tmp)
	rep.Machine = machine()

	if err := b.build(ctx, selected); err != nil {
		return 1, err
	}
	if err := b.startOTLP(ctx, selected); err != nil {
		return 1, err
	}
	defer b.stopOTLP()
	if b.brk, err = dialBroker(o.amqpURL, o.queueType); err != nil {
		return 1, err
	}
	defer b.brk.close()
	rep.Machine.RabbitMQ = b.brk.version()
	b.db, err = createBenchDB(ctx, o.databaseURL, "bench_"+b.runID)
	defer b.cleanup(context.WithoutCancel(ctx), selected)
	defer b.stopRemoteHandler()
	if err != nil {
		return 1, err
	}
	rep.Machine.PostgreSQL, rep.Machine.PGSettings = b.pgInfo(ctx)
	if slices.ContainsFunc(selected, func(c contender) bool { return c.Partitioned }) {
		b.partDB, err = createBenchDB(ctx, o.databaseURL, "bench_"+b.runID+"_part")
		if err != nil {
			return 1, err
		}
	}

	if b.wl, err = newWorkload(o.events, o.dupShare, o.lines, o.seed, o.order); err != nil {
		return 2, err
	}
	rep.Workload = map[string]any{"events": b.wl.distinct, "duplicates": b.wl.dups(), "messages": b.wl.total(), "lines": b.wl.lines,
		"dup_share": o.dupShare, "order": o.order, "body_bytes": len(b.wl.bodies[0])}
	fmt.Printf("workload: %d events + %d duplicates = %d messages of ~%d bytes in %s order; %d round(s) of %d contender(s), %s queues\n",
		b.wl.distinct, b.wl.dups(), b.wl.total(), len(b.wl.bodies[0]), o.order, o.rounds, len(selected), o.queueType)

	reports := make([]*contenderReport, len(selected))
	for i, c := range selected {
		reports[i] = &contenderReport{contender: c}
		if c.Kind == kindPlatformd {
			_, reports[i].Mode = b.platformdCommand(c, o.pprofDir)
		}
	}
	rep.Contenders = reports
	for round := 1; round <= o.rounds; round++ {
		// Rotate the order each round so that no contender always runs
		// right after the same other one.
		for k := range selected {
			i := (k + round - 1) % len(selected)
			c := selected[i]
			if c.PerMessage && round > o.slowRounds {
				continue
			}
			res, err := measure(ctx, o, fmt.Sprintf("round %d/%d %-18s ", round, o.rounds, c.Name), &reports[i].Retries,
				func() (drainResult, error) { return b.drain(ctx, c, round) })
			if err != nil {
				return 1, err
			}
			reports[i].Rounds = append(reports[i].Rounds, res)
			fmt.Printf("%8.0f msgs/s  %6.2fs  cpu broker %5.1fs db %5.1fs consumer %5.1fs other %4.1fs  rss %4.0f MiB  load %.1f  (loaded at %.0f/s)\n",
				res.MsgsPerSec, res.Seconds, res.CPUBroker, res.CPUDB, res.CPUConsumer, res.CPUOther,
				float64(res.PeakRSS)/(1<<20), res.LoadAvg, res.LoadPerSec)
		}
	}
	if o.latencyDuration > 0 {
		for i, c := range selected {
			lr, err := measure(ctx, o, fmt.Sprintf("latency %-18s at %d msgs/s for %s: ", c.Name, o.latencyRate, o.latencyDuration), &reports[i].Retries,
				func() (latencyResult, error) { return b.latency(ctx, c) })
			if err != nil {
				return 1, err
			}
			reports[i].Latency = &lr
			fmt.Printf("p50 %.1f ms  p99 %.1f ms  p99.9 %.1f ms  max %.1f ms (%d samples, %s)\n",
				lr.P50ms, lr.P99ms, lr.P999ms, lr.MaxMs, lr.Samples, lr.Measure)
		}
	}
	for _, r := range reports {
		r.summarize()
	}
	rep.Finished = time.Now()
	rep.Machine.LoadAvgEnd = procstat.LoadAvg()
	rep.computeRatios()
	rep.printTable(os.Stdout)
	jsonPath, svgPath, err := rep.write(o.out)
	if err != nil {
		return 1, err
	}
	fmt.Printf("\nwrote %s and %s\n", jsonPath, svgPath)
	if o.strict {
		for _, q := range rep.Ratios {
			if !q.Met {
				return 3, nil
			}
		}
	}
	return 0, nil
}

// shopdPkg is the package the platformd contenders run: the shop's
// daemon, the release daemon with the shop's Go handlers registered.
const shopdPkg = "./examples/shop/cmd/shopd"

// build compiles the peer (its own module) and platformd.
func (b *bench) build(ctx context.Context, selected []contender) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	goCmd := envOr("GO", "go")
	need := map[string]bool{}
	for _, c := range selected {
		need[c.Kind] = true
	}
	if need[kindPeer] {
		out := filepath.Join(b.tmp, "peer")
		fmt.Println("building bench/peer (Watermill, its own module)...")
		cmd := exec.CommandContext(ctx, goCmd, "build", "-o", out, ".")
		cmd.Dir = filepath.Join(root, "bench", "peer")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build bench/peer: %w\n%s", err, msg)
		}
		b.bins["peer"] = out
	}
	// Built even with -pprof: only the drains run profiled, the latency
	// phase runs the binary. The shop's daemon: the workloads run the
	// shop's Go handlers, which the release binary does not register (it
	// runs the SQL and remote contenders' configs as well).
	if need[kindPlatformd] && b.o.platformdBin == "" {
		out := filepath.Join(b.tmp, "platformd")
		fmt.Println("building " + shopdPkg + "...")
		cmd := exec.CommandContext(ctx, goCmd, "build", "-o", out, shopdPkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", shopdPkg, err, msg)
		}
		b.bins["platformd"] = out
	}
	// The no-dedup contender is a build of its own: the shipped binary
	// has no way to skip the dedup insert.
	if slices.ContainsFunc(selected, func(c contender) bool { return c.Kind == kindPlatformd && c.SkipDedup }) {
		out := filepath.Join(b.tmp, "platformd-nodedup")
		fmt.Println("building " + shopdPkg + " with -tags platformd_nodedup...")
		cmd := exec.CommandContext(ctx, goCmd, "build", "-tags", "platformd_nodedup", "-o", out, shopdPkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s -tags platformd_nodedup: %w\n%s", shopdPkg, err, msg)
		}
		b.bins["platformd-nodedup"] = out
	}
	if b.o.pprofDir != "" {
		if err := os.MkdirAll(b.o.pprofDir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// measure prints label and runs fn, and runs it again after a pause, up to
// -retries times, while it fails for a reason other than an exactly-once
// check: not the contender's fault as far as we know (the shared
// PostgreSQL or RabbitMQ restarted, say). retries counts the runs again.
func measure[T any](ctx context.Context, o *options, label string, retries *int, fn func() (T, error)) (T, error) {
	fmt.Print(label)
	v, err := fn()
	for try := 1; err != nil && !errors.Is(err, errExactlyOnce) && ctx.Err() == nil && try <= o.retries; try++ {
		fmt.Printf("disrupted (%v); again in 10s\n", firstLine(err))
		sleepCtx(ctx, 10*time.Second)
		fmt.Print(label)
		v, err = fn()
		*retries++
	}
	if err != nil {
		fmt.Println()
	}
	return v, err
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// repoRoot finds the directory of platformd's go.mod from the working
// directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			strings.Contains(string(data), "module github.com/platformd/platformd\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the bench from inside the platformd repository")
		}
		dir = parent
	}
}

// cleanup stops nothing (drains stop their contenders) but deletes the
// run's queues, exchange and database.
func (b *bench) cleanup(ctx context.Context, selected []contender) {
	if b.o.keep {
		fmt.Printf("kept database %s and queues bench_%s_*\n", "bench_"+b.runID, b.runID)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if b.brk != nil {
		var queues []string
		for _, c := range selected {
			// The retry delay queues are shared by every pool of the
			// vhost: they stay.
			queues = append(queues, b.queueOf(c))
		}
		if err := b.brk.deleteQueues(queues...); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cleanup:", err)
		}
		_ = b.brk.deleteExchange(b.exchange)
	}
	for _, db := range []*benchDB{b.db, b.partDB} {
		if db != nil {
			if err := db.drop(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "bench: cleanup: drop database:", err)
			}
		}
	}
	_ = os.RemoveAll(filepath.Join(b.tmp, "peer"))
	_ = os.RemoveAll(filepath.Join(b.tmp, "platformd"))
}

func (b *bench) pgInfo(ctx context.Context) (version, settings string) {
	var v string
	_ = b.db.pool.QueryRow(ctx, "SHOW server_version").Scan(&v)
	var parts []string
	for _, s := range []string{"synchronous_commit", "fsync", "shared_buffers", "max_wal_size", "wal_level"} {
		var val string
		if err := b.db.pool.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&val); err == nil {
			parts = append(parts, s+"="+val)
		}
	}
	return v, strings.Join(parts, " ")
}

func machine() machineInfo {
	m := machineInfo{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: procstat.LoadAvg()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		for line := range strings.SplitSeq(string(b), "\n") {
			if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
				m.MemTotalMiB = kb / 1024
				break
			}
		}
	}
	return m
}
