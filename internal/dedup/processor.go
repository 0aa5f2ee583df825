package dedup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/consumer"
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
	// SkipDedupInsert runs handlers without writing processed_event. It
	// exists only to measure what the dedup step costs (bench); it removes
	// the exactly-once guarantee.
	SkipDedupInsert bool
}

// Processor runs batches of one service's events. It is safe for
// concurrent use; each call uses one pooled connection.
type Processor struct {
	db     *pgxpool.Pool
	routes map[string][]Route
	skip   bool
	// order lists every handler once, each after the handlers routed
	// before it for some event (registration order).
	order []Route
	// inflight holds the ids whose batch is running in a Process call.
	inflight inflight
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
// once their outcome is known, committed (by position in the call's
// events) set before. One per batch, so that claiming costs a map entry
// per event and no allocation.
type batchClaim struct {
	done      chan struct{}
	committed []bool
}

// claim is an id's entry: the holding batch and the id's position in it.
type claim struct {
	batch *batchClaim
	i     int
}

// wait blocks until the holder's outcome is known and reports whether the
// event's row is durable, or returns ctx's error.
func (c claim) wait(ctx context.Context) (bool, error) {
	select {
	case <-c.batch.done:
		return c.batch.committed[c.i], nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// claimAll claims the ids of events[idx...] not held by another call and
// returns the batch's claim, the indexes claimed and, for the others, the
// indexes and the claims to wait on. A later copy of an id this batch
// already claimed is a duplicate of the first (its result recorded).
func (f *inflight) claimAll(events []consumer.Event, idx []int, results []Result) (own *batchClaim, mine, contended []int, waits []claim) {
	own = &batchClaim{done: make(chan struct{}), committed: make([]bool, len(events))}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = make(map[uuid.UUID]claim)
	}
	mine = idx[:0:0]
	for _, i := range idx {
		if c, held := f.ids[events[i].ID]; held {
			if c.batch == own {
				results[i].Outcome = OutcomeDuplicate
				continue
			}
			contended = append(contended, i)
			waits = append(waits, c)
			continue
		}
		f.ids[events[i].ID] = claim{batch: own, i: i}
		mine = append(mine, i)
	}
	return own, mine, contended, waits
}

// release publishes the outcome of the claimed events[idx...]: committed
// when err is nil and the event's row is durable (processed or duplicate).
func (f *inflight) release(own *batchClaim, events []consumer.Event, idx []int, results []Result, err error) {
	for _, i := range idx {
		own.committed[i] = err == nil && (results[i].Outcome == OutcomeProcessed || results[i].Outcome == OutcomeDuplicate)
	}
	f.mu.Lock()
	for _, i := range idx {
		delete(f.ids, events[i].ID)
	}
	f.mu.Unlock()
	close(own.done)
}

// NewProcessor returns a Processor over db.
func NewProcessor(db *pgxpool.Pool, cfg ProcessorConfig) *Processor {
	p := &Processor{db: db, routes: cfg.Routes, skip: cfg.SkipDedupInsert}
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
func (p *Processor) Process(ctx context.Context, events []consumer.Event) ([]Result, error) {
	results := make([]Result, len(events))
	handled := make([]int, 0, len(events))
	for i := range events {
		if !p.Handles(events[i].Name) {
			// Never recorded: a later deployment with a handler for it may
			// still apply it.
			err := consumer.Permanent(fmt.Errorf("%w %q", ErrNoHandler, events[i].Name))
			results[i] = Result{Outcome: OutcomeFailed, Err: err, Permanent: true}
			continue
		}
		handled = append(handled, i)
	}
	if len(handled) == 0 {
		return results, nil
	}
	if p.skip { // the bench's no-dedup mode: no claims, nothing skipped
		return results, p.processClaimed(ctx, events, firstCopies(events, handled, results), results)
	}
	// The first copy of each id in the batch is the one that runs; later
	// copies are duplicates of it.
	own, mine, contended, waits := p.inflight.claimAll(events, handled, results)
	var err error
	if len(mine) > 0 {
		err = p.processClaimed(ctx, events, mine, results)
	}
	p.inflight.release(own, events, mine, results, err)
	if err != nil {
		return nil, err
	}
	if len(contended) == 0 {
		return results, nil
	}
	// Copies of events another call holds: their outcome decides.
	var again []int
	for k, i := range contended {
		committed, err := waits[k].wait(ctx)
		if err != nil {
			return nil, fmt.Errorf("dedup: waiting for event %s in another batch: %w", events[i].ID, err)
		}
		if committed {
			results[i] = Result{Outcome: OutcomeDuplicate}
			continue
		}
		again = append(again, i)
	}
	if len(again) > 0 {
		sub := make([]consumer.Event, len(again))
		for k, i := range again {
			sub[k] = events[i]
		}
		rs, err := p.Process(ctx, sub)
		if err != nil {
			return nil, err
		}
		for k, i := range again {
			results[i] = rs[k]
		}
	}
	return results, nil
}

// firstCopies returns the first index of each id among events[idx...],
// recording the later copies as duplicates.
func firstCopies(events []consumer.Event, idx []int, results []Result) []int {
	seen := make(map[uuid.UUID]struct{}, len(idx))
	first := idx[:0:0]
	for _, i := range idx {
		if _, dup := seen[events[i].ID]; dup {
			results[i].Outcome = OutcomeDuplicate
			continue
		}
		seen[events[i].ID] = struct{}{}
		first = append(first, i)
	}
	return first
}

// processClaimed runs events[primaries...] (distinct ids) in one
// transaction, and replays them in isolation when a handler fails.
func (p *Processor) processClaimed(ctx context.Context, events []consumer.Event, primaries []int, results []Result) error {
	failed, err := p.processFast(ctx, events, primaries, results)
	if err != nil {
		return err
	}
	if failed == noFailure {
		return nil
	}
	return p.processIsolated(ctx, events, primaries, failed, results)
}

// processFast inserts every id in one statement, runs the handlers of the
// inserted ones and commits once. On a handler failure it rolls back and
// returns the failing index (its result recorded) or unknownFailure, so
// that the caller replays the batch in isolation; noFailure means
// committed.
func (p *Processor) processFast(ctx context.Context, events []consumer.Event, primaries []int, results []Result) (int, error) {
	tx, err := p.begin(ctx)
	if err != nil {
		return noFailure, err
	}
	defer rollback(ctx, tx)

	var inserted map[uuid.UUID]struct{}
	if !p.skip {
		inserted, err = insertIDs(ctx, tx, events, primaries)
		if err != nil {
			return noFailure, fmt.Errorf("dedup: insert processed_event: %w", err)
		}
	}
	fresh := make([]int, 0, len(primaries))
	for _, i := range primaries {
		if !p.skip {
			if _, ok := inserted[events[i].ID]; !ok {
				results[i] = Result{Outcome: OutcomeDuplicate}
				continue
			}
		}
		fresh = append(fresh, i)
	}
	if len(fresh) > 0 {
		failed, err := p.runFresh(ctx, tx, events, fresh, results)
		if err != nil || failed != noFailure {
			return failed, err
		}
	}
	for _, i := range fresh {
		results[i] = Result{Outcome: OutcomeProcessed}
	}
	if err := tx.Commit(ctx); err != nil {
		return noFailure, fmt.Errorf("dedup: commit: %w", err)
	}
	return noFailure, nil
}

// scratch is runFresh's working memory, reused across batches: a batch's
// events gathered per handler were the largest allocation of the hot path.
type scratch struct {
	batch []consumer.Event
	idx   []int
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// noFailure and unknownFailure are runFresh's answers besides an index.
const (
	noFailure      = -1
	unknownFailure = -2
)

// runFresh runs the handlers of the new events: handler by handler in
// registration order, a BatchHandler once over all its events, any other
// handler event by event. It returns noFailure, the index of the event
// whose handler failed (its result recorded), or unknownFailure when a
// batch call failed; err is an infrastructure error.
func (p *Processor) runFresh(ctx context.Context, tx pgx.Tx, events []consumer.Event, fresh []int, results []Result) (int, error) {
	s := scratchPool.Get().(*scratch)
	batch, idx := s.batch[:0], s.idx[:0]
	defer func() {
		clear(batch[:cap(batch)]) // drop the references to the deliveries' bodies
		s.batch, s.idx = batch[:0], idx[:0]
		scratchPool.Put(s)
	}()
	for _, h := range p.order {
		batch, idx = batch[:0], idx[:0]
		for _, i := range fresh {
			if routed(p.routes[events[i].Name], h.Name) {
				batch = append(batch, events[i])
				idx = append(idx, i)
			}
		}
		if len(batch) == 0 {
			continue
		}
		if bh, ok := h.Handler.(consumer.BatchHandler); ok && len(batch) > 1 {
			if err := callBatch(ctx, tx, bh, batch); err != nil {
				if infra(ctx, tx, err) {
					return noFailure, fmt.Errorf("dedup: handler %s: %w", h.Name, err)
				}
				return unknownFailure, nil
			}
			continue
		}
		for k, ev := range batch {
			if err := callOne(ctx, tx, h.Handler, ev); err != nil {
				if infra(ctx, tx, err) {
					return noFailure, fmt.Errorf("dedup: handler %s: %w", h.Name, err)
				}
				results[idx[k]] = Result{Outcome: OutcomeFailed, Err: err, Permanent: consumer.IsPermanent(err), Handler: h.Name}
				return idx[k], nil
			}
		}
	}
	return noFailure, nil
}

func routed(routes []Route, name string) bool {
	for _, r := range routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// callOne calls h for ev, turning a panic into a PanicError.
func callOne(ctx context.Context, tx pgx.Tx, h consumer.Handler, ev consumer.Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, tx, ev)
}

// callBatch calls h for evs, turning a panic into a PanicError.
func callBatch(ctx context.Context, tx pgx.Tx, h consumer.BatchHandler, evs []consumer.Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleBatch(ctx, tx, evs)
}

// processIsolated replays the batch with one savepoint per event: each
// event's insert and handlers succeed or roll back on their own. known is
// the index whose failure processFast already saw; it is not run again.
func (p *Processor) processIsolated(ctx context.Context, events []consumer.Event, primaries []int, known int, results []Result) error {
	tx, err := p.begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	for _, i := range primaries {
		if i == known {
			continue
		}
		sp, err := tx.Begin(ctx) // SAVEPOINT
		if err != nil {
			return fmt.Errorf("dedup: savepoint: %w", err)
		}
		if !p.skip {
			ins, err := insertIDs(ctx, sp, events, []int{i})
			if err != nil {
				return fmt.Errorf("dedup: insert processed_event: %w", err)
			}
			if len(ins) == 0 {
				if err := sp.Commit(ctx); err != nil {
					return fmt.Errorf("dedup: release savepoint: %w", err)
				}
				results[i] = Result{Outcome: OutcomeDuplicate}
				continue
			}
		}
		r, herr := p.runHandlers(ctx, sp, events[i])
		if herr != nil {
			if infra(ctx, tx, herr) {
				return fmt.Errorf("dedup: handler %s: %w", r.Handler, herr)
			}
			if err := sp.Rollback(ctx); err != nil {
				return fmt.Errorf("dedup: rollback to savepoint: %w", err)
			}
			results[i] = r
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return fmt.Errorf("dedup: release savepoint: %w", err)
		}
		results[i] = Result{Outcome: OutcomeProcessed}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("dedup: commit: %w", err)
	}
	return nil
}

func (p *Processor) begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return nil, fmt.Errorf("dedup: begin: %w", err)
	}
	return tx, nil
}

// rollback ends tx if it is still open, even when the caller's ctx is done.
func rollback(ctx context.Context, tx pgx.Tx) {
	_ = tx.Rollback(context.WithoutCancel(ctx))
}

const insertSQL = `INSERT INTO processed_event (event_id, processed_at)
SELECT unnest($1::uuid[]), now()
ON CONFLICT (event_id) DO NOTHING
RETURNING event_id`

// insertIDs records the ids of events[idx...] and returns those inserted.
func insertIDs(ctx context.Context, tx pgx.Tx, events []consumer.Event, idx []int) (map[uuid.UUID]struct{}, error) {
	// [16]byte encodes directly; pgtype.UUID goes through its Valuer and
	// allocates per element.
	ids := make([][16]byte, len(idx))
	for k, i := range idx {
		ids[k] = events[i].ID
	}
	return RecordIDs(ctx, tx, ids)
}

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

// runHandlers calls every handler of ev in order, stopping at the first
// error. A panic is recovered into a PanicError.
func (p *Processor) runHandlers(ctx context.Context, tx pgx.Tx, ev consumer.Event) (Result, error) {
	for _, r := range p.routes[ev.Name] {
		if err := callOne(ctx, tx, r.Handler, ev); err != nil {
			return Result{Outcome: OutcomeFailed, Err: err, Permanent: consumer.IsPermanent(err), Handler: r.Name}, err
		}
	}
	return Result{Outcome: OutcomeProcessed}, nil
}

// infra reports whether err is not the event's fault but the database's or
// the caller's: then the batch's outcome is unknown and nothing is acked.
func infra(ctx context.Context, tx pgx.Tx, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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
