package main

// This file sets up the shop's services around platformd: it reads the
// config, finds the pools the demo checks, migrates and connects to the
// databases and RabbitMQ, starts php -S for billing in PHP, and starts
// platformd and waits until it consumes.

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/examples/shop"
)

// target is one consumer service of the shop as the config places it.
type target struct {
	service, pool, queue string
	db                   *pgxpool.Pool
	// watched are the queues that must be empty: the pool's queue and its
	// retry delay queues.
	watched []string
	dsn     string // the service's database
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

func (dm *demo) targets() []*target { return []*target{dm.stock, dm.shipping} }

// allTargets are targets and, with a billing service in the config
// (examples/shop-php), billing's.
func (dm *demo) allTargets() []*target {
	if dm.billing == nil {
		return dm.targets()
	}
	return []*target{dm.stock, dm.shipping, dm.billing}
}

// load reads the config, finds the shop's pools and plans the run.
func (dm *demo) load(root string) error {
	o := dm.o
	var err error
	switch {
	case o.config == "" && o.billingPHP:
		dm.cfgPath = filepath.Join(root, "examples", "shop-php", "platformd.yaml")
	case o.config == "":
		dm.cfgPath = filepath.Join(root, "examples", "shop", "platformd.yaml")
	default:
		if dm.cfgPath, err = filepath.Abs(o.config); err != nil {
			return err
		}
	}
	if dm.cfg, err = loadConfig(dm.cfgPath); err != nil {
		return err
	}
	if dm.stock, _, err = findTarget(dm.cfg, shop.HandlerStockReserve, shop.EventOrderPlaced); err != nil {
		return err
	}
	if dm.shipping, _, err = findTarget(dm.cfg, shop.HandlerShippingTrack, shop.EventOrderStatusChanged); err != nil {
		return err
	}
	if _, _, err := findTarget(dm.cfg, shop.HandlerStockAnnounce, shop.EventOrderPlaced); err != nil {
		return err
	}
	if _, _, err := findTarget(dm.cfg, shop.HandlerShippingParcel, shop.EventStockReserved); err != nil {
		return err
	}
	if _, err := findProducer(dm.cfg); err != nil {
		return err
	}
	if dm.billing, _, err = findBilling(dm.cfg); err != nil {
		return err
	}
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
	dm.plan, err = newPlan(o.orders, o.replayShare, o.seed)
	return err
}

// connect migrates the databases (`shopd migrate -create-db`, then the
// order service's table), connects to them and to RabbitMQ, and starts
// php -S with -billing-php. The returned function closes it all, even on
// error.
func (dm *demo) connect(ctx context.Context, root string) (func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if err := dm.d.command(ctx, "migrate", "-config", dm.cfgPath, "-create-db"); err != nil {
		return closeAll, err
	}
	orderDSN, _ := findProducer(dm.cfg)
	if err := migrateOrders(ctx, orderDSN); err != nil {
		return closeAll, err
	}
	conn, err := amqp.Dial(dm.cfg.Broker.URL)
	if err != nil {
		return closeAll, fmt.Errorf("connect to RabbitMQ at %s: %w (is it running? `make services` starts it)", redactURL(dm.cfg.Broker.URL), err)
	}
	closers = append(closers, func() { _ = conn.Close() })
	dm.in = &inspector{conn: conn}
	closers = append(closers, dm.in.close)
	// Pools, not single connections: a connection PostgreSQL drops (a
	// restart) is replaced at the next query.
	for _, t := range dm.allTargets() {
		if t.db, err = pgxpool.New(ctx, t.dsn); err != nil {
			return closeAll, fmt.Errorf("connect to the %s database: %w", t.service, err)
		}
		closers = append(closers, t.db.Close)
	}
	if dm.o.billingPHP {
		stopPHP, err := startPHP(ctx, root, dm.cfg, dm.d.logPath)
		if err != nil {
			return closeAll, err
		}
		closers = append(closers, stopPHP)
		dm.note("billing's handler is PHP: examples/billing-php/handler.php served by php -S, called by platformd as a remote handler")
	}
	if dm.orderDB, err = pgxpool.New(ctx, orderDSN); err != nil {
		return closeAll, fmt.Errorf("connect to the order database: %w", err)
	}
	closers = append(closers, dm.orderDB.Close)
	dm.writer = &writer{db: dm.orderDB}
	return closeAll, nil
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

// startDaemon starts `shopd run` and waits until it consumes the shop's
// queues. A run the demo will kill is proxied: it reaches RabbitMQ through
// the demo's proxy.
func (dm *demo) startDaemon(ctx context.Context, detach, proxied bool) error {
	var env []string
	if proxied && dm.proxy != nil {
		env = dm.proxyEnv
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

// printAddresses tells, with -keep-running, where the running platformd
// is and how to stop it.
func (dm *demo) printAddresses() {
	token := `"$PLATFORMD_ADMIN_TOKEN"`
	if os.Getenv("PLATFORMD_ADMIN_TOKEN") == "" {
		for _, t := range dm.cfg.Admin.Tokens {
			if t.Role == roleAdmin && strings.Contains(t.Token, "demo") {
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
