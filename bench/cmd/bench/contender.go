package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/metrics"
)

// Contender kinds.
const (
	kindRaw       = "raw"
	kindSeed      = "seed"
	kindPeer      = "peer"
	kindPlatformd = "platformd"
	kindFloor     = "floor"
)

// contender is one way of draining the queue.
type contender struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Batch is platformd's batch.size (and floor's).
	Batch int `json:"batch,omitempty"`
	// Prefetch and Wait are the pool's prefetch and batch.wait; zero:
	// -prefetch and -batch-wait.
	Prefetch int           `json:"prefetch,omitempty"`
	Wait     time.Duration `json:"wait,omitempty"`
	// SkipDedup runs platformd built with tag platformd_nodedup (no
	// dedup insert) or, for the floor, its loop without the insert.
	SkipDedup bool `json:"skip_dedup,omitempty"`
	// Alt runs the binary given with -alt-bin instead (A/B of a change).
	Alt bool `json:"alt,omitempty"`
	// SQL runs the stock effect through the SQL handler of
	// examples/shop-sql instead of the shop's Go batch handler.
	SQL bool `json:"sql,omitempty"`
	// Remote runs the stock effect through a remote handler served by the
	// bench's small Go HTTP server (role_remote.go).
	Remote bool `json:"remote,omitempty"`
	// Partitioned runs platformd on a partitioned processed_event
	// (processed_event: {partitions: daily}), in a database of its own.
	Partitioned bool `json:"partitioned,omitempty"`
	// PerMessage marks the contenders that commit once per message: their
	// drains are long (they integrate the machine's noise over minutes),
	// so they run in the first -slow-rounds rounds only.
	PerMessage bool `json:"per_message,omitempty"`
	// TraceRatio, when positive, runs platformd with traces on at this
	// sampler ratio (tracing.go).
	TraceRatio float64 `json:"trace_ratio,omitempty"`
	Desc       string  `json:"desc"`
}

// dedup reports whether the contender must apply each event exactly once.
func (c contender) dedup() bool { return c.Kind != kindRaw && !c.SkipDedup }

// prefetch is the pool's prefetch for c (all workers together); 0 leaves
// it unset in platformd's config, for the daemon to derive.
func (c contender) prefetch(o *options) int { return cmp.Or(c.Prefetch, o.prefetch) }

// perWorkerPrefetch is c's prefetch split across -workers channels (seed,
// peer and floor consume on one channel per worker); unset, the prefetch
// this build's daemon would run a pool of -workers with at the default
// body limit.
func (c contender) perWorkerPrefetch(o *options) int {
	total := c.prefetch(o)
	if total == 0 {
		pool := config.PoolConfig{Concurrency: o.workers, MaxUnackedBytes: config.MaxUnackedBytesDefault,
			Prefetch: config.DerivedPrefetch(o.workers, cmp.Or(c.Batch, config.BatchSizeDefault))}
		total, _ = pool.PrefetchFor(config.MaxBodyBytesDefault)
	}
	return max(total/o.workers, 1)
}

// batchDesc names c's batch.size for the report: unset means the
// binary's own default.
func batchDesc(batch int) string {
	if batch == 0 {
		return fmt.Sprintf("batch.size and prefetch unset (this build's defaults: %d, prefetch derived and capped by max_unacked_bytes)", config.BatchSizeDefault)
	}
	return fmt.Sprintf("batch.size %d", batch)
}

// wait is the pool's batch.wait for c.
func (c contender) wait(o *options) time.Duration { return cmp.Or(c.Wait, o.batchWait) }

// reportsDone reports whether the contender prints "DONE <ns>" once it has
// acked every message (the drain's end instant).
func (c contender) reportsDone() bool { return c.Kind == kindRaw || c.Kind == kindFloor }

