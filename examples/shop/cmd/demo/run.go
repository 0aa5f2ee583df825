package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	pdaemon "github.com/platformd/platformd/internal/daemon"
	"github.com/platformd/platformd/internal/faultproxy"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/outbox"
)

// Poll intervals: counters are scraped often because a SIGKILLed process
// takes its counters with it.
const (
	killPoll  = 50 * time.Millisecond
	drainPoll = 200 * time.Millisecond
	// maxPollFailures is how many polls in a row may fail (platformd,
	// RabbitMQ or PostgreSQL briefly unreachable) before the demo gives up.
	maxPollFailures = 50
	// stableFor is how many polls in a row the counters must not move, with
	// nothing ready or in flight, before the queues count as drained.
	stableFor = 3
)

// target is one consumer service of the shop as the config places it.
type target struct {
	service, pool, queue string
	db                   *pgxpool.Pool
	// watched are the queues that must be empty: the pool's queue and its
	// retry delay queues.
	watched []string
}

// failures counts t's pool's rows of the failure store (platform.failed_event
// of its service database) in state failed.
func (t *target) failures(ctx context.Context) (int, error) {
	var n int
	if err := t.db.QueryRow(ctx, `SELECT count(*) FROM platform.failed_event WHERE pool = $1 AND state = 'failed'`, t.pool).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the failures of pool %s in the %s database: %w", t.pool, t.service, err)
	}
	return n, nil
}

// findTarget finds the pool that applies event: the one running the
// shop's Go handler, or a SQL handler of its service declared for event
// (examples/shop-sql).
func findTarget(cfg *config.Config, handler, event string) (*target, string, error) {
	for _, s := range cfg.Services {
		applies := func(name string) bool {
			return name == handler || slices.ContainsFunc(s.SQLHandlers, func(h config.SQLHandlerConfig) bool {
				return h.Name == name && slices.Contains(h.Events, event)
			})
		}
		for _, p := range s.Pools {
			if slices.ContainsFunc(p.Handlers, applies) {
				t := &target{service: s.Name, pool: p.Name, queue: p.Queue, watched: []string{p.Queue}}
				for _, d := range p.Retry.Delays {
					t.watched = append(t.watched, broker.DelayQueue(d))
				}
				return t, s.Database, nil
			}
		}
	}
	return nil, "", fmt.Errorf("no pool of the config runs handler %s or a SQL handler of %s: the demo needs the shop's pools", handler, event)
}

// findProducer returns the DSN of the shop's order service: the producer,
// with an outbox and no pools.
func findProducer(cfg *config.Config) (string, error) {
	s, ok := cfg.Service(orderService)
	if !ok || !s.Outbox.Relay {
		return "", fmt.Errorf("the config has no service %q with its outbox relay on: the demo writes the shop's orders there", orderService)
	}
	return s.Database, nil
}

// orderService is the producer's service name in the shop's config.
const orderService = "order"

// relayKillBatch is the outbox batch, counted over the daemon's relays,
// after whose confirm a run started for a relay kill SIGKILLs itself.
const relayKillBatch = 5

// awaitRelayKill waits, scraping platformd's counters, until the run
// started with the relay-kill hook SIGKILLed itself between an outbox
// confirm and its delete. It fails if the producer and the relay finish
// first, or on any other error.
func (dm *demo) awaitRelayKill(ctx context.Context, done <-chan error, prodDone *bool) error {
	tick := time.NewTicker(killPoll)
	defer tick.Stop()
	var idleSince time.Time
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case err := <-done:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
			*prodDone, done = true, nil
		case <-dm.d.exited:
			dm.past = dm.past.add(dm.lastScrape)
			dm.approx = true
			rows := dm.d.killedRows()
			dm.relayKilled = append(dm.relayKilled, rows)
			what := "a batch of outbox rows"
			if rows >= 0 {
				what = fmt.Sprintf("%d outbox rows", rows)
			}
			dm.note("platformd SIGKILLed itself after the broker confirmed %s and before it deleted them: restarting it, its relay publishes them again", what)
			dm.d.logf("platformd killed itself between an outbox confirm and its delete (%s)", pdaemon.TestOutboxKillAfterConfirmEnv)
			return nil
		case <-tick.C:
		}
		if c, err := dm.scr.scrape(ctx); err == nil {
			dm.lastScrape = c
		}
		if *prodDone {
			if idleSince.IsZero() {
				idleSince = time.Now()
			}
			if time.Since(idleSince) > 30*time.Second {
				return fmt.Errorf("platformd did not kill itself after its outbox batch %d within 30s of the last order (too few -orders?)", relayKillBatch)
			}
		}
	}
}

