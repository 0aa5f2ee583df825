package dedup

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dbutil"
)

// partitionSpan answers PartitionSpan once for a replay, on the replay's
// own transaction: a burst of refused ids costs one catalog query and no
// connection but the batch's.
type partitionSpan struct {
	done     bool
	from, to time.Time
	ok       bool
	err      error
}

func (s *partitionSpan) get(ctx context.Context, tx pgx.Tx) (from, to time.Time, ok bool, err error) {
	if !s.done {
		// In a savepoint of its own: a failed read leaves tx usable.
		s.err = dbutil.WithSavepoint(ctx, tx, func(ctx context.Context, sp pgx.Tx) error {
			var err error
			s.from, s.to, s.ok, err = PartitionSpan(ctx, sp)
			return err
		})
		s.done = true
	}
	return s.from, s.to, s.ok, s.err
}

// refusedResult is the result of an event whose id the table refused: not
// a v7 id (permanent), older than every partition (beyond the horizon,
// permanent), or in a partition not created yet (retried: the scheduler
// creates partitions ahead). The partitions are read through span in tx,
// the replay's transaction.
func refusedResult(ctx context.Context, tx pgx.Tx, span *partitionSpan, id uuid.UUID, cause error) Result {
	if !IsV7(id) {
		err := consumer.Permanent(fmt.Errorf("%w: event id %s is a UUID version %d; this service's processed_event is partitioned by the ids' time and accepts UUID v7 ids only (%w)",
			ErrRefused, id, id.Version(), cause))
		return Result{Outcome: OutcomeFailed, Err: err, Permanent: true}
	}
	at := V7Time(id).UTC()
	from, to, ok, err := span.get(ctx, tx)
	if err == nil && ok && at.Before(from) {
		err := consumer.Permanent(fmt.Errorf("%w: event id %s from %s is older than the oldest partition of processed_event (from %s): its row may have been purged with its partition",
			ErrRefused, id, at.Format(time.RFC3339), from.Format(time.RFC3339)))
		return Result{Outcome: OutcomeFailed, Err: err, Permanent: true, BeyondHorizon: true}
	}
	parts := "no partition"
	if ok {
		parts = fmt.Sprintf("partitions from %s to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return Result{Outcome: OutcomeFailed, Err: fmt.Errorf("%w: event id %s from %s has no partition of processed_event yet (%s; they are created ahead by the purge)",
		ErrRefused, id, at.Format(time.RFC3339), parts)}
}
