// Package daemon is platformd's embedding API: a team whose handlers are Go
// code builds its own platformd binary by registering them in a
// consumer.Registry and handing it to Main, which is the whole platformd
// command line (run, migrate, check) over that registry.
//
//	func main() {
//		reg := consumer.NewRegistry()
//		reg.MustRegister(consumer.Registration{Name: "billing.open_invoice", ...})
//		os.Exit(daemon.Main(os.Args[1:], reg, os.Stderr))
//	}
//
// A Go program that manages its own lifecycle (and its tests) uses the same
// daemon through New, Run and Stop instead:
//
//	cfg, err := daemon.LoadConfig("platformd.yaml", reg)
//	d, err := daemon.New(cfg, reg)
//	go d.Run(ctx) // returns once ctx ends or Stop is called, after draining
//	<-d.Ready()
//
// and package daemontest starts one inside a test. A module outside this
// repository needs nothing else of platformd's but these packages and
// consumer: configuration, pools, the dedup step, the scheduler and the
// admin API come with them.
//
// Who owns what: this package owns the public surface only, the names a
// module outside this repository compiles against (Main, Config and its
// loaders, the Options, Daemon with Run once, Ready and Stop) and their
// lifecycle contract. Everything a daemon does (the configuration's
// checks, migrations, services and pools, reloads, the admin API, the
// order of shutdown) is package internal/daemon's: Main and Run call it
// and repeat none of it, so a change of behaviour is made there once, and
// a change here is a change of the public API.
package daemon

import (
	"io"

	"github.com/platformd/platformd/consumer"
	internal "github.com/platformd/platformd/internal/daemon"
)

// Main runs the platformd command line over reg and returns the process's
// exit code: 0 on success, 1 on a runtime error, 2 on a usage mistake or an
// invalid configuration (every mistake is written to stderr with its key's
// path before the broker or a database is touched). args are the command
// line without the program name, e.g. {"run", "-config", "platformd.yaml"}.
//
// `run` migrates every service database, then consumes until SIGINT or
// SIGTERM, then drains and settles in-flight work (a second signal exits at
// once, which the dedup table makes safe); `migrate` applies the platform's
// and the handlers' migrations; `check` validates the configuration only.
// Logs go to stderr. Main installs its own signal handling while it runs, so
// call it once per process.
func Main(args []string, reg *consumer.Registry, stderr io.Writer) int {
	return internal.Main(args, reg, stderr)
}