// demo holds what a run needs across its steps.
type demo struct {
	o               options
	out             io.Writer
	cfg             *config.Config
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
	relayKilled   []int    // rows confirmed and not deleted at each relay kill (-1: unknown)
	past          counters // the counters of the runs already ended
	runs          int
	failedAtStart map[*target]int // rows of state failed per pool before the demo published
	killedAfter   []int           // events processed (all runs) at each SIGKILL
	leftover      int             // messages already waiting when the demo started
	step, steps   int
	started       time.Time
	// proxy, when not nil, relays the broker traffic of the runs the demo
	// kills; proxyEnv is their environment, pointing them at it.
	proxy    *faultproxy.Proxy
	proxyEnv []string
	// approx is set when a killed run's last counts may be missing.
	approx     bool
	lastScrape counters
	logRel     string // the log's path, relative to the repository
}

func (dm *demo) say(format string, args ...any) {
	dm.step++
	_, _ = fmt.Fprintf(dm.out, "[%d/%d] "+format+"\n", append([]any{dm.step, dm.steps}, args...)...)
}

func (dm *demo) note(format string, args ...any) {
	_, _ = fmt.Fprintf(dm.out, "      "+format+"\n", args...)
}

func (dm *demo) targets() []*target { return []*target{dm.stock, dm.shipping} }

// allTargets are targets and, with a billing service in the config
// (examples/shop-php), billing's.
func (dm *demo) allTargets() []*target {
	if dm.billing == nil {
		return dm.targets()
	}
	return []*target{dm.stock, dm.shipping, dm.billing}
}

// findBilling finds the billing service's pool that applies
// order.order.placed.v1 (examples/shop-php: a remote handler in PHP), or
// nil when the config has none.
func findBilling(cfg *config.Config) (*target, string) {
	s, ok := cfg.Service(billingService)
	if !ok {
		return nil, ""
	}
	for _, p := range s.Pools {
		if slices.Contains(p.Bindings, shop.EventOrderPlaced) {
			t := &target{service: s.Name, pool: p.Name, queue: p.Queue, watched: []string{p.Queue}}
			for _, d := range p.Retry.Delays {
				t.watched = append(t.watched, broker.DelayQueue(d))
			}
			return t, s.Database
		}
	}
	return nil, ""
}

// billingService is the optional billing service's name in the config.
const billingService = "billing"

