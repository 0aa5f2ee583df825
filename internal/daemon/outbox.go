package daemon

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/workers"
)

// TestOutboxKillAfterConfirmEnv, set to N > 0, makes the daemon SIGKILL
// itself after its relays' Nth confirmed batch, before the batch's rows are
// deleted: the crash between confirm and delete that the chaos suite and
// the demo provoke for real. It exists only for them; the daemon says so
// loudly.
const TestOutboxKillAfterConfirmEnv = "PLATFORMD_TEST_OUTBOX_KILL_AFTER_CONFIRM"

// relays are the daemon's outbox relays and their broker connection.
type relays struct {
	conn   *workers.Conn
	byName map[string]*outbox.Relay
}

// startOutbox starts a relay for every service whose relay is on (the
// default), on a publishing connection of their own.
func (d *Daemon) startOutbox(ctx context.Context) error {
	d.outbox = &relays{byName: map[string]*outbox.Relay{}}
	hook := killAfterConfirm(d.log)
	for _, svc := range d.services {
		if !svc.cfg.Outbox.Relay {
			continue
		}
		if d.outbox.conn == nil {
			d.outbox.conn = workers.NewConn(d.cfg.Broker.URL, "platformd-outbox", d.log)
		}
		r, err := outbox.New(outbox.Config{
			Service: svc.cfg.Name, DB: svc.db, Broker: d.outbox.conn, Exchange: d.cfg.Broker.Exchange,
			BatchSize: svc.cfg.Outbox.BatchSize, Poll: svc.cfg.Outbox.Poll, MaxBodyBytes: d.cfg.Broker.MaxBodyBytes,
			Metrics: d.metrics, Logger: d.log, TestAfterConfirmFunc: hook,
		})
		if err != nil {
			return err
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		d.outbox.byName[svc.cfg.Name] = r
	}
	return nil
}

// stoppers returns the relays, for the shutdown stage after the pools
// (each finishes its pass in flight, so the rows the last batches wrote
// still go out). Safe on nil.
func (rs *relays) stoppers() []startstop.Stopper {
	if rs == nil {
		return nil
	}
	out := make([]startstop.Stopper, 0, len(rs.byName))
	for _, r := range rs.byName {
		out = append(out, r)
	}
	return out
}

// resources returns the relays' broker connection, closed with the other
// connections. Safe on nil.
func (rs *relays) resources() []startstop.Stopper {
	if rs == nil || rs.conn == nil {
		return nil
	}
	return []startstop.Stopper{startstop.StopFunc(rs.conn.Close)}
}

// killAfterConfirm returns the TestOutboxKillAfterConfirmEnv hook, or nil
// when the variable is not set.
func killAfterConfirm(logger *slog.Logger) func([]uuid.UUID) {
	n, err := strconv.Atoi(os.Getenv(TestOutboxKillAfterConfirmEnv))
	if err != nil || n <= 0 {
		return nil
	}
	logger.Warn("daemon: "+TestOutboxKillAfterConfirmEnv+" is set: this daemon SIGKILLs itself between an outbox confirm and its delete. Tests only.",
		slog.Int("after_batches", n))
	var batches atomic.Int64
	return func(ids []uuid.UUID) {
		if batches.Add(1) == int64(n) {
			logger.Warn("daemon: killing itself between outbox confirm and delete", slog.Int("rows", len(ids)),
				slog.String("first_event_id", ids[0].String()), slog.String("last_event_id", ids[len(ids)-1].String()))
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way: nothing more may run
		}
	}
}
