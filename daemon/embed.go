package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	internal "github.com/platformd/platformd/internal/daemon"
)

// ErrRunning is returned by Run on a daemon that already runs or ran: a
// Daemon runs once; build another with New.
var ErrRunning = errors.New("daemon: Run called twice")

// Config is a loaded and validated platformd configuration, bound to the
// registry it was checked against (the SQL handlers it declares are added
// to that registry's copy). Build one with LoadConfig or ParseConfig.
type Config struct {
	cfg  *config.Config
	orig *consumer.Registry // the registry it was checked against
	reg  *consumer.Registry // orig with the config's SQL handlers
	path string             // "" for a parsed config: reloads are off
}

// LoadConfig reads, expands (${VAR}, ${VAR:-default}) and validates the
// configuration file at path against reg's handlers. A configuration with
// mistakes returns an error listing each one with its key's path, as
// `platformd check` prints them. The daemon built from it reloads that file
// on ReloadConfig.
func LoadConfig(path string, reg *consumer.Registry) (*Config, error) {
	cfg, err := config.Load(path, internal.Catalog{Registry: reg})
	if err != nil {
		return nil, err
	}
	return bind(cfg, reg, path)
}

// ParseConfig is LoadConfig over data already read; name is used in
// messages and relative paths (migrations, token files) resolve against
// its directory. The daemon built from it does not reload.
func ParseConfig(name string, data []byte, reg *consumer.Registry) (*Config, error) {
	cfg, err := config.Parse(name, data, internal.Catalog{Registry: reg})
	if err != nil {
		return nil, err
	}
	return bind(cfg, reg, "")
}

func bind(cfg *config.Config, reg *consumer.Registry, path string) (*Config, error) {
	full, err := internal.WithSQLHandlers(cfg, reg)
	if err != nil {
		return nil, err
	}
	return &Config{cfg: cfg, orig: reg, reg: full, path: path}, nil
}

// Services returns the names of the configured services, in config order.
func (c *Config) Services() []string {
	out := make([]string, len(c.cfg.Services))
	for i, s := range c.cfg.Services {
		out[i] = s.Name
	}
	return out
}

// Option tunes New.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	logOutput io.Writer
	noMigrate bool
	createDB  bool
	reload    <-chan os.Signal
}

// WithLogger sends the daemon's logs to l (default: the config's log
// block, written to stderr).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithLogOutput writes the daemon's logs to w in the config's log format
// and level (default: stderr). WithLogger takes precedence.
func WithLogOutput(w io.Writer) Option { return func(o *options) { o.logOutput = w } }

// WithoutMigrations skips the migrations at start (`run -no-migrate`).
func WithoutMigrations() Option { return func(o *options) { o.noMigrate = true } }

// WithCreateDatabases creates missing service databases at start
// (`run -create-db`).
func WithCreateDatabases() Option { return func(o *options) { o.createDB = true } }

// WithReloadSignals reloads the config file whenever ch delivers, as
// SIGHUP does for `platformd run` (a config from LoadConfig only).
func WithReloadSignals(ch <-chan os.Signal) Option { return func(o *options) { o.reload = ch } }

// Daemon is platformd in a Go program: the same daemon `platformd run`
// starts, with its lifecycle in the caller's hands. Run it once; Stop,
// Ready and the address methods are safe for concurrent use.
type Daemon struct {
	cfg   *Config
	opts  options
	ready chan struct{}

	mu      sync.Mutex
	ran     bool
	cancel  context.CancelFunc
	done    chan struct{}
	running *internal.Daemon
}