// run is the whole demo; the deferred clean-up stops platformd on every
// exit path unless -keep-running asked to leave it (and all went well).
func run(ctx context.Context, o options, out io.Writer) (err error) {
	dm := &demo{o: o, out: out, steps: 6, started: time.Now()}
	root, err := findRoot()
	if err != nil {
		return err
	}
	cfgPath := o.config
	switch {
	case cfgPath == "" && o.billingPHP:
		cfgPath = filepath.Join(root, "examples", "shop-php", "platformd.yaml")
	case cfgPath == "":
		cfgPath = filepath.Join(root, "examples", "shop", "platformd.yaml")
	default:
		cfgPath, err = filepath.Abs(cfgPath)
	}
	if err != nil {
		return err
	}
	if dm.cfg, err = config.Load(cfgPath, nil); err != nil {
		return err
	}
	var stockDSN, shippingDSN, orderDSN string
	if dm.stock, stockDSN, err = findTarget(dm.cfg, shop.HandlerStockReserve, shop.EventOrderPlaced); err != nil {
		return err
	}
	if dm.shipping, shippingDSN, err = findTarget(dm.cfg, shop.HandlerShippingTrack, shop.EventOrderStatusChanged); err != nil {
		return err
	}
	if _, _, err := findTarget(dm.cfg, shop.HandlerStockAnnounce, shop.EventOrderPlaced); err != nil {
		return err
	}
	if _, _, err := findTarget(dm.cfg, shop.HandlerShippingParcel, shop.EventStockReserved); err != nil {
		return err
	}
	if orderDSN, err = findProducer(dm.cfg); err != nil {
		return err
	}
	var billingDSN string
	dm.billing, billingDSN = findBilling(dm.cfg)
	if o.billingPHP && dm.billing == nil {
		return fmt.Errorf("-billing-php: the config has no service %q with a pool for %s (examples/shop-php/platformd.yaml has)", billingService, shop.EventOrderPlaced)
	}
	pools := []string{dm.stock.pool, dm.shipping.pool}
	if dm.billing != nil {
		pools = append(pools, dm.billing.pool)
	}
	if dm.scr, err = newScraper(dm.cfg.Metrics.Listen, pools); err != nil {
		return err
	}
	if dm.plan, err = newPlan(o.orders, o.replayShare, o.seed); err != nil {
		return err
	}
	if o.kills > 0 {
		if err := dm.setupProxy(cfgPath); err != nil {
			return err
		}
		if dm.proxy != nil {
			defer dm.proxy.Close()
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
	dm.d = &daemon{config: cfgPath, logPath: filepath.Join(results, "platformd.log")}
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
	if err := dm.d.command(ctx, "migrate", "-config", cfgPath, "-create-db"); err != nil {
		return err
	}
	// The order service has no handler to carry its table's migrations:
	// the demo applies them itself, versioned apart (platform.goose_order).
	if err := migrate.Apply(ctx, orderDSN, []migrate.Set{{Name: "order", FS: shop.OrderMigrations()}},
		slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return fmt.Errorf("migrate the order database: %w", err)
	}
	conn, err := amqp.Dial(dm.cfg.Broker.URL)
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ at %s: %w (is it running? `make services` starts it)", config.RedactURL(dm.cfg.Broker.URL), err)
	}
	defer conn.Close()
	dm.in = &inspector{conn: conn}
	defer dm.in.close()
	// Pools, not single connections: a connection PostgreSQL drops (a
	// restart) is replaced at the next query.
	if dm.stock.db, err = pgxpool.New(ctx, stockDSN); err != nil {
		return fmt.Errorf("connect to the stock database: %w", err)
	}
	defer dm.stock.db.Close()
	if dm.shipping.db, err = pgxpool.New(ctx, shippingDSN); err != nil {
		return fmt.Errorf("connect to the shipping database: %w", err)
	}
	defer dm.shipping.db.Close()
	if dm.billing != nil {
		if dm.billing.db, err = pgxpool.New(ctx, billingDSN); err != nil {
			return fmt.Errorf("connect to the billing database: %w", err)
		}
		defer dm.billing.db.Close()
	}
	if o.billingPHP {
		stopPHP, err := startPHP(ctx, root, dm.cfg, dm.d.logPath)
		if err != nil {
			return err
		}
		defer stopPHP()
		dm.note("billing's handler is PHP: examples/billing-php/handler.php served by php -S, called by platformd as a remote handler")
	}
	if dm.orderDB, err = pgxpool.New(ctx, orderDSN); err != nil {
		return fmt.Errorf("connect to the order database: %w", err)
	}
	defer dm.orderDB.Close()
	dm.writer = &writer{db: dm.orderDB}
	if err := dm.preflight(ctx); err != nil {
		return err
	}

	dm.logRel = dm.d.logPath
	if rel, err := filepath.Rel(root, dm.d.logPath); err == nil {
		dm.logRel = rel
	}
	dm.say("starting platformd (its log: %s)", dm.logRel)
	if err := dm.startDaemon(ctx, o.keepRunning && o.kills == 0 && o.relayKills == 0, o.kills > 0 && o.relayKills == 0, o.relayKills > 0); err != nil {
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

	var final counters
	if n := len(pl.replay); n > 0 {
		dm.say("replaying %d already-processed events with header %s: demo", n, broker.HeaderReplay)
		prod, err := newProducer(conn, dm.cfg.Broker.Exchange)
		if err != nil {
			return err
		}
		before, err := dm.scr.scrape(ctx)
		if err != nil {
			return fmt.Errorf("read platformd's metrics: %w", err)
		}
		err = prod.publish(ctx, pl.replay, amqp.Table{broker.HeaderReplay: "demo"})
		prod.close()
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		want := before.source[metrics.SourceReplay] + float64(n)
		if final, err = dm.waitDrained(ctx, func(c counters) bool { return c.source[metrics.SourceReplay] >= want }); err != nil {
			return err
		}
	} else {
		dm.say("replay skipped (-replay-share 0)")
		if final, err = dm.scr.scrape(ctx); err != nil {
			return fmt.Errorf("read platformd's metrics: %w", err)
		}
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

// preflight refuses to start when another platformd consumes the shop's
// queues, and notes what the queues and the failure stores hold before the
// demo publishes anything.
func (dm *demo) preflight(ctx context.Context) error {
	dm.failedAtStart = map[*target]int{}
	for _, t := range dm.allTargets() {
		for _, q := range t.watched {
			ready, consumers, _, err := dm.in.queue(q)
			if err != nil {
				return err
			}
			if consumers > 0 {
				return fmt.Errorf("queue %s already has %d consumer(s): another platformd is consuming it; stop it first", q, consumers)
			}
			dm.leftover += ready
		}
		n, err := t.failures(ctx)
		if err != nil {
			return err
		}
		dm.failedAtStart[t] = n
	}
	return nil
}

// portsFree fails if platformd's metrics or admin address is taken.
func (dm *demo) portsFree() error {
	for _, a := range []struct{ what, addr, env string }{
		{"metrics", dm.cfg.Metrics.Listen, "PLATFORMD_METRICS_LISTEN"},
		{"admin", dm.cfg.Admin.Listen, "PLATFORMD_ADMIN_LISTEN"},
	} {
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("the %s address %s is already in use: is a platformd still running (e.g. a demo run with -keep-running)? "+
				"Stop it, or set %s: %w", a.what, a.addr, a.env, err)
		}
		_ = l.Close()
	}
	return nil
}

// startDaemon starts `platformd run` and waits until it consumes both
// queues.
// A run the demo will kill is proxied: it reaches RabbitMQ through the
// demo's proxy. A run started with relayKill SIGKILLs itself between an
// outbox confirm and its delete (daemon.TestOutboxKillAfterConfirmEnv).
func (dm *demo) startDaemon(ctx context.Context, detach, proxied, relayKill bool) error {
	var env []string
	if proxied && dm.proxy != nil {
		env = dm.proxyEnv
	}
	if relayKill {
		if env == nil {
			env = os.Environ()
		}
		env = append(slices.Clip(env), pdaemon.TestOutboxKillAfterConfirmEnv+"="+strconv.Itoa(relayKillBatch))
	}
	if err := dm.d.start(detach, env); err != nil {
		return err
	}
	dm.runs++
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("platformd did not start consuming %s and %s within 30s: %w%s",
				dm.stock.queue, dm.shipping.queue, ctx.Err(), dm.d.tail())
		case <-dm.d.exited:
			return dm.d.exitedErr()
		case <-tick.C:
		}
		if _, err := dm.scr.scrape(ctx); err != nil {
			continue
		}
		ready := true
		for _, t := range dm.allTargets() {
			_, consumers, _, err := dm.in.queue(t.queue)
			if err != nil {
				return err
			}
			ready = ready && consumers > 0
		}
		if ready {
			return nil
		}
	}
}

// produce writes the plan to the order database while platformd kills
// itself -relay-kills times between an outbox confirm and its delete, and
// the demo SIGKILLs it -kills times mid-stream, each time right after a
// scrape of its counters; each time it is started again.
func (dm *demo) produce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- dm.writer.run(ctx, dm.plan) }()
	var prodDone bool
	total := len(dm.plan.events)
	for k := 1; k <= dm.o.relayKills; k++ {
		if err := dm.awaitRelayKill(ctx, done, &prodDone); err != nil {
			return err
		}
		last := k == dm.o.relayKills
		if err := dm.startDaemon(ctx, dm.o.keepRunning && last && dm.o.kills == 0, last && dm.o.kills > 0, !last); err != nil {
			return err
		}
	}
	for k := 1; k <= dm.o.kills; k++ {
		threshold := float64(total) * float64(k) / float64(dm.o.kills+1)
		last, err := dm.pollUntil(ctx, killPoll, func(c counters) bool {
			return dm.past.outcome[outProcessed]+c.outcome[outProcessed] >= threshold
		}, done, &prodDone)
		if err != nil {
			return err
		}
		if dm.proxy != nil {
			dm.note("platformd loses its broker connection mid-stream: it commits what it holds, its acks are lost")
			dm.proxy.Freeze() // what platformd sends (its acks) is held, never delivered
			if last, err = dm.settle(ctx, done, &prodDone); err != nil {
				return err
			}
		} else {
			// Counters move only once a batch is acked: what is committed
			// and acked between this scrape and the kill is counted nowhere.
			dm.approx = true
		}
		dm.d.kill()
		if dm.proxy != nil {
			// Every connection closes with the acks it held: the broker
			// requeues what it never saw acknowledged, flagged redelivered.
			dm.proxy.Cut()
			dm.proxy.Heal()
		}
		dm.past = dm.past.add(last)
		rows, err := dm.countRows(ctx)
		if err != nil {
			return err
		}
		committed := rows[0] + rows[1]
		dm.killedAfter = append(dm.killedAfter, committed)
		dm.note("SIGKILL platformd (%d of %d events committed): RabbitMQ requeues every delivery it did not see acked", committed, total)
		dm.d.logf("SIGKILL sent by the demo (its broker traffic was cut first: %t)", dm.proxy != nil)
		dm.note("restarting platformd")
		if err := dm.startDaemon(ctx, dm.o.keepRunning && k == dm.o.kills, k < dm.o.kills, false); err != nil {
			return err
		}
	}
	if !prodDone {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
		case <-dm.d.exited:
			return dm.d.exitedErr()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	dm.note("committed %d events with their orders; rolled back %d more orders, whose events must never arrive",
		dm.writer.committed.Load(), len(dm.writer.rolledBackOrders))
	return nil
}

