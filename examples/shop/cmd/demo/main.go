// Command demo shows platformd's guarantee on the seed article's shop: every
// event's database effects happen exactly once, although the same event
// reaches the consumer several times for the three ordinary reasons the seed
// lists. `make demo` runs it from the repository root.
//
// It builds the shop's daemon (examples/shop/cmd/shopd, platformd with the
// shop's Go handlers) as a team builds its own, without any build tag,
// creates and migrates the order, stock and shipping databases, starts the
// daemon, and then, as the shop's order service,
// writes orders to the order database, each in one transaction with its
// events (order.order.placed.v1, order.order.status_changed.v1) as rows of
// platform.outbox with a producer-set UUID v7 event_id (a plain INSERT, as a
// producer in any language writes them); some of those transactions roll
// back. platformd's relay publishes the committed rows; stock reserves and
// announces each order through its own outbox (stock.stock.reserved.v1),
// and shipping tracks statuses and prepares one parcel per order.
// Meanwhile the demo provokes the three causes of duplicates (the first
// simulated, the other two for real):
//
//   - relay republish: a relay that crashes after the broker confirmed a
//     batch of outbox rows and before it deleted them publishes them again
//     when it restarts. The demo simulates what that crash leaves behind:
//     once the relay has published and deleted a batch of rows, it writes
//     the same rows (event_id, event_name, payload) into platform.outbox
//     again, with SQL, and the relay publishes them a second time;
//   - broker redelivery: mid-stream, platformd loses its broker connection
//     (it reaches RabbitMQ through a small proxy in the demo, which starts
//     dropping what platformd sends): it keeps committing the deliveries it
//     holds but its acks are lost. The demo reads platformd's counters, then
//     SIGKILLs it and closes the connections; RabbitMQ requeues every
//     delivery it never saw acknowledged and platformd, started again,
//     receives them flagged redelivered. With a config whose broker URL does
//     not come from PLATFORMD_AMQP_URL there is no proxy: platformd is just
//     SIGKILLed, and only what it committed in the last instant comes back
//     (its counters then miss its last batches);
//   - replay: once the stream is consumed, a range of processed events is
//     republished with header x-replay, as replay tooling does.
//
// When the queues are drained it stops platformd with SIGTERM, checks the
// databases against what it sent (reservations and parcels per order, each
// order's final status, one processed_event row per event, nothing of the
// rolled-back orders) and prints a short report. Only this run's orders and
// events are checked, so it can run again and again. It exits non-zero if anything was applied twice or lost.
//
// Usage:
//
//	go run ./examples/shop/cmd/demo [-orders 2000] [-relay-crashes 1]
//	    [-replay-share 0.05] [-kills 1] [-timeout 2m] [-config F] [-keep-running]
//	    [-billing-php]
//
// With -billing-php the shop gains a billing service whose handler is
// PHP (examples/billing-php/handler.php, served by php -S and called by
// platformd as a remote handler, examples/shop-php/platformd.yaml): the
// report then also counts one invoice per order.
//
// The demo uses only what any program may: the public packages (daemon,
// to validate the config; examples/shop), SQL on the documented tables,
// the AMQP protocol, and platformd's /metrics text. Its files are named
// for their concern: run.go (the steps), services.go (set-up), faults.go
// (the duplicates provoked), progress.go (the waits), verify.go and
// report.go (the check), and their helpers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// options are the command-line flags.
type options struct {
	orders       int
	relayCrashes int
	replayShare  float64
	kills        int
	config       string
	keepRunning  bool
	// billingPHP runs the shop with billing in PHP (examples/shop-php):
	// the demo serves examples/billing-php/handler.php with php -S.
	billingPHP bool
	timeout    time.Duration
	seed       uint64
	// resultsDir holds the run's log folder (default results/ in the
	// repository); tests set it.
	resultsDir string
}

func main() {
	os.Exit(mainRC(os.Args[1:], os.Stdout, os.Stderr))
}

// mainRC parses args, runs the demo and returns the exit code: 0 when the
// guarantee held, 1 on any failure, 2 on bad usage.
func mainRC(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.orders, "orders", 2000, "orders to place (each with 1-3 lines and 1-3 status changes)")
	fs.IntVar(&o.relayCrashes, "relay-crashes", 1, "times the demo simulates a relay crash between the broker's confirm and the rows' delete: it writes a batch of published outbox rows again, and the relay republishes them (0 to 5)")
	fs.Float64Var(&o.replayShare, "replay-share", 0.05, "share of the events replayed with header x-replay after the stream (0 to 1)")
	fs.IntVar(&o.kills, "kills", 1, "times platformd loses its broker connection mid-stream, is SIGKILLed and restarted (0 to 5)")
	fs.StringVar(&o.config, "config", "", "platformd config (default examples/shop/platformd.yaml in the repository; examples/shop-sql/platformd.yaml runs the same shop with SQL handlers)")
	fs.BoolVar(&o.billingPHP, "billing-php", false, "add billing in PHP: examples/shop-php/platformd.yaml (unless -config), its handler served by php -S (Debian's php-cli)")
	fs.BoolVar(&o.keepRunning, "keep-running", false, "leave platformd running at the end and print its addresses")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long (the build of platformd is not counted)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed for the order plan (0: a new one each run)")
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "usage: go run ./examples/shop/cmd/demo [flags]\n\n"+
			"Writes the shop's orders and their outbox rows, provokes relay republishes, a\n"+
			"broker redelivery (SIGKILL) and a replay, and checks that every effect\n"+
			"happened exactly once.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.validate(); err != nil || fs.NArg() > 0 {
		if err == nil {
			err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
		_, _ = fmt.Fprintf(stderr, "demo: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first Ctrl-C the demo cleans up (stops platformd); a
		// second one ends it at once.
		<-ctx.Done()
		stop()
	}()

	if err := run(ctx, o, stdout); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			_, _ = fmt.Fprintln(stderr, "demo: interrupted; platformd was stopped")
			return 1
		}
		_, _ = fmt.Fprintf(stderr, "demo: FAILED: %v\n", err)
		return 1
	}
	return 0
}

func (o options) validate() error {
	switch {
	case o.orders < 1 || o.orders > 1_000_000:
		return fmt.Errorf("-orders %d: must be between 1 and 1000000", o.orders)
	case o.relayCrashes < 0 || o.relayCrashes > 5:
		return fmt.Errorf("-relay-crashes %d: must be between 0 and 5", o.relayCrashes)
	case o.replayShare < 0 || o.replayShare > 1:
		return fmt.Errorf("-replay-share %g: must be between 0 and 1", o.replayShare)
	case o.kills < 0 || o.kills > 5:
		return fmt.Errorf("-kills %d: must be between 0 and 5", o.kills)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout %s: must be positive", o.timeout)
	}
	return nil
}
