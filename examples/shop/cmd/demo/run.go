package main

// This file is the demo's storyline: it prepares the shop, then runs the
// six steps a newcomer reads (build, start, write, drain, replay, check)
// and stops platformd on every exit path.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
)

// headerReplay marks a copy sent again on purpose (docs/contracts.md): its
// duplicates count as source replay.
const headerReplay = "x-replay"

// demo holds what a run needs across its steps.
type demo struct {
	o               options
	out             io.Writer
	cfg             *shopConfig
	cfgPath         string
	plan            *plan
	d               *daemon
	scr             *scraper
	in              *inspector
	stock, shipping *target
	// billing, when the config has it (examples/shop-php), invoices every
	// order through a remote handler.
	billing       *target
	orderDB       *pgxpool.Pool // the producer's database
	writer        *writer
	republished   []int    // outbox rows re-inserted at each simulated relay crash
	past          counters // the counters of the runs already ended
	runs          int
	failedAtStart map[*target]int // rows of state failed per pool before the demo published
	killedAfter   []int           // events processed (all runs) at each SIGKILL
	leftover      int             // messages already waiting when the demo started
	step, steps   int
	started       time.Time
	// proxy, when not nil, relays the broker traffic of the runs the demo
	// kills; proxyEnv is their environment, pointing them at it.
	proxy    *brokerProxy
	proxyEnv []string
	// approx is set when a killed run's last counts may be missing.
	approx     bool
	lastScrape counters
	logRel     string // the log's path, relative to the repository
}

// run is the whole demo; the deferred clean-up stops platformd on every
// exit path unless -keep-running asked to leave it (and all went well).
func run(ctx context.Context, o options, out io.Writer) (err error) {
	dm := &demo{o: o, out: out, steps: 6, started: time.Now()}
	root, err := findRoot()
	if err != nil {
		return err
	}
	if err := dm.load(root); err != nil {
		return err
	}
	if o.kills > 0 {
		if err := dm.setupProxy(); err != nil {
			return err
		}
		if dm.proxy != nil {
			defer dm.proxy.close()
		}
	}
	if err := dm.portsFree(); err != nil {
		return err
	}
	results := filepath.Join(cmp.Or(o.resultsDir, filepath.Join(root, "results")), "demo-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(results, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "platformd-demo-")
	if err != nil {
		return err
	}
	dm.d = &daemon{config: dm.cfgPath, logPath: filepath.Join(results, "platformd.log")}
	keep := false
	defer func() {
		if keep {
			return // the binary stays in tmp for the running daemon
		}
		if dm.d.running() {
			if serr := dm.d.stop(10 * time.Second); serr != nil && err == nil {
				err = serr
			}
		}
		_ = os.RemoveAll(tmp)
	}()

	dm.say("building platformd and preparing the order, stock and shipping databases")
	if dm.d.bin, err = buildDaemon(ctx, root, tmp); err != nil {
		return err
	}
	// The build is not counted in -timeout.
	ctx, cancel := context.WithTimeoutCause(ctx, o.timeout,
		fmt.Errorf("the demo did not finish within -timeout %s (try fewer -orders)", o.timeout))
	defer cancel()
	defer func() {
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
	}()
	closeAll, err := dm.connect(ctx, root)
	defer closeAll()
	if err != nil {
		return err
	}
	if err := dm.preflight(ctx); err != nil {
		return err
	}

	dm.logRel = dm.d.logPath
	if rel, err := filepath.Rel(root, dm.d.logPath); err == nil {
		dm.logRel = rel
	}
	dm.say("starting platformd (its log: %s)", dm.logRel)
	if err := dm.startDaemon(ctx, o.keepRunning && o.kills == 0, o.kills > 0); err != nil {
		return err
	}
	if dm.leftover > 0 {
		dm.note("%d messages of an earlier run were still queued: platformd processes them too", dm.leftover)
	}

	pl := dm.plan
	dm.say("writing %d orders with their %d events to the order database's outbox (one UUID v7 event_id each); platformd's relay publishes them",
		len(pl.orders), len(pl.events))
	if err := dm.produce(ctx); err != nil {
		return err
	}

	dm.say("waiting until the outboxes and the queues are drained")
	if _, err := dm.waitDrained(ctx, nil); err != nil {
		return err
	}
	final, err := dm.replay(ctx)
	if err != nil {
		return err
	}
	total := dm.past.add(final)

	if o.keepRunning {
		dm.say("leaving platformd running; checking the databases")
	} else {
		dm.say("stopping platformd (SIGTERM) and checking the databases")
		if err := dm.d.stop(30 * time.Second); err != nil {
			return err
		}
	}
	var v verdict
	for attempt := 1; ; attempt++ {
		if v, err = dm.verify(ctx); err == nil {
			break
		}
		if attempt == 5 || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Second) //nolint:forbidigo // a paced retry: PostgreSQL may be restarting
	}
	dm.report(total, v)
	if len(v.problems) > 0 {
		return fmt.Errorf("exactly once does NOT hold:\n  %s", strings.Join(v.problems, "\n  "))
	}
	if o.keepRunning {
		keep = true
		dm.printAddresses()
	}
	return nil
}

// replay republishes the plan's replay range with header x-replay, as
// replay tooling does, and waits until platformd has skipped every copy;
// it returns the counters then.
func (dm *demo) replay(ctx context.Context) (counters, error) {
	n := len(dm.plan.replay)
	if n == 0 {
		dm.say("replay skipped (-replay-share 0)")
		c, err := dm.scr.scrape(ctx)
		if err != nil {
			return c, fmt.Errorf("read platformd's metrics: %w", err)
		}
		return c, nil
	}
	dm.say("replaying %d already-processed events with header %s: demo", n, headerReplay)
	prod, err := newProducer(dm.in.conn, dm.cfg.Broker.Exchange)
	if err != nil {
		return counters{}, err
	}
	before, err := dm.scr.scrape(ctx)
	if err != nil {
		prod.close()
		return counters{}, fmt.Errorf("read platformd's metrics: %w", err)
	}
	err = prod.publish(ctx, dm.plan.replay, amqp.Table{headerReplay: "demo"})
	prod.close()
	if err != nil {
		return counters{}, fmt.Errorf("replay: %w", err)
	}
	want := before.source[srcReplay] + float64(n)
	return dm.waitDrained(ctx, func(c counters) bool { return c.source[srcReplay] >= want })
}