// New returns a daemon for cfg and reg (the registry cfg was loaded
// against), not yet running.
func New(cfg *Config, reg *consumer.Registry, opts ...Option) (*Daemon, error) {
	if cfg == nil || cfg.cfg == nil {
		return nil, errors.New("daemon: New needs a Config from LoadConfig or ParseConfig")
	}
	if reg == nil {
		return nil, errors.New("daemon: New needs a registry")
	}
	// The config's SQL handlers were added to a copy of the registry it
	// was loaded with; bind again if the caller passes another one.
	bound := cfg
	if reg != cfg.orig {
		b, err := bind(cfg.cfg, reg, cfg.path)
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		bound = b
	}
	d := &Daemon{cfg: bound, ready: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(&d.opts)
	}
	if d.opts.logger == nil {
		out := d.opts.logOutput
		if out == nil {
			out = os.Stderr
		}
		d.opts.logger = internal.NewLogger(cfg.cfg.Log, out)
	}
	return d, nil
}

// Run migrates every service database (unless WithoutMigrations), starts
// the admin API, the metrics endpoint, the console and every service, and
// blocks until ctx ends or Stop is called; it then drains: the admin API
// stops, each pool stops consuming and settles its in-flight batches, the
// relays and the scheduler stop, and Run returns nil. A start that fails
// (a migration or a SQL statement the database refuses, a port in use)
// returns its error. A service whose database is unreachable does not stop
// the start: it waits for its database in the background. Run installs no
// signal handler and does not touch GOGC (Main does both).
func (d *Daemon) Run(ctx context.Context) error {
	d.mu.Lock()
	if d.ran {
		d.mu.Unlock()
		return ErrRunning
	}
	d.ran = true
	ctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	d.mu.Unlock()
	var readyWatch sync.WaitGroup
	defer func() {
		cancel()
		readyWatch.Wait() // Run owns the goroutine that closes Ready
		close(d.done)
	}()
	opts := internal.Options{
		NoMigrate: d.opts.noMigrate, CreateDB: d.opts.createDB,
		ConfigPath: d.cfg.path, Catalog: internal.Catalog{Registry: d.cfg.reg}, Reload: d.opts.reload,
		StartedFunc: func(running *internal.Daemon) {
			d.mu.Lock()
			d.running = running
			d.mu.Unlock()
			// Services come up in the background: ready once each one's
			// pools consume, so that an event published then is routed.
			readyWatch.Go(func() { d.closeReadyWhenServing(ctx, running) })
		},
	}
	err := internal.Run(ctx, d.cfg.cfg, d.cfg.reg, opts, d.opts.logger)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Ready is closed once Run has started everything and every service is
// up: the admin API, metrics and console listen, and every pool consumes
// (or sits paused) with its topology declared, so that an event published
// then reaches it. It is not closed while a service's database is
// unreachable, nor when Run fails first.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

func (d *Daemon) closeReadyWhenServing(ctx context.Context, running *internal.Daemon) {
	if running.WaitServing(ctx) == nil {
		close(d.ready)
	}
}

// Stop ends Run, waiting until it has drained and returned. It is safe to
// call twice, concurrently, and before Run (then it does nothing).
func (d *Daemon) Stop() {
	d.mu.Lock()
	cancel, ran := d.cancel, d.ran
	d.mu.Unlock()
	if !ran {
		return
	}
	cancel()
	<-d.done
}

// AdminAddr is the admin API's address (host:port), once Ready; "" before.
// A listen port of 0 in the config picks a free port: this says which.
func (d *Daemon) AdminAddr() string { a, _, _ := d.addrs(); return a }

// MetricsAddr is the metrics endpoint's address once Ready; "" before, or
// when metrics.listen is "-".
func (d *Daemon) MetricsAddr() string { _, m, _ := d.addrs(); return m }

// ConsoleAddr is the console's address once Ready; "" before, or when the
// console is off.
func (d *Daemon) ConsoleAddr() string { _, _, c := d.addrs(); return c }

func (d *Daemon) addrs() (adminAddr, metricsAddr, consoleAddr string) {
	d.mu.Lock()
	running := d.running
	d.mu.Unlock()
	if running == nil {
		return "", "", ""
	}
	a, m, c := running.Addrs()
	return addrString(a), addrString(m), addrString(c)
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
