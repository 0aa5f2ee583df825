package dedup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/batchscope"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/query"
)

// ProcessorConfig configures a Processor.
type ProcessorConfig struct {
	// Routes maps event names to their handlers, called in slice order.
	Routes map[string][]Route
	// Observer sees the step's conflicts and replays; nil observes nothing.
	Observer Observer
	// ConflictRetries is how many times a batch transaction aborted by a
	// deadlock or a serialization failure is tried again at once before
	// its events are replayed one by one (default
	// ConflictRetriesDefault; -1: never).
	ConflictRetries int
	// Tracer, when set, traces every batch (see SpanBatch); nil (default)
	// traces nothing and costs nothing.
	Tracer trace.Tracer
	// TraceAttributes are set on every batch span (the daemon names the
	// service and the pool).
	TraceAttributes []attribute.KeyValue
	// ResolvedBy is what a failure resolved by this processor's
	// transactions records as resolved_by (the daemon names the pool).
	ResolvedBy string
}

// ConflictRetriesDefault is ProcessorConfig.ConflictRetries' default.
// PostgreSQL's documentation advises retrying a transaction that failed
// with 40P01 or 40001 at once: the conflict is a matter of timing, and
// sending a whole batch through a delay queue for one lock conflict is
// what made hot keys crawl. Each try again comes after a few milliseconds
// of jitter (conflictBackoff).
const ConflictRetriesDefault = 3

// Observer is told what the dedup step meets, for metrics and logs. Its
// methods are called from the workers' goroutines: implementations must be
// safe for concurrent use and fast.
type Observer interface {
	// Conflict is called when a batch transaction was aborted by a
	// deadlock or a serialization failure (sqlstate 40P01 or 40001).
	Conflict(sqlstate string)
	// Replay is called when a failed batch is replayed event by event.
	Replay()
}

type nopObserver struct{}

func (nopObserver) Conflict(string) {}

func (nopObserver) Replay() {}

// Processor runs batches of one service's events. It is safe for
// concurrent use; each call uses one pooled connection.
type Processor struct {
	db      txDB
	routes  map[string][]Route
	obs     Observer
	retries int
	// order lists every handler once, each after the handlers routed
	// before it for some event (registration order).
	order []Route
	// inflight holds the ids whose batch is running in a Process call.
	inflight inflight
	tr       tracer
	// resolvedBy is ProcessorConfig.ResolvedBy.
	resolvedBy string
}

// task is one event of a Process call and, once known, its result. A
// batch's state is its tasks: each step reads and writes the tasks it is
// given, so nothing has to be kept in step by index.
type task struct {
	ev     *consumer.Event
	result Result
}

// NewProcessor returns a Processor over db.
func NewProcessor(db dbpool.DB, cfg ProcessorConfig) *Processor {
	p := &Processor{db: db, routes: cfg.Routes, obs: cfg.Observer, retries: cmp.Or(cfg.ConflictRetries, ConflictRetriesDefault),
		tr: newTracer(cfg), resolvedBy: cfg.ResolvedBy}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	seen := map[string]bool{}
	// Routes of every event list handlers in registration order; merge
	// them into one order (stable across map iteration by sorting names
	// of events first).
	names := make([]string, 0, len(cfg.Routes))
	for ev := range cfg.Routes {
		names = append(names, ev)
	}
	slices.Sort(names)
	for _, ev := range names {
		for _, r := range cfg.Routes[ev] {
			if !seen[r.Name] {
				seen[r.Name] = true
				p.order = append(p.order, r)
			}
		}
	}
	return p
}

// Handles reports whether some handler handles eventName.
func (p *Processor) Handles(eventName string) bool { return len(p.routes[eventName]) > 0 }

// Process applies a batch of events in one READ COMMITTED transaction and
// returns one Result per event, in order. An error means the batch's
// outcome is not known to be durable (the database could not be reached,
// the connection died, the commit failed or ctx ended): nothing may be
// acknowledged, every event must be delivered again, and its redelivery
// meets the processed_event row or not and does the right thing.
func (p *Processor) Process(ctx context.Context, events []consumer.Event) (results []Result, err error) {
	ctx, span := p.tr.startBatch(ctx, events)
	defer func() { p.tr.endBatch(span, len(events), results, err) }()
	// What handlers learn in this call (a remote handler's answers) is
	// theirs for this call's tries and replay, and no longer.
	ctx = batchscope.With(ctx)
	tasks := make([]task, len(events))
	run := make([]*task, 0, len(events))
	for i := range events {
		t := &tasks[i]
		t.ev = &events[i]
		if !p.Handles(t.ev.Name) {
			// Never recorded: a later deployment with a handler for it may
			// still apply it.
			err := consumer.Permanent(fmt.Errorf("%w %q", ErrNoHandler, t.ev.Name))
			t.result = Result{Outcome: OutcomeFailed, Err: err, Permanent: true}
			continue
		}
		run = append(run, t)
	}
	if err := p.process(ctx, run); err != nil {
		return nil, err
	}
	results = make([]Result, len(tasks))
	for i := range tasks {
		results[i] = tasks[i].result
	}
	return results, nil
}