func contenders(o *options) []contender {
	floorBatch := cmp.Or(o.batch, config.BatchSizeDefault)
	return append([]contender{
		{Name: "raw", Kind: kindRaw, Desc: fmt.Sprintf("consume+ack, no database (%d channels, prefetch %d, multiple-ack every %d)", o.rawConsumers, o.rawPrefetch, o.rawAckEvery)},
		{Name: "seed", Kind: kindSeed, PerMessage: true, Desc: fmt.Sprintf("seed port: 1 transaction per message, %d workers", o.workers)},
		{Name: "peer", Kind: kindPeer, PerMessage: true, Desc: fmt.Sprintf("Watermill router + AMQP subscriber, 1 transaction per message, %d handlers", o.workers)},
		{Name: "platformd-b1", Kind: kindPlatformd, Batch: 1, PerMessage: true, Desc: "platformd as shipped, batch.size 1"},
		{Name: "platformd", Kind: kindPlatformd, Batch: o.batch, Desc: "platformd as shipped, " + batchDesc(o.batch)},
		{Name: "platformd-nodedup", Kind: kindPlatformd, Batch: o.batch, SkipDedup: true,
			Desc: fmt.Sprintf("platformd, %s, dedup insert OFF (bench-only switch)", batchDesc(o.batch))},
		{Name: "platformd-big", Kind: kindPlatformd, Batch: o.bigBatch, Prefetch: 8 * o.bigBatch, Wait: o.bigWait,
			Desc: fmt.Sprintf("platformd tuned for throughput: batch.size %d, batch.wait %s, prefetch %d", o.bigBatch, o.bigWait, 8*o.bigBatch)},
		{Name: "platformd-ceiling", Kind: kindPlatformd, Batch: o.bigBatch, Prefetch: 2 * o.workers * o.bigBatch,
			Desc: fmt.Sprintf("the sample's batch.wait %s with batch.size %d as the ceiling (batches as big as the backlog below it) and prefetch as an unset one defaults (%d: two batches per worker)", o.batchWait, o.bigBatch, 2*o.workers*o.bigBatch)},
		{Name: "floor", Kind: kindFloor, Batch: floorBatch, Desc: fmt.Sprintf("the least a consumer with platformd's effects does: raw's loop, per up to %d deliveries (or what came within batch.wait) decode, one transaction (dedup insert, shop's batch handler), multiple-ack; %d channels", floorBatch, o.workers)},
		{Name: "floor-nodedup", Kind: kindFloor, Batch: floorBatch, SkipDedup: true, Desc: "floor without the dedup insert: every delivery reserves"},
		{Name: "platformd-sql", Kind: kindPlatformd, Batch: o.batch, SQL: true,
			Desc: fmt.Sprintf("platformd as shipped, %s, the stock effect as the SQL handler of examples/shop-sql (one pipeline per batch)", batchDesc(o.batch))},
		{Name: "platformd-remote", Kind: kindPlatformd, Batch: o.batch, Remote: true,
			Desc: fmt.Sprintf("platformd as shipped, %s, the stock effect as a remote handler: one HTTP call per batch to a small Go server of the bench's (its CPU is in other cpu-s), one statement per event", batchDesc(o.batch))},
		{Name: "platformd-part", Kind: kindPlatformd, Batch: o.batch, Partitioned: true,
			Desc: fmt.Sprintf("platformd, %s, processed_event partitioned daily (no processed_at index; own database)", batchDesc(o.batch))},
		{Name: "platformd-alt", Kind: kindPlatformd, Batch: o.batch, Alt: true,
			Desc: fmt.Sprintf("the platformd binary given with -alt-bin, %s (A/B of a change)", batchDesc(o.batch))},
	}, tracedContenders(o)...)
}

// shopRegistry is the registry of the shop's handlers, those every
// contender's platformd runs.
func shopRegistry() (*consumer.Registry, error) {
	reg := consumer.NewRegistry()
	return reg, shop.Register(reg)
}

// shopSQLHandler returns the name of the stock reservation's SQL handler
// in examples/shop-sql/platformd.yaml and its sql_handlers block, to run
// the very statement the example ships. The bench database already holds its
// tables (the shop's migrations).
func shopSQLHandler() (name, block string, err error) {
	root, err := repoRoot()
	if err != nil {
		return "", "", err
	}
	cfg, err := config.Load(filepath.Join(root, "examples", "shop-sql", "platformd.yaml"), nil)
	if err != nil {
		return "", "", fmt.Errorf("examples/shop-sql: %w", err)
	}
	s, _ := cfg.Service("stock")
	i := slices.IndexFunc(s.SQLHandlers, func(h config.SQLHandlerConfig) bool { return h.Name == "stock.reserve_sql" })
	if i < 0 {
		return "", "", errors.New("examples/shop-sql: no SQL handler stock.reserve_sql")
	}
	h := s.SQLHandlers[i]
	var b strings.Builder
	fmt.Fprintf(&b, "    sql_handlers:\n      - name: %s\n        events: [%s]\n        sql:\n", h.Name, strings.Join(h.Events, ", "))
	for _, stmt := range h.Statements() {
		b.WriteString("          - |\n")
		for line := range strings.SplitSeq(strings.TrimRight(stmt, "\n"), "\n") {
			b.WriteString("            " + line + "\n")
		}
	}
	return h.Name, b.String(), nil
}

// proc is a running contender.
type proc struct {
	c          contender
	cmd        *exec.Cmd
	logPath    string
	metricsURL string
	exited     chan struct{}
	exitErr    error
	doneAt     chan int64 // "DONE <ns>" lines (raw)
}

