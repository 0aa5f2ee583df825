package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
)

const usage = `usage: platformd <command> -config FILE [flags]

commands:
  run       migrate every service database, then consume until SIGINT/SIGTERM
            (a second signal exits at once: the dedup table makes that safe);
            SIGHUP reads the config again and applies the difference
  migrate   apply the platform's and the handlers' migrations; with
            -processed-event plain|partitioned -service S, convert service S's
            processed_event table instead (online: one transaction, see docs)
  check     validate the configuration and exit
  try       run one event through one handler against the service's real
            database, in a transaction always rolled back, and print what
            it would do (effects with rows affected, outbox rows, a
            remote handler's raw answer, the error and its class); no
            broker needed:
              platformd try -config F -handler NAME[,NAME...] (-event FILE|- | -failure ID)
                            [-o text|json] [-pool P] [-service S] [-attempt N]
                            [-ignore-processed] [-timeout 1m]
            (-pool P without -handler runs the pool's handlers, in order)
            exit codes: 0 the handler would apply it (or it is a duplicate),
            1 the handler fails (permanent, retryable or unreachable),
            2 usage, configuration or database error

exit codes: 0 ok, 1 runtime error, 2 usage or invalid configuration
`

// Main is the whole platformd command line over a handler registry: it
// parses args, loads and validates the configuration (reporting every
// mistake with its key's path before touching the broker or a database),
// and runs the command. It returns the process exit code.
func Main(args []string, reg *consumer.Registry, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	fs := flag.NewFlagSet("platformd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "path of the YAML configuration (required)")
	noMigrate := fs.Bool("no-migrate", false, "run: do not apply migrations at start")
	createDB := fs.Bool("create-db", false, "run, migrate: create missing service databases first")
	peLayout := fs.String("processed-event", "", "migrate: convert -service's processed_event table to plain or partitioned")
	peService := fs.String("service", "", "migrate -processed-event: the service whose table to convert; try: the service whose database the handler runs against")
	tf := tryFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintf(stderr, "platformd %s: -config is required\n\n%s", cmd, usage)
		return 2
	}
	if cmd != "try" && (*peLayout != "" || *peService != "") && (cmd != "migrate" || *peLayout == "" || *peService == "") {
		fmt.Fprintf(stderr, "platformd %s: -processed-event and -service go together, with migrate only\n\n%s", cmd, usage)
		return 2
	}
	if *peLayout != "" && *peLayout != "plain" && *peLayout != "partitioned" {
		fmt.Fprintf(stderr, "platformd migrate: -processed-event is plain or partitioned, not %q\n", *peLayout)
		return 2
	}
	switch cmd {
	case "run", "migrate", "check":
	case "try":
		if msg := tf.check(*peLayout); msg != "" {
			fmt.Fprintf(stderr, "platformd try: %s\n\n%s", msg, usage)
			return 2
		}
	default:
		fmt.Fprintf(stderr, "platformd: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	catalog := Catalog{Registry: reg}
	cfg, err := config.Load(*cfgPath, catalog)
	if err != nil {
		var cerr *config.Error
		if errors.As(err, &cerr) {
			fmt.Fprintf(stderr, "platformd: invalid configuration %s:\n", *cfgPath)
			for _, p := range cerr.Problems {
				fmt.Fprintf(stderr, "  %s: %s\n", p.Path, p.Message)
			}
		} else {
			fmt.Fprintf(stderr, "platformd: %v\n", err)
		}
		return 2
	}
	if reg, err = WithSQLHandlers(cfg, reg); err != nil {
		fmt.Fprintf(stderr, "platformd: %v\n", err)
		return 2
	}
	logger := newLogger(cfg.Log, stderr)
	switch cmd {
	case "check":
		fmt.Fprintf(stderr, "platformd: %s is valid (%d services)\n", *cfgPath, len(cfg.Services))
		return 0
	case "try":
		return runTry(cfg, reg, tf, *peService, os.Stdin, os.Stdout, stderr)
	case "migrate":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if *peLayout != "" {
			if err := ConvertProcessedEvent(ctx, cfg, reg, *peService, *peLayout, logger); err != nil {
				logger.Error("platformd: processed_event conversion failed", slog.Any("error", err))
				return 1
			}
			return 0
		}
		if err := Migrate(ctx, cfg, reg, *createDB, logger); err != nil {
			logger.Error("platformd: migrate failed", slog.Any("error", err))
			return 1
		}
		logger.Info("platformd: migrations applied", slog.Int("services", len(cfg.Services)))
		return 0
	}
	if gc, set := tuneGC(os.Getenv); set {
		logger.Debug("platformd: GOGC unset, using the daemon's default", slog.Int("gogc", gc))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // restore default handling: a second signal kills at once
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	opts := Options{NoMigrate: *noMigrate, CreateDB: *createDB, ConfigPath: *cfgPath, Catalog: catalog, Reload: hup}
	if err := Run(ctx, cfg, reg, opts, logger); err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("platformd: run failed", slog.Any("error", err))
		return 1
	}
	return 0
}

// NewLogger returns the daemon's logger for the config's log block,
// writing to w (JSON or text, at the configured level).
func NewLogger(c config.LogConfig, w io.Writer) *slog.Logger { return newLogger(c, w) }

func newLogger(c config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// GCPercentDefault is the daemon's GOGC when the environment sets none. Its
// live heap is a few MiB while it allocates per message (most of it in the
// AMQP library), so the runtime's default of 100 collects every few MiB:
// 10-18% of the daemon's CPU under load. At 400, an A/B in the bench: the
// daemon's CPU per drain 1.5 -> 1.2 CPU-s, throughput +7%, peak RSS 29 ->
// 40 MiB. GOGC (and GOMEMLIMIT) in the environment take precedence.
const GCPercentDefault = 400

// tuneGC sets the garbage collector's percent to GCPercentDefault unless
// getenv names a GOGC; it reports the value and whether it set it.
func tuneGC(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	debug.SetGCPercent(GCPercentDefault)
	return GCPercentDefault, true
}
