package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/metrics"
)

// FailuresEveryDefault is how often the "failures:<service>" job deletes
// the resolved and discarded failures past their retention and counts the
// store for platformd_failed_events: the gauge is at most that old.
const FailuresEveryDefault = 30 * time.Second

// failuresTimeout bounds one failures run.
const failuresTimeout = time.Minute

// scheduledFailures is the body of a "failures:<service>" job: it keeps
// the service's failure store to its retention (failure.PurgeClosed) and
// sets the failed-events gauge from its counts. Safe to run on several
// daemons at once: a row is deleted once, and each daemon's gauge reads
// the same rows.
func (s *Scheduler) scheduledFailures(ctx context.Context, svc *Service) {
	if !s.enter() {
		return
	}
	defer s.runs.Done()
	ctx, cancel := context.WithTimeout(ctx, failuresTimeout)
	defer cancel()
	store := failure.NewStore(svc.DB)
	deleted, err := store.PurgeClosed(ctx, svc.FailureRetention, 0)
	if err == nil && s.metrics != nil {
		var counts []failure.Count
		if counts, err = store.Counts(ctx); err == nil {
			out := make([]metrics.FailedCount, len(counts))
			for i, c := range counts {
				out[i] = metrics.FailedCount{Pool: c.Pool, Reason: c.Reason, State: c.State, N: c.N}
			}
			s.metrics.Failures.SetFailedEvents(svc.Name, out)
		}
	}
	defer s.testSignals.FailuresFinished.Signal(err)
	switch {
	case err != nil && ctx.Err() != nil:
		s.logger.InfoContext(ctx, "scheduler: failures run interrupted", slog.String("service", svc.Name), slog.Any("error", err))
	case err != nil:
		s.logger.ErrorContext(ctx, "scheduler: failures run failed", slog.String("service", svc.Name), slog.Any("error", err))
	case deleted > 0:
		s.logger.InfoContext(ctx, "scheduler: failures past their retention deleted", slog.String("service", svc.Name),
			slog.Int64("rows", deleted), slog.Duration("retention", svc.FailureRetention))
	}
}