// freePort returns a TCP port free on the loopback right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// platformdConfig writes the daemon's configuration for one run: one
// service, stock, on the bench database, and one pool on queue with the
// sample's concurrency and prefetch.
func (b *bench) platformdConfig(c contender, queue, name string) (path, metricsAddr string, err error) {
	adminPort, err := freePort()
	if err != nil {
		return "", "", err
	}
	metricsPort, err := freePort()
	if err != nil {
		return "", "", err
	}
	metricsAddr = "127.0.0.1:" + strconv.Itoa(metricsPort)
	handler, sqlHandlers := shop.HandlerStockReserve, ""
	if c.SQL {
		if handler, sqlHandlers, err = shopSQLHandler(); err != nil {
			return "", "", err
		}
	}
	if c.Remote {
		url, err := b.remoteHandlerURL()
		if err != nil {
			return "", "", err
		}
		handler, sqlHandlers = remoteHandlerName, remoteHandlerBlock(url)
	}
	cfg := fmt.Sprintf(`# generated by the bench for %s
log: {level: warn, format: text}
admin:
  listen: 127.0.0.1:%d
metrics: {listen: "%s"}
broker: {url: %q, exchange: %s}
services:
  - name: stock
    database: %q
%s    pools:
      - name: bench-stock
        queue: %s
        queue_type: %s
        bindings: [%s]
        handlers: [%s]
        concurrency: %d
%s`, c.Name, adminPort, metricsAddr, b.o.amqpURL, b.exchange, b.dbFor(c).url, sqlHandlers, queue, b.o.queueType,
		shop.EventOrderPlaced, handler, b.o.workers, batchYAML(c.prefetch(b.o), c.Batch, c.wait(b.o)))
	if c.Partitioned {
		cfg += "    processed_event: {partitions: daily}\n"
	}
	path = filepath.Join(b.tmp, name+".yaml")
	return path, metricsAddr, os.WriteFile(path, []byte(cfg), 0o600)
}

// batchYAML is a pool's prefetch and batch keys, each left out when zero
// (unset: the daemon's own default, as in a user's config).
func batchYAML(prefetch, size int, wait time.Duration) string {
	var b strings.Builder
	if prefetch > 0 {
		fmt.Fprintf(&b, "        prefetch: %d\n", prefetch)
	}
	if size > 0 {
		fmt.Fprintf(&b, "        batch: {size: %d, wait: %s}\n", size, wait)
	} else {
		fmt.Fprintf(&b, "        batch: {wait: %s}\n", wait)
	}
	return b.String()
}

// platformdCommand returns the command that runs platformd contender c
// (its arguments follow) and what it is, for the report. profile, the
// prefix of the pprof files, runs daemon.Main in the bench binary with
// profiles on; the alt and no-dedup contenders are never profiled (the
// latter is a build of its own, with tag platformd_nodedup).
func (b *bench) platformdCommand(c contender, profile string) (argv []string, mode string) {
	switch {
	case c.Alt:
		return []string{b.o.altBin}, "binary " + b.o.altBin
	case c.SkipDedup:
		return []string{b.bins["platformd-nodedup"]}, "binary built from " + shopdPkg + " -tags platformd_nodedup"
	case profile != "":
		return []string{b.self, roleArg, "platformd", "-cpuprofile", profile + ".cpu.pprof",
			"-memprofile", profile + ".allocs.pprof", "--"}, "daemon.Main in the bench binary, pprof on (drains)"
	case b.o.platformdBin != "":
		return []string{b.o.platformdBin}, "binary " + b.o.platformdBin
	default:
		return []string{b.bins["platformd"]}, "binary built from " + shopdPkg
	}
}