// settle waits, while the proxy drops platformd's traffic, until platformd
// has settled every delivery it holds (nothing in flight, counters still),
// and returns its counters then: they are this run's final counts. It gives
// up after a few seconds (a worker waiting for a publisher confirm never
// settles) and returns the last scrape, marking the counts approximate.
func (dm *demo) settle(ctx context.Context, done <-chan error, prodDone *bool) (counters, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stable, prev := 0, -1.0
	last, err := dm.pollUntil(sctx, killPoll, func(c counters) bool {
		n := c.deliveries()
		if c.inFlight == 0 && n == prev {
			stable++
		} else {
			stable = 0
		}
		prev = n
		return stable >= stableFor
	}, done, prodDone)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		dm.approx = true
		return dm.lastScrape, nil
	}
	return last, err
}

// setupProxy puts the demo's proxy between platformd and RabbitMQ for the
// runs it kills, if the config takes its broker URL from
// PLATFORMD_AMQP_URL (the shop's does) and the URL is plain amqp. Else
// platformd is simply SIGKILLed and the counts of the killed runs are
// approximate.
func (dm *demo) setupProxy(cfgPath string) error {
	const envURL = "PLATFORMD_AMQP_URL"
	u, err := url.Parse(dm.cfg.Broker.URL)
	if err != nil || u.Scheme != "amqp" {
		return nil
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := faultproxy.New(upstream, faultproxy.Options{})
	if err != nil {
		return fmt.Errorf("broker proxy: %w", err)
	}
	pu := *u
	pu.Host = p.Addr()
	// Does the config read the variable? Load it again with it set.
	old, had := os.LookupEnv(envURL)
	_ = os.Setenv(envURL, pu.String())
	cfg, err := config.Load(cfgPath, nil)
	if had {
		_ = os.Setenv(envURL, old)
	} else {
		_ = os.Unsetenv(envURL)
	}
	if err != nil || cfg.Broker.URL != pu.String() {
		p.Close()
		return nil
	}
	dm.proxy, dm.proxyEnv = p, append(os.Environ(), envURL+"="+pu.String())
	return nil
}

// pollUntil scrapes the counters every interval until cond holds, and
// returns that scrape. It fails if platformd exits or the producer fails;
// a producer that finishes sets *prodDone.
func (dm *demo) pollUntil(ctx context.Context, interval time.Duration, cond func(counters) bool, done <-chan error, prodDone *bool) (counters, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return counters{}, context.Cause(ctx)
		case <-dm.d.exited:
			return counters{}, dm.d.exitedErr()
		case err := <-done:
			if err != nil {
				return counters{}, fmt.Errorf("producer: %w", err)
			}
			*prodDone, done = true, nil
		case <-tick.C:
		}
		c, err := dm.scr.scrape(ctx)
		if err != nil {
			if fails++; fails >= maxPollFailures {
				return counters{}, fmt.Errorf("read platformd's metrics: %w", err)
			}
			continue
		}
		fails = 0
		dm.lastScrape = c
		if cond(c) {
			return c, nil
		}
	}
}

