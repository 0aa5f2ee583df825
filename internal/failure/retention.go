package failure

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// PurgeBatchDefault is PurgeClosed's batch when batch is not positive.
const PurgeBatchDefault = 1000

// PurgeClosed deletes the resolved and discarded failures whose row last
// changed more than olderThan ago (by the database's clock), in batches of
// batch rows (PurgeBatchDefault when not positive), each its own
// statement (failed_event_closed_idx), until a batch comes back short; it
// returns how many it deleted, also when ctx ends it midway. Their edits
// go with them. Safe to run twice at once: a row is deleted once.
func (s *Store) PurgeClosed(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	batch = cmp.Or(max(batch, 0), PurgeBatchDefault)
	var total int64
	for {
		tag, err := purgeClosed.Run(ctx, s.db, purgeParams{OlderThan: olderThan, Batch: batch})
		if err != nil {
			return total, fmt.Errorf("failure: purge closed: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// Count is the number of failures of one pool, reason and state.
type Count struct {
	Pool, Reason, State string
	N                   int64
}

// Counts returns the number of failures by pool, reason and state, every
// state included, sorted by pool, reason and state (the metric
// platformd_failed_events). Safe for concurrent use.
func (s *Store) Counts(ctx context.Context) ([]Count, error) {
	out, err := counts.All(ctx, s.db, struct{}{})
	if err != nil {
		return nil, fmt.Errorf("failure: counts: %w", err)
	}
	return out, nil
}