// start launches c on queue. For raw, expect is the number of acks after
// which it prints DONE (0: never) and latencyFile where it records
// publish-to-ack times. profile names the pprof files of a profiled
// platformd run ("" for none).
func (b *bench) start(c contender, queue, tag string, expect int, latencyFile, profile string) (*proc, error) {
	p := &proc{c: c, exited: make(chan struct{}), doneAt: make(chan int64, 1)}
	var argv []string
	env := os.Environ()
	switch c.Kind {
	case kindRaw:
		argv = []string{b.self, roleArg, "raw", "-amqp", b.o.amqpURL, "-queue", queue,
			"-consumers", strconv.Itoa(b.o.rawConsumers), "-prefetch", strconv.Itoa(b.o.rawPrefetch),
			"-ack-every", strconv.Itoa(b.o.rawAckEvery), "-expect", strconv.Itoa(expect), "-latency-file", latencyFile}
	case kindFloor:
		argv = []string{b.self, roleArg, "floor", "-amqp", b.o.amqpURL, "-db", b.dbFor(c).url, "-queue", queue,
			"-consumers", strconv.Itoa(b.o.workers), "-prefetch", strconv.Itoa(c.perWorkerPrefetch(b.o)),
			"-batch", strconv.Itoa(c.Batch), "-wait", c.wait(b.o).String(), "-dedup=" + strconv.FormatBool(!c.SkipDedup), "-expect", strconv.Itoa(expect)}
	case kindSeed:
		argv = []string{b.self, roleArg, "seed", "-amqp", b.o.amqpURL, "-db", b.dbFor(c).url, "-queue", queue,
			"-workers", strconv.Itoa(b.o.workers), "-prefetch", strconv.Itoa(c.perWorkerPrefetch(b.o))}
	case kindPeer:
		argv = []string{b.bins["peer"], "-amqp", b.o.amqpURL, "-db", b.dbFor(c).url, "-queue", queue,
			"-queue-type", b.o.queueType, "-handlers", strconv.Itoa(b.o.workers), "-prefetch", strconv.Itoa(c.perWorkerPrefetch(b.o))}
	case kindPlatformd:
		cfgPath, metricsAddr, err := b.platformdConfig(c, queue, c.Name+"-"+tag)
		if err != nil {
			return nil, err
		}
		p.metricsURL = "http://" + metricsAddr + "/metrics"
		argv, _ = b.platformdCommand(c, profile)
		argv = append(argv, "run", "-config", cfgPath)
	default:
		return nil, fmt.Errorf("unknown contender kind %q", c.Kind)
	}
	env = b.otelEnv(c, env)
	p.logPath = filepath.Join(b.tmp, c.Name+"-"+tag+".log")
	logFile, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// Own process group (a terminal's ^C reaches the bench only, which
	// stops its children in order); killed if the bench dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	p.cmd = cmd
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line := s.Text()
			if rest, ok := strings.CutPrefix(line, "DONE "); ok {
				if ns, err := strconv.ParseInt(rest, 10, 64); err == nil {
					select {
					case p.doneAt <- ns:
					default:
					}
				}
				continue
			}
			fmt.Fprintln(logFile, line)
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.exitErr = cmd.Wait()
		logFile.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// running reports an error if the process has exited.
func (p *proc) running() error {
	select {
	case <-p.exited:
		if p.exitErr == nil {
			return fmt.Errorf("%s exited early (status 0); see %s:\n%s", p.c.Name, p.logPath, tail(p.logPath, 20))
		}
		return fmt.Errorf("%s exited early (%w); see %s:\n%s", p.c.Name, p.exitErr, p.logPath, tail(p.logPath, 20))
	default:
		return nil
	}
}

// stop sends SIGTERM and waits for the process, killing it after timeout.
func (p *proc) stop(timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.exitError()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitError()
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within %s after SIGTERM; killed (see %s)", p.c.Name, timeout, p.logPath)
	}
}

func (p *proc) exitError() error {
	if p.exitErr == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(p.exitErr, &ee) && ee.ExitCode() == -1 {
		// killed by a signal; SIGTERM handled by the runtime exits 0 or -1
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return fmt.Errorf("%s exited with %w; see %s:\n%s", p.c.Name, p.exitErr, p.logPath, tail(p.logPath, 20))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// saveMetrics writes the metrics page at url to path.
func saveMetrics(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// daemonMetrics is what the bench reads of platformd's metrics.
type daemonMetrics struct {
	// outcomes is platformd_messages_total by outcome.
	outcomes outcomes
	// batches is platformd_batch_size_count: batches run.
	batches float64
}

// outcomes is platformd_messages_total by outcome.
type outcomes map[string]float64

// settled is the deliveries acked as processed or duplicate.
func (o outcomes) settled() float64 {
	return o[metrics.OutcomeProcessed] + o[metrics.OutcomeDuplicate]
}

// scrapeMessages returns platformd_messages_total by outcome and the
// number of batches.
func scrapeMessages(ctx context.Context, url string) (daemonMetrics, error) {
	dm := daemonMetrics{outcomes: outcomes{}}
	err := metrics.Scrape(ctx, http.DefaultClient, url, dm.add)
	return dm, err
}

func parseMetrics(r io.Reader) (daemonMetrics, error) {
	dm := daemonMetrics{outcomes: outcomes{}}
	err := metrics.ParseText(r, dm.add)
	return dm, err
}

// add sums one sample into dm.
func (dm *daemonMetrics) add(name string, labels map[string]string, v float64) {
	switch name {
	case "platformd_messages_total":
		dm.outcomes[labels["outcome"]] += v
	case "platformd_batch_size_count":
		dm.batches += v
	}
}