// waitDrained waits until every event of the plan has its processed_event
// row, nothing is ready in the shop's queues (retry queues included) or in
// flight in platformd, extra (if any) holds, and the counters have not
// moved for a few polls. It returns the last scrape.
func (dm *demo) waitDrained(ctx context.Context, extra func(counters) bool) (counters, error) {
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	rowsDone := false
	var rows [2]int
	stable, prev, fails := 0, -1.0, 0
	lastNote := time.Now()
	var c counters
	for {
		select {
		case <-ctx.Done():
			return c, fmt.Errorf("waiting for the queues to drain: %w", context.Cause(ctx))
		case <-dm.d.exited:
			return c, dm.d.exitedErr()
		case <-tick.C:
		}
		queued, outboxRows, err := dm.drainState(ctx, &c, &rows, &rowsDone)
		ready := queued + outboxRows
		if err != nil {
			// Tolerate a passing failure (PostgreSQL restarting...).
			if fails++; fails >= maxPollFailures {
				return c, err
			}
			stable = 0
			continue
		}
		fails = 0
		n := c.deliveries()
		if rowsDone && ready == 0 && c.inFlight == 0 && n == prev && (extra == nil || extra(c)) {
			if stable++; stable >= stableFor {
				return c, nil
			}
		} else {
			stable = 0
		}
		prev = n
		if time.Since(lastNote) >= 5*time.Second {
			lastNote = time.Now()
			dm.note("still draining: %d rows in the outboxes, %d ready in the queues, %d in flight, processed_event rows %d/%d stock, %d/%d shipping",
				outboxRows, queued, int(c.inFlight), rows[0], len(dm.plan.stockIDs), rows[1], len(dm.plan.shippingIDs))
			if outboxRows > 0 {
				// Rows that do not move while the queues are empty: a
				// relay waiting out the lease of a SIGKILLed run.
				if why, err := dm.relayLeaseWait(ctx); err == nil && why != "" {
					dm.note("%s", why)
				}
			}
		}
	}
}