// process runs ts, sets every task's result, or returns an error when the
// outcome is unknown. The first copy of each id runs; later copies in the
// batch are its duplicates, and copies of ids another call holds take that
// call's outcome (a duplicate once it committed, else they run again).
func (p *Processor) process(ctx context.Context, ts []*task) error {
	if len(ts) == 0 {
		return nil
	}
	if skipDedupInsert { // bench builds only: no claims, nothing skipped
		return p.run(ctx, firstCopies(ts))
	}
	own, mine, waits := p.inflight.claim(ts)
	var err error
	if len(mine) > 0 {
		err = p.run(ctx, mine)
	}
	p.inflight.release(own, mine, err)
	if err != nil {
		return err
	}
	var again []*task
	for _, w := range waits {
		committed, err := w.claim.wait(ctx)
		if err != nil {
			return fmt.Errorf("dedup: waiting for event %s in another batch: %w", w.t.ev.ID, err)
		}
		if committed {
			w.t.result = Result{Outcome: OutcomeDuplicate}
			if id := w.t.ev.Delivery.FailureID; id != uuid.Nil {
				// The other call's commit applied the event; this copy only
				// learns it now, outside any transaction of its own. The
				// row is resolved on its own: its outcome is already
				// durable, and a lost update here meets the row again with
				// the copy's redelivery.
				if err := failure.Resolve(ctx, p.db, []uuid.UUID{id}, p.resolvedBy); err != nil {
					return fmt.Errorf("dedup: %w", err)
				}
			}
			continue
		}
		again = append(again, w.t)
	}
	return p.process(ctx, again)
}

// firstCopies returns the first task of each id among ts, marking the
// later copies duplicates.
func firstCopies(ts []*task) []*task {
	seen := make(map[uuid.UUID]struct{}, len(ts))
	first := ts[:0:0]
	for _, t := range ts {
		if _, dup := seen[t.ev.ID]; dup {
			t.result = Result{Outcome: OutcomeDuplicate}
			continue
		}
		seen[t.ev.ID] = struct{}{}
		first = append(first, t)
	}
	return first
}

// run applies ts (distinct ids) in one transaction. A transaction aborted
// by a deadlock or a serialization failure is tried again at once, up to
// the configured retries; when a handler fails (or the conflicts go on),
// the events are replayed in isolation.
func (p *Processor) run(ctx context.Context, ts []*task) error {
	for attempt := 0; ; attempt++ {
		err := p.tryBatch(ctx, ts)
		code, conflict := conflictCode(err)
		if conflict {
			p.obs.Conflict(code)
			if attempt < p.retries {
				if err := conflictPause(ctx, attempt); err != nil {
					return fmt.Errorf("dedup: %w", err)
				}
				continue
			}
		}
		if err == nil {
			return nil
		}
		eventFault := isEventFault(err)
		// Class 22/23 that is no event's fault was raised at COMMIT by a
		// deferred constraint: the server rolled back (the outcome is
		// known), and the same batch would be refused every time.
		deferred := !eventFault && dbutil.DataError(err)
		if !conflict && !eventFault && !deferred {
			return fmt.Errorf("dedup: %w", err)
		}
		// Each event runs again on its own: a refused id or a failing
		// handler is found that way and the others commit. A conflict left
		// after the retries is not an event's fault, and a commit refused
		// by a deferred constraint undid what the try called processed: no
		// event keeps the outcome the failed try gave it.
		if conflict || deferred {
			for _, t := range ts {
				t.result = Result{}
			}
		}
		p.obs.Replay()
		return p.runIsolated(ctx, ts, deferred)
	}
}

// conflictBackoff is the most a first try again after a conflict waits;
// each further one may wait twice as long. Without it the victim's new
// transaction could take a row the survivor was about to lock again, and
// deadlock with it a second time (seen on a loaded machine).
const conflictBackoff = 5 * time.Millisecond

