package sqlhandler

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dbutil"
)

// Handler runs a SQL handler's statements for each event, in order, inside
// the batch's transaction. It implements consumer.BatchHandler: a batch's
// statements go to PostgreSQL as one pipeline, or, for a one-INSERT
// handler that Prepare found may, as one statement for the whole batch
// (batch.go). Its statements never change and its batch mode changes
// through atomics only: it is safe for concurrent use.
type Handler struct {
	name  string
	stmts []*Statement
	// nargs is the arguments of one event, all statements together.
	nargs int
	// batch is the batch form of a one-statement handler (batch.go), nil
	// when it has none; it is used once Prepare found it may (batchWhy
	// then empty; otherwise why not), except until batchOffUntil (Unix
	// ns) after its guard failed.
	batch         *batchForm
	batchWhy      atomic.Pointer[string]
	batchOffUntil atomic.Int64
}

var _ consumer.BatchHandler = (*Handler)(nil)

// New parses statements (see Parse) into the handler called name. The
// error of a statement that does not parse is a *StatementError.
func New(name string, statements []string) (*Handler, error) {
	if len(statements) == 0 {
		return nil, fmt.Errorf("sql handler %s: no statement", name)
	}
	h := &Handler{name: name}
	for k, src := range statements {
		s, err := Parse(src)
		if err != nil {
			return nil, fmt.Errorf("sql handler %s: %w", name, &StatementError{Statement: k, Err: err})
		}
		h.stmts = append(h.stmts, s)
		h.nargs += len(s.args)
	}
	noBatch := "more than one statement"
	if len(h.stmts) == 1 {
		h.batch, noBatch = newBatchForm(h.stmts[0])
	}
	why := "not prepared"
	if h.batch == nil {
		why = noBatch
	}
	h.batchWhy.Store(&why)
	return h, nil
}

// BatchMode reports whether the handler's statement runs once per batch
// (batch.go) and, when it does not, why.
func (h *Handler) BatchMode() (bool, string) {
	why := *h.batchWhy.Load()
	return why == "", why
}

// Name returns the handler's name.
func (h *Handler) Name() string { return h.name }

// StatementSQL returns the SQL text each statement is sent as, in order:
// what names a statement in a trace of the statements run.
func (h *Handler) StatementSQL() []string {
	out := make([]string, len(h.stmts))
	for i, s := range h.stmts {
		out[i] = s.sql
	}
	return out
}

// StatementError is the failure of one of a handler's statements. Its
// text is "statement N: SQLSTATE message" (N counted from 1) for an error
// PostgreSQL reported; the worker prefixes the handler's name.
type StatementError struct {
	// Statement is the statement's index (0 for the first).
	Statement int
	// Err is the cause, a *pgconn.PgError when PostgreSQL reported it.
	Err error
}

// Error returns "statement N: ...".
func (e *StatementError) Error() string {
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) {
		return fmt.Sprintf("statement %d: %s %s", e.Statement+1, pgErr.Code, pgErr.Message)
	}
	return fmt.Sprintf("statement %d: %v", e.Statement+1, e.Err)
}

// Unwrap returns the cause.
func (e *StatementError) Unwrap() error { return e.Err }

// Handle runs the statements for one event.
func (h *Handler) Handle(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	if len(h.stmts) == 1 {
		s := h.stmts[0]
		_, err := tx.Exec(ctx, s.sql, s.bind(&ev, nil)...)
		return classify(0, err)
	}
	return h.HandleBatch(ctx, tx, []consumer.Event{ev})
}

// HandleBatch runs the statements of every event, event by event in order,
// as one pipeline: one round trip whatever the number of statements; or
// the batch form's one statement when it is on. The first failure aborts
// the transaction (the dedup step then replays the batch event by event
// through Handle, each in a savepoint), so its effects are exactly those
// of Handle for each event in turn.
func (h *Handler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []consumer.Event) error {
	if *h.batchWhy.Load() == "" && time.Now().UnixNano() >= h.batchOffUntil.Load() {
		return h.runBatchForm(ctx, tx, h.batch, evs)
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(evs)*len(h.stmts))}
	// One arguments array for the batch; each statement's are a piece of
	// it that nothing appends to afterwards.
	args := make([]any, 0, len(evs)*h.nargs)
	for i := range evs {
		for _, s := range h.stmts {
			from := len(args)
			args = s.bind(&evs[i], args)
			b.Queue(s.sql, args[from:len(args):len(args)]...)
		}
	}
	br := tx.SendBatch(ctx, b)
	for k := range b.Len() {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return classify(k%len(h.stmts), err)
		}
	}
	return br.Close()
}

