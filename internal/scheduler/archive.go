package scheduler

import (
	"context"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/outbox"
)

// ArchiveEveryDefault is how often the "archive:<service>" job keeps a
// service's outbox archive to its period: a row stays at most that long
// past it, and each run trims about that much of a day's rows.
const ArchiveEveryDefault = 10 * time.Minute

// archiveTimeout bounds one archive run.
const archiveTimeout = time.Minute

// scheduledArchive is the body of an "archive:<service>" job: it removes
// the archive's rows past the service's period (outbox.PurgeArchive) and
// creates the partitions ahead.
// Safe to run on several daemons at once (the work runs under an advisory
// lock and is idempotent).
func (s *Scheduler) scheduledArchive(ctx context.Context, svc *Service) {
	if !s.enter() {
		return
	}
	defer s.runs.Done()
	ctx, cancel := context.WithTimeout(ctx, archiveTimeout)
	defer cancel()
	res, err := outbox.PurgeArchive(ctx, svc.DB, svc.Archive)
	if err == nil {
		_, err = outbox.EnsureArchivePartitions(ctx, svc.DB, outbox.ArchiveAheadDefault)
	}
	defer s.testSignals.ArchiveFinished.Signal(err)
	switch {
	case err != nil && ctx.Err() != nil:
		s.logger.InfoContext(ctx, "scheduler: archive run interrupted", slog.String("service", svc.Name), slog.Any("error", err))
	case err != nil:
		s.logger.ErrorContext(ctx, "scheduler: archive run failed", slog.String("service", svc.Name), slog.Any("error", err))
	case len(res.Dropped) > 0 || res.Rows > 0 || res.Trimmed > 0:
		s.logger.InfoContext(ctx, "scheduler: archive kept to its period", slog.String("service", svc.Name),
			slog.Any("partitions", res.Dropped), slog.Int64("rows", res.Rows), slog.Int64("trimmed", res.Trimmed), slog.Time("cutoff", res.Cutoff))
	}
}
