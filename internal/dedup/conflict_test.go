package dedup_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// countingObserver records what a Processor observed.
type countingObserver struct {
	mu        sync.Mutex
	conflicts map[string]int
	replays   int
}

func (o *countingObserver) Conflict(code string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conflicts == nil {
		o.conflicts = map[string]int{}
	}
	o.conflicts[code]++
}

func (o *countingObserver) Replay() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.replays++
}

// Two daemons whose handlers lock the same two rows in opposite orders
// deadlock; PostgreSQL aborts one transaction with 40P01. The victim's
// batch is tried again at once and commits: both events processed, one
// conflict observed, no event-by-event replay and nothing sent to retry.
// With retries off, the same deadlock sends the victim's batch to the
// event-by-event replay.
func TestProcessDeadlockIsRetriedAtOnce(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{0, -1} {
		t.Run(map[int]string{0: "retried at once", -1: "retries off: replayed"}[retries], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			_, err := b.db.Exec(ctx, `CREATE TABLE lockme (k int PRIMARY KEY); INSERT INTO lockme VALUES (1), (2)`)
			require.NoError(t, err)
			// Both first locks are taken before either second one is
			// asked for: a deadlock, every time, on the first try only.
			var firstLocks sync.WaitGroup
			firstLocks.Add(2)
			var calls atomic.Int32
			b.reg.MustRegister(consumer.Registration{
				Name: "test.lock_pair", Events: []string{shop.EventOrderPlaced},
				Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
					first, second := 1, 2
					if ev.Attempt == 1 { // the test marks one event "reverse"
						first, second = 2, 1
					}
					if _, err := tx.Exec(ctx, `SELECT 1 FROM lockme WHERE k = $1 FOR UPDATE`, first); err != nil {
						return err
					}
					if calls.Add(1) <= 2 {
						firstLocks.Done()
						firstLocks.Wait()
					}
					_, err := tx.Exec(ctx, `SELECT 1 FROM lockme WHERE k = $1 FOR UPDATE`, second)
					return err
				}),
			})
			routes, err := dedup.RoutesFor(b.reg, []string{"test.lock_pair"})
			require.NoError(t, err)
			observers := []*countingObserver{{}, {}}
			forward, reverse := orderEvent(t, 1), orderEvent(t, 1)
			reverse.Attempt = 1
			var wg sync.WaitGroup
			results := make([][]dedup.Result, 2)
			for i, ev := range []consumer.Event{forward, reverse} {
				p := dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes, Observer: observers[i], ConflictRetries: retries})
				wg.Go(func() {
					rs, err := p.Process(ctx, []consumer.Event{ev})
					require.NoError(t, err)
					results[i] = rs
				})
			}
			wg.Wait()
			processed := 0
			for i := range results {
				if results[i][0].Outcome == dedup.OutcomeProcessed {
					processed++
				}
			}
			conflicts, replays := 0, 0
			for _, o := range observers {
				conflicts += o.conflicts["40P01"]
				replays += o.replays
			}
			// One deadlock by construction; a victim's try again may meet
			// the survivor once more (rarely: it waits a jittered moment).
			require.GreaterOrEqual(t, conflicts, 1, "the deadlock's victim counts it")
			if retries == 0 {
				require.Zero(t, replays, "the victim's batch is tried again whole, not event by event")
				require.Equal(t, 2, processed, "both events processed in this call")
				require.Equal(t, 1, b.processedRows(t, forward.ID))
				require.Equal(t, 1, b.processedRows(t, reverse.ID))
				return
			}
			// Without retries the victim's batch goes to the event-by-event
			// replay, where its event may meet the survivor again and fail
			// (then it would go through a delay queue).
			require.Equal(t, 1, replays)
			require.GreaterOrEqual(t, processed, 1)
		})
	}
}