// conflictPause waits a random time under conflictBackoff << attempt, or
// until ctx ends.
func conflictPause(ctx context.Context, attempt int) error {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(conflictBackoff << attempt))))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// tryBatch runs ts in one transaction: one insert of their ids, the
// handlers of the new ones, one commit.
func (p *Processor) tryBatch(ctx context.Context, ts []*task) error {
	for _, t := range ts {
		t.result = Result{} // a try again starts from nothing known
	}
	var commit trace.Span
	err := dbutil.WithTx(ctx, p.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		fresh, err := p.record(ctx, tx, ts)
		if err != nil {
			return err
		}
		if err := p.runHandlers(ctx, tx, fresh); err != nil {
			return err
		}
		for _, t := range fresh {
			t.result = Result{Outcome: OutcomeProcessed}
		}
		if err := p.resolveFailures(ctx, tx, ts); err != nil {
			return err
		}
		commit = p.tr.startCommit(ctx)
		return nil
	})
	endSpan(commit, err)
	return err
}

// resolveFailures marks resolved, in tx, the stored failures whose copies
// among ts are applied or duplicates: in the transaction that makes their
// outcome durable, so that a failure is resolved exactly when its event's
// effects are committed. A batch without such copies costs nothing.
func (p *Processor) resolveFailures(ctx context.Context, tx pgx.Tx, ts []*task) error {
	var ids []uuid.UUID
	for _, t := range ts {
		if id := t.ev.Delivery.FailureID; id != uuid.Nil && t.result.durable() {
			ids = append(ids, id)
		}
	}
	return failure.Resolve(ctx, tx, ids, p.resolvedBy)
}

// parks tracks, in an isolated replay, the sequence keys that already
// failed in the call: their later events are parked. Events carry a
// sequence key only in a pool that keeps its keys in order (failures
// ordered), so the others never park.
type parks map[string]struct{}

// parked reports whether t must not run because an earlier event of its
// key failed.
func (k parks) parked(t *task) bool {
	key := t.ev.Delivery.SequenceKey
	if key == "" {
		return false
	}
	if _, ok := k[key]; ok {
		t.result = Result{Outcome: OutcomeParked}
		return true
	}
	return false
}

// note records t's key when t failed.
func (k parks) note(t *task) {
	if key := t.ev.Delivery.SequenceKey; key != "" && t.result.Outcome == OutcomeFailed {
		k[key] = struct{}{}
	}
}

// runIsolated replays ts with one savepoint per event: each event's insert
// and handlers succeed or roll back on their own. A task whose failure the
// first try already saw is not run again. With immediate (the batch's
// commit was refused by a deferred constraint) the replay checks every
// constraint at its statement, so that the violation fails the event that
// made it, not the commit of all; a handler that relies on deferral within
// its own event fails in that replay and is retried.
func (p *Processor) runIsolated(ctx context.Context, ts []*task, immediate bool) error {
	ctx, replay := p.tr.start(ctx, SpanReplay)
	var commit trace.Span
	err := dbutil.WithTx(ctx, p.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if immediate {
			if _, err := setConstraintsImmediate.Run(ctx, tx, query.NoParams{}); err != nil {
				return err
			}
		}
		var span partitionSpan
		keys := parks{}
		for _, t := range ts {
			if keys.parked(t) {
				continue
			}
			if t.result.Outcome == OutcomeFailed {
				keys.note(t)
				continue
			}
			var rf *refusal
			err := dbutil.WithSavepoint(ctx, tx, func(ctx context.Context, sp pgx.Tx) error {
				fresh, err := p.record(ctx, sp, []*task{t})
				if err != nil || len(fresh) == 0 {
					return err
				}
				if err := p.runEvent(ctx, sp, t); err != nil {
					return err
				}
				t.result = Result{Outcome: OutcomeProcessed}
				return nil
			})
			if err != nil && !isEventFault(err) {
				return err
			}
			if errors.As(err, &rf) { // rolled back to the savepoint: tx answers again
				t.result = refusedResult(ctx, tx, &span, t.ev.ID, rf.cause)
			}
			keys.note(t)
		}
		if err := p.resolveFailures(ctx, tx, ts); err != nil {
			return err
		}
		commit = p.tr.startCommit(ctx)
		return nil
	})
	endSpan(commit, err)
	endSpan(replay, err)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	return nil
}
