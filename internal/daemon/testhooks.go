//go:build platformd_testhooks

package daemon

import (
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/google/uuid"
)

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
