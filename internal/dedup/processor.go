package dedup

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/batchscope"
	"github.com/platformd/platformd/internal/dbutil"
)

// Outcome is what happened to one event of a batch.
type Outcome uint8

// The outcomes of Process.
const (
	// OutcomeProcessed: the id was new; every handler succeeded and the
	// effects committed with the processed_event row.
	OutcomeProcessed Outcome = iota + 1
	// OutcomeDuplicate: the id was already recorded (or appeared earlier in
	// the same batch); no handler was called.
	OutcomeDuplicate
	// OutcomeFailed: a handler failed; the event's effects and its
	// processed_event row were rolled back.
	OutcomeFailed
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case OutcomeProcessed:
		return "processed"
	case OutcomeDuplicate:
		return "duplicate"
	case OutcomeFailed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Result is the outcome of one event.
type Result struct {
	Outcome Outcome
	// Err is the handler's error when Outcome is OutcomeFailed.
	Err error
	// Permanent is true when Err was marked with consumer.Permanent: no
	// retry can succeed.
	Permanent bool
	// Handler names the handler that failed.
	Handler string
	// BeyondHorizon is true when the database refused the event's id
	// because it is older than every partition of a partitioned
	// processed_event: its row may have been purged, so it cannot be
	// proven new (the beyond-horizon guard's case, decided by the
	// database). Permanent is then true too.
	BeyondHorizon bool
}

// durable reports whether the event's processed_event row is committed
// (or will be, with its transaction): processed or duplicate.
func (r Result) durable() bool {
	return r.Outcome == OutcomeProcessed || r.Outcome == OutcomeDuplicate
}

// ErrNoHandler is the permanent failure of an event no handler handles.
var ErrNoHandler = errors.New("no handler for event")

// PanicError is the failure of a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

// Error returns the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// Route is one handler of an event name, in registration order.
type Route struct {
	Name    string
	Handler consumer.Handler
}

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
func (nopObserver) Replay()         {}

// Processor runs batches of one service's events. It is safe for
// concurrent use; each call uses one pooled connection.
type Processor struct {
	db      *pgxpool.Pool
	routes  map[string][]Route
	obs     Observer
	retries int
	// order lists every handler once, each after the handlers routed
	// before it for some event (registration order).
	order []Route
	// inflight holds the ids whose batch is running in a Process call.
	inflight inflight
	tr       tracer
}

// task is one event of a Process call and, once known, its result. A
// batch's state is its tasks: each step reads and writes the tasks it is
// given, so nothing has to be kept in step by index.
type task struct {
	ev     *consumer.Event
	result Result
}

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

// NewProcessor returns a Processor over db.
func NewProcessor(db *pgxpool.Pool, cfg ProcessorConfig) *Processor {
	p := &Processor{db: db, routes: cfg.Routes, obs: cfg.Observer, retries: cmp.Or(cfg.ConflictRetries, ConflictRetriesDefault),
		tr: newTracer(cfg)}
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

// RoutesFor builds the routes of the named handlers from reg, in the order
// given.
func RoutesFor(reg *consumer.Registry, handlerNames []string) (map[string][]Route, error) {
	routes := map[string][]Route{}
	for _, name := range handlerNames {
		r, err := reg.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("dedup routes: %w", err)
		}
		for _, ev := range r.Events {
			routes[ev] = append(routes[ev], Route{Name: r.Name, Handler: r.Handler})
		}
	}
	return routes, nil
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

// handlerFailure rolls a transaction back because a handler failed: the
// event's fault, not the database's. The failing task's result is set when
// it is known (a batch call's failure names no event).
type handlerFailure struct{ cause error }

func (e *handlerFailure) Error() string { return "dedup: handler failed: " + e.cause.Error() }
func (e *handlerFailure) Unwrap() error { return e.cause }

// refusal rolls a transaction back because the database refused an id
// (a partitioned processed_event's CHECK or partition bounds, SQLSTATE
// 23514): the event's fault, settled by its result, never a reason to
// requeue the batch.
type refusal struct{ cause error }

func (e *refusal) Error() string { return "dedup: processed_event refused an id: " + e.cause.Error() }
func (e *refusal) Unwrap() error { return e.cause }

// ErrRefused is the error of an event whose id a partitioned
// processed_event refused (Result.Err wraps it).
var ErrRefused = errors.New("processed_event refused the event id")

// refusedByTable reports whether the dedup insert failed because the table
// refused a row: no partition for it, or the v7 CHECK.
func refusedByTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23514"
}

// refusedResult is the result of an event whose id the table refused: not
// a v7 id (permanent), older than every partition (beyond the horizon,
// permanent), or in a partition not created yet (retried: the scheduler
// creates partitions ahead).
func (p *Processor) refusedResult(ctx context.Context, id uuid.UUID, cause error) Result {
	if !IsV7(id) {
		err := consumer.Permanent(fmt.Errorf("%w: event id %s is a UUID version %d; this service's processed_event is partitioned by the ids' time and accepts UUID v7 ids only (%w)",
			ErrRefused, id, id.Version(), cause))
		return Result{Outcome: OutcomeFailed, Err: err, Permanent: true}
	}
	at := V7Time(id).UTC()
	from, to, ok, err := PartitionSpan(ctx, p.db)
	if err == nil && ok && at.Before(from) {
		err := consumer.Permanent(fmt.Errorf("%w: event id %s from %s is older than the oldest partition of processed_event (from %s): its row may have been purged with its partition",
			ErrRefused, id, at.Format(time.RFC3339), from.Format(time.RFC3339)))
		return Result{Outcome: OutcomeFailed, Err: err, Permanent: true, BeyondHorizon: true}
	}
	span := "no partition"
	if ok {
		span = fmt.Sprintf("partitions from %s to %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	return Result{Outcome: OutcomeFailed, Err: fmt.Errorf("%w: event id %s from %s has no partition of processed_event yet (%s; they are created ahead by the purge)",
		ErrRefused, id, at.Format(time.RFC3339), span)}
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
		commit = p.tr.startCommit(ctx)
		return nil
	})
	endSpan(commit, err)
	return err
}