// classify wraps a statement's error: SQLSTATE class 22 (data exception)
// and 23 (integrity constraint violation) come from the event's content,
// so no retry can fix them: they are permanent. Anything else (a lock
// timeout, a serialization failure, a dropped connection...) is retried.
func classify(k int, err error) error {
	if err == nil {
		return nil
	}
	serr := &StatementError{Statement: k, Err: err}
	if dbutil.DataError(err) {
		return consumer.Permanent(serr)
	}
	return serr
}

// bind appends to args the arguments of s for ev, for $1, $2..., in the
// form pgx encodes without reflection or a driver.Valuer; only the
// parameters s uses are boxed.
func (s *Statement) bind(ev *consumer.Event, args []any) []any {
	for _, a := range s.args {
		args = append(args, fields[a].one(ev))
	}
	return args
}

// field reads one parameter from an event (one), or from every event of a
// batch as an array (all, for the batch form), in the types pgx encodes
// without reflection.
type field struct {
	one func(ev *consumer.Event) any
	all func(evs []consumer.Event) any
}

// fieldOf is the field that get reads.
func fieldOf[T any](get func(ev *consumer.Event) T) field {
	return field{
		one: func(ev *consumer.Event) any { return get(ev) },
		all: func(evs []consumer.Event) any {
			v := make([]T, len(evs))
			for i := range evs {
				v[i] = get(&evs[i])
			}
			return v
		},
	}
}

// fields are the parameters' fields.
var fields = [len(params)]field{
	paramEventID:     fieldOf(func(ev *consumer.Event) [16]byte { return ev.ID }),
	paramEventName:   fieldOf(func(ev *consumer.Event) string { return ev.Name }),
	paramOccurredAt:  fieldOf(func(ev *consumer.Event) time.Time { return ev.OccurredAt }),
	paramPayload:     fieldOf(func(ev *consumer.Event) []byte { return ev.Payload }),
	paramAttempt:     fieldOf(func(ev *consumer.Event) int32 { return int32(ev.Attempt) }),
	paramRoutingKey:  fieldOf(func(ev *consumer.Event) string { return ev.Delivery.RoutingKey }),
	paramTraceParent: fieldOf(traceParent),
}

// traceParent is the W3C traceparent of ev's delivery span (version 00,
// the trace and span ids, the sampled flag alone), or NULL when the event
// has no valid span context (tracing off).
func traceParent(ev *consumer.Event) pgtype.Text {
	sc := ev.SpanContext
	if !sc.IsValid() {
		return pgtype.Text{}
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	return pgtype.Text{String: "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-" +
		(sc.TraceFlags() & trace.FlagsSampled).String(), Valid: true}
}

// PrepareError is a statement PostgreSQL refused to prepare.
type PrepareError struct {
	// Statement is the statement's index (0 for the first).
	Statement int
	// Line and Column locate PostgreSQL's error position in the statement
	// as written (0 when PostgreSQL gave none).
	Line, Column int
	// Err is PostgreSQL's error.
	Err error
}

// Error returns PostgreSQL's message and where it points.
func (e *PrepareError) Error() string {
	msg := e.Err.Error()
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) {
		msg = pgErr.Code + " " + pgErr.Message
		if pgErr.Hint != "" {
			msg += " (hint: " + pgErr.Hint + ")"
		}
	}
	if e.Line > 0 {
		return fmt.Sprintf("does not prepare: %s, at line %d, column %d", msg, e.Line, e.Column)
	}
	return "does not prepare: " + msg
}

// Unwrap returns PostgreSQL's error.
func (e *PrepareError) Unwrap() error { return e.Err }

// Prepare asks PostgreSQL to parse, analyse and describe every statement
// on conn (unnamed, nothing is executed), so that a statement naming a
// missing table or column, or of the wrong types, is refused at start
// instead of failing its first event. It returns a *PrepareError for the
// first statement that does not prepare. Then, for a handler with a batch
// form, it checks whether the form may run (batch.go) and turns it on if
// so (BatchMode tells). conn must not be in a transaction.
func (h *Handler) Prepare(ctx context.Context, conn *pgconn.PgConn) error {
	if err := h.prepareStatements(ctx, conn); err != nil {
		return err
	}
	if h.batch == nil {
		return nil
	}
	why, err := checkBatchForm(ctx, conn, h.batch)
	if err != nil {
		return fmt.Errorf("check the batch form: %w", err)
	}
	h.batchWhy.Store(&why)
	return nil
}

func (h *Handler) prepareStatements(ctx context.Context, conn *pgconn.PgConn) error {
	return PrepareStatements(ctx, conn, h.stmts)
}