// countRows counts the processed_event rows of this run's events in the
// stock and shipping databases.
func (dm *demo) countRows(ctx context.Context) ([2]int, error) {
	var rows [2]int
	for i, t := range dm.targets() {
		ids := [][]uuid.UUID{dm.plan.stockIDs, dm.plan.shippingIDs}[i]
		if err := t.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, ids).Scan(&rows[i]); err != nil {
			return rows, fmt.Errorf("count processed_event rows in %s: %w", t.service, err)
		}
	}
	return rows, nil
}

// countParcels counts the parcels of this run's orders.
func (dm *demo) countParcels(ctx context.Context) (int, error) {
	var n int
	if err := dm.shipping.db.QueryRow(ctx, `SELECT count(*) FROM parcel WHERE order_id = ANY($1)`, dm.plan.orderIDs).Scan(&n); err != nil {
		return 0, fmt.Errorf("count parcels: %w", err)
	}
	return n, nil
}

// drainState scrapes the counters into *c, counts this run's
// processed_event rows into *rows until they are all there (*rowsDone), and
// returns the messages ready in the watched queues and the rows waiting
// in the outboxes (messages still to come).
func (dm *demo) drainState(ctx context.Context, c *counters, rows *[2]int, rowsDone *bool) (queued, outboxRows int, err error) {
	if *c, err = dm.scr.scrape(ctx); err != nil {
		return 0, 0, fmt.Errorf("read platformd's metrics: %w", err)
	}
	for _, t := range dm.allTargets() {
		for _, q := range t.watched {
			n, _, _, err := dm.in.queue(q)
			if err != nil {
				return 0, 0, err
			}
			queued += n
		}
	}
	// Rows waiting in an outbox are messages still to come.
	for _, db := range []*pgxpool.Pool{dm.orderDB, dm.stock.db, dm.shipping.db} {
		n, _, err := outbox.Stats(ctx, db)
		if err != nil {
			return 0, 0, err
		}
		outboxRows += int(n)
	}
	if !*rowsDone {
		if *rows, err = dm.countRows(ctx); err != nil {
			return 0, 0, err
		}
		parcels, err := dm.countParcels(ctx)
		if err != nil {
			return 0, 0, err
		}
		*rowsDone = *rows == [2]int{len(dm.plan.stockIDs), len(dm.plan.shippingIDs)} && parcels == len(dm.plan.orders)
		if *rowsDone && dm.billing != nil {
			var n int
			if err := dm.billing.db.QueryRow(ctx, `SELECT count(*) FROM processed_event WHERE event_id = ANY($1)`, dm.plan.stockIDs).Scan(&n); err != nil {
				return 0, 0, fmt.Errorf("count processed_event rows in billing: %w", err)
			}
			*rowsDone = n == len(dm.plan.stockIDs)
		}
	}
	return queued, outboxRows, nil
}

func (dm *demo) printAddresses() {
	token := `"$PLATFORMD_ADMIN_TOKEN"`
	if os.Getenv("PLATFORMD_ADMIN_TOKEN") == "" {
		for _, t := range dm.cfg.Admin.Tokens {
			if t.Role == config.RoleAdmin && strings.Contains(t.Token, "demo") {
				token = t.Token // the config's loopback-only demo default
				break
			}
		}
	}
	_, _ = fmt.Fprintf(dm.out, "\nplatformd keeps running (pid %d, log %s)\n", dm.d.pid(), dm.logRel)
	_, _ = fmt.Fprintf(dm.out, "  metrics: %s\n", dm.scr.url)
	_, _ = fmt.Fprintf(dm.out, "  admin:   %s, e.g. PLATFORMD_TOKEN=%s go run ./cmd/platformctl --addr %s pools\n",
		dm.cfg.Admin.Listen, token, dm.cfg.Admin.Listen)
	_, _ = fmt.Fprintf(dm.out, "  stop it: kill %d\n", dm.d.pid())
}