// conflictCode returns the SQLSTATE of err when it is a deadlock or a
// serialization failure.
func conflictCode(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return "", false
	}
	switch pgErr.Code {
	case "40P01", "40001":
		return pgErr.Code, true
	}
	return "", false
}

// isEventFault reports whether err rolled back for one event's sake (a
// failing handler, an id the table refused), which its result settles.
func isEventFault(err error) bool {
	var hf *handlerFailure
	var rf *refusal
	return errors.As(err, &hf) || errors.As(err, &rf)
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
			if _, err := tx.Exec(ctx, `SET CONSTRAINTS ALL IMMEDIATE`); err != nil {
				return err
			}
		}
		for _, t := range ts {
			if t.result.Outcome == OutcomeFailed {
				continue
			}
			err := dbutil.WithSavepoint(ctx, tx, func(ctx context.Context, sp pgx.Tx) error {
				fresh, err := p.record(ctx, sp, []*task{t})
				var rf *refusal
				if errors.As(err, &rf) {
					t.result = p.refusedResult(ctx, t.ev.ID, rf.cause)
				}
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

// record inserts the ids of ts in tx, marks the tasks whose id was already
// there duplicates and returns the others (all of ts in bench builds that
// skip the insert).
func (p *Processor) record(ctx context.Context, tx pgx.Tx, ts []*task) ([]*task, error) {
	if skipDedupInsert {
		return ts, nil
	}
	// [16]byte encodes directly; pgtype.UUID goes through its Valuer and
	// allocates per element.
	ids := make([][16]byte, len(ts))
	for i, t := range ts {
		ids[i] = t.ev.ID
	}
	ictx, span := p.tr.start(ctx, SpanInsert, insertAttrs...)
	inserted, err := RecordIDs(ictx, tx, ids)
	endInsert(span, len(inserted), err)
	if err != nil {
		if refusedByTable(err) {
			return nil, &refusal{cause: err}
		}
		return nil, fmt.Errorf("insert processed_event: %w", err)
	}
	fresh := make([]*task, 0, len(ts))
	for _, t := range ts {
		if _, ok := inserted[t.ev.ID]; !ok {
			t.result = Result{Outcome: OutcomeDuplicate}
			continue
		}
		fresh = append(fresh, t)
	}
	return fresh, nil
}

const insertSQL = `INSERT INTO processed_event (event_id, processed_at)
SELECT unnest($1::uuid[]), now()
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id`

// RecordIDs is the dedup step's statement: it inserts ids into
// processed_event in tx with one INSERT ... ON CONFLICT DO NOTHING and
// returns those that were not there (an id given twice is inserted once).
// It sorts ids in place.
func RecordIDs(ctx context.Context, tx pgx.Tx, ids [][16]byte) (map[uuid.UUID]struct{}, error) {
	// Lock rows in one global order: two daemons inserting overlapping
	// ids (relay republishes) in different orders would deadlock (40P01).
	slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
	rows, err := tx.Query(ctx, insertSQL, ids)
	if err != nil {
		return nil, err
	}
	inserted := make(map[uuid.UUID]struct{}, len(ids))
	var id [16]byte
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		inserted[id] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return inserted, nil
}

// eventsScratch is runHandlers' working memory, reused across batches: a
// batch's events gathered per handler were the largest allocation of the
// hot path.
type eventsScratch struct{ events []consumer.Event }

var scratchPool = sync.Pool{New: func() any { return new(eventsScratch) }}

// runHandlers runs the handlers of the new events: handler by handler in
// registration order, a BatchHandler once over all its events, any other
// handler event by event. A handler's failure returns a *handlerFailure
// (with the failing task's result set when one event's call failed); any
// other error is the database's or the caller's.
func (p *Processor) runHandlers(ctx context.Context, tx pgx.Tx, fresh []*task) error {
	s := scratchPool.Get().(*eventsScratch)
	defer func() {
		clear(s.events[:cap(s.events)]) // drop the references to the deliveries' bodies
		s.events = s.events[:0]
		scratchPool.Put(s)
	}()
	for _, h := range p.order {
		s.events = s.events[:0]
		for _, t := range fresh {
			if routed(p.routes[t.ev.Name], h.Name) {
				s.events = append(s.events, *t.ev)
			}
		}
		if len(s.events) == 0 {
			continue
		}
		hctx, span := p.tr.startHandler(ctx, h.Name, len(s.events))
		if bh, ok := h.Handler.(consumer.BatchHandler); ok && len(s.events) > 1 {
			err := call(func() error { return bh.HandleBatch(hctx, tx, s.events) })
			endSpan(span, err)
			if err != nil {
				return handlerError(ctx, tx, h.Name, err, nil)
			}
			continue
		}
		for _, t := range fresh {
			if !routed(p.routes[t.ev.Name], h.Name) {
				continue
			}
			if err := call(func() error { return h.Handler.Handle(consumer.EventContext(ctx, *t.ev), tx, *t.ev) }); err != nil {
				endSpan(span, err)
				return handlerError(ctx, tx, h.Name, err, t)
			}
		}
		endSpan(span, nil)
	}
	return nil
}

// runEvent calls every handler of t's event in order, stopping at the first
// failure (see runHandlers for the errors).
func (p *Processor) runEvent(ctx context.Context, tx pgx.Tx, t *task) error {
	for _, r := range p.routes[t.ev.Name] {
		_, span := p.tr.startHandler(ctx, r.Name, 1)
		err := call(func() error { return r.Handler.Handle(consumer.EventContext(ctx, *t.ev), tx, *t.ev) })
		endSpan(span, err)
		if err != nil {
			return handlerError(ctx, tx, r.Name, err, t)
		}
	}
	return nil
}

// handlerError sorts a handler's error: the database's or the caller's
// fault is returned wrapped (the batch's outcome is unknown); the event's
// is recorded on t, when known, and returned as a *handlerFailure.
func handlerError(ctx context.Context, tx pgx.Tx, handler string, err error, t *task) error {
	if infra(ctx, tx, err) {
		return fmt.Errorf("handler %s: %w", handler, err)
	}
	if t != nil {
		t.result = Result{Outcome: OutcomeFailed, Err: err, Permanent: consumer.IsPermanent(err), Handler: handler}
	}
	return &handlerFailure{cause: err}
}

func routed(routes []Route, name string) bool {
	for _, r := range routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// call is the one recovery point of handler code: it runs fn and turns a
// panic into a PanicError. The panicked flag also catches a handler that
// ends its goroutine with runtime.Goexit (a test's t.FailNow): that cannot
// be stopped, but it is then reported as a failure of the event rather
// than vanishing.
func call(fn func() error) (err error) {
	panicked := true
	defer func() {
		if v := recover(); v != nil || panicked {
			if v == nil {
				v = "runtime.Goexit"
			}
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	err = fn()
	panicked = false
	return err
}

// unavailable is implemented by a handler's error that says the handler
// could not answer at all (a remote handler's process unreachable).
type unavailable interface{ HandlerUnavailable() bool }

// infra reports whether err is not the event's fault but the database's or
// the caller's: then the batch's outcome is unknown and nothing is acked.
// A deadline or cancellation of the handler's own (its HTTP call timing
// out) is the handler's failure, retried through the delay queues like
// any other: only the batch's ctx ending, or the connection closed (pgx
// closes it when a query's context ends mid-query), is infrastructure.
func infra(ctx context.Context, tx pgx.Tx, err error) bool {
	if ctx.Err() != nil {
		return true
	}
	var u unavailable
	if errors.As(err, &u) && u.HandlerUnavailable() {
		// A remote handler that cannot be reached (refused, timed out,
		// overloaded): no event's fault. The batch is requeued with no
		// attempt counted and the pool waits, as for its database.
		return true
	}
	if tx.Conn() == nil || tx.Conn().IsClosed() {
		return true
	}
	if pgconn.Timeout(err) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code == "57014" {
			// query_canceled: the handler's own statement ran past
			// statement_timeout; retry the event like any handler error.
			return false
		}
		switch pgErr.Code[:2] {
		case "08", // connection exception
			"53", // insufficient resources
			"57", // operator intervention: admin or crash shutdown
			"58": // system error
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}
