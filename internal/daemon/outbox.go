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
)

// TestOutboxKillAfterConfirmEnv, set to N > 0, makes the daemon SIGKILL
// itself after its relays' Nth confirmed batch, before the batch's rows are
// deleted: the crash between confirm and delete that the chaos suite and
// the demo provoke for real. It exists only for them; the daemon says so
// loudly.
const TestOutboxKillAfterConfirmEnv = "PLATFORMD_TEST_OUTBOX_KILL_AFTER_CONFIRM"

// startRelay starts the service's outbox relay when it is on (the
// default), on the daemon's outbox publishing connection.
func (s *service) startRelay(ctx context.Context) error {
	o := s.config().Outbox
	if !o.Relay {
		return nil
	}
	d := s.d
	r, err := outbox.New(outbox.Config{
		Service: s.name, DB: s.db, Broker: d.outboxConn, Exchange: d.cfg.Broker.Exchange,
		BatchSize: o.BatchSize, Poll: o.Poll, MaxBodyBytes: d.cfg.Broker.MaxBodyBytes, Archive: o.Archive > 0,
		Metrics: d.metrics, Logger: d.log, TestAfterConfirmFunc: d.killHook,
	})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.relay = r
	s.mu.Unlock()
	return nil
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
