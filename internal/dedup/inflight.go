package dedup

import (
	"context"
	"sync"

	"github.com/google/uuid"
)

// inflight is the set of event ids that Process calls of one Processor
// (the workers of one pool) hold in open transactions. A relay republish
// often reaches a worker while its original is still in another worker's
// transaction; in the database the copy's insert would wait on the
// original's row lock inside its own transaction, holding the locks of
// its whole batch meanwhile (other workers then queue behind it). The copy
// is instead left out of its batch's transaction and waits here, after
// that transaction, for the original's outcome: committed, it is a
// duplicate without a round trip; not committed, it is processed then.
// Daemons sharing a database still meet on the row lock, as the seed says.
type inflight struct {
	mu  sync.Mutex
	ids map[uuid.UUID]claim
}

// batchClaim is one Process call's hold on the ids it runs: done is closed
// once their outcome is known, failed set before when the call's
// transaction did not commit. One per batch, so that claiming costs a map
// entry per event and no allocation.
type batchClaim struct {
	done   chan struct{}
	failed bool
}

// claim is an id's entry: the holding batch and the task running the id.
type claim struct {
	batch *batchClaim
	t     *task
}

// wait blocks until the holder's outcome is known and reports whether the
// event's row is durable, or returns ctx's error.
func (c claim) wait(ctx context.Context) (bool, error) {
	select {
	case <-c.batch.done:
		// The holder's tasks are final once done is closed.
		return !c.batch.failed && c.t.result.durable(), nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// contended is a task whose id another Process call holds.
type contended struct {
	t     *task
	claim claim
}

// claim claims the ids of ts not held by another call and returns the
// call's claim, the tasks claimed and those to wait for. A later copy of an
// id this call already claimed is a duplicate of the first (its result set).
func (f *inflight) claim(ts []*task) (own *batchClaim, mine []*task, waits []contended) {
	own = &batchClaim{done: make(chan struct{})}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = make(map[uuid.UUID]claim)
	}
	mine = make([]*task, 0, len(ts))
	for _, t := range ts {
		if c, held := f.ids[t.ev.ID]; held {
			if c.batch == own {
				t.result = Result{Outcome: OutcomeDuplicate}
				continue
			}
			waits = append(waits, contended{t: t, claim: c})
			continue
		}
		f.ids[t.ev.ID] = claim{batch: own, t: t}
		mine = append(mine, t)
	}
	return own, mine, waits
}

// release publishes the outcome of the claimed tasks: their results, and
// whether their transaction committed (err nil).
func (f *inflight) release(own *batchClaim, mine []*task, err error) {
	own.failed = err != nil
	f.mu.Lock()
	for _, t := range mine {
		delete(f.ids, t.ev.ID)
	}
	f.mu.Unlock()
	close(own.done)
}
