// Package daemontest starts a platformd daemon inside a Go test, the way
// River's rivertest serves River's users: a team that builds its own
// daemon (package daemon) tests its handlers against the real PostgreSQL
// and RabbitMQ with the very daemon it ships, and the repository's own
// tests start theirs the same way.
//
//	d := daemontest.Start(t, "platformd.yaml", reg)
//	conn := dial(d.AdminAddr()) // admin.listen: 127.0.0.1:0 picks a free port
//
// Start waits until the daemon is ready and stops it (draining) when the
// test ends; a start that fails fails the test.
//
// Work tests one handler without a daemon or a broker (River's
// rivertest.Worker): it runs the daemon's real dedup step over one event
// in the test's own transaction, so that the test reads the handler's
// effects and rolls them back:
//
//	res, err := daemontest.Work(t, tx, reg, "stock.reserve", ev)
package daemontest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
)

// ReadyTimeoutDefault bounds how long Start waits for the daemon to be
// ready (migrations included).
const ReadyTimeoutDefault = 60 * time.Second

// Start loads the configuration file at path against reg, runs the daemon
// in the background, waits until it is ready (ReadyTimeoutDefault), and
// registers its Stop with t.Cleanup, where Run's error, if any, fails the
// test. Listen addresses of port 0 (`127.0.0.1:0`) pick free ports; the
// daemon's AdminAddr, MetricsAddr and ConsoleAddr say which.
func Start(t testing.TB, path string, reg *consumer.Registry, opts ...daemon.Option) *daemon.Daemon {
	t.Helper()
	cfg, err := daemon.LoadConfig(path, reg)
	if err != nil {
		t.Fatalf("daemontest: %v", err)
	}
	return run(t, cfg, reg, opts)
}

// StartYAML is Start over a configuration given as text, written to a
// file of the test's temporary directory first (so that reloads work;
// relative paths in it resolve against that directory: give absolute
// ones).
func StartYAML(t testing.TB, yaml string, reg *consumer.Registry, opts ...daemon.Option) *daemon.Daemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "platformd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatalf("daemontest: %v", err)
	}
	return Start(t, path, reg, opts...)
}

func run(t testing.TB, cfg *daemon.Config, reg *consumer.Registry, opts []daemon.Option) *daemon.Daemon {
	t.Helper()
	d, err := daemon.New(cfg, reg, opts...)
	if err != nil {
		t.Fatalf("daemontest: %v", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		d.Stop()
		if err := <-errc; err != nil {
			t.Errorf("daemontest: daemon run: %v", err)
		}
	})
	timer := time.NewTimer(ReadyTimeoutDefault)
	defer timer.Stop()
	select {
	case <-d.Ready():
		return d
	case err := <-errc:
		stopped = true
		t.Fatalf("daemontest: daemon did not start: %v", err)
	case <-timer.C:
		t.Fatalf("daemontest: daemon not ready after %s", ReadyTimeoutDefault)
	}
	return nil
}
