package sqlhandler

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/consumer"
)

// ParseRemote parses a remote handler's named statement (docs/remote-handlers.md): as Parse, except that an @name that is not one of
// the event's fields is an argument the handler's answer gives, bound as
// text as ($n::text) (the statement casts it). The event's fields keep
// their types; an argument may not set them.
func ParseRemote(src string) (*Statement, error) {
	return parse(src, true)
}

// arg rewrites the remote argument @name found at src[start:end].
func (p *parser) arg(start, end int, name string) {
	n, ok := p.usedArgs[name]
	if !ok {
		p.args = append(p.args, paramArg)
		p.argNames = append(p.argNames, name)
		n = len(p.args)
		p.usedArgs[name] = n
	}
	repl := "($" + strconv.Itoa(n) + "::text)"
	p.edits = append(p.edits, edit{outAt: p.out.Len(), outLen: len(repl), srcAt: start, srcLen: end - start, p: paramArg, arg: name})
	p.out.WriteString(repl)
	p.i = end
}

// ArgNames returns the names of the arguments a remote statement takes
// from the handler's answer, in the order of their first use.
func (s *Statement) ArgNames() []string {
	var out []string
	for _, n := range s.argNames {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// BindRemote appends to args the arguments of s, a ParseRemote statement,
// for ev: an event field from ev, an argument from arg (its text, or nil
// for NULL). arg is called only with names from ArgNames.
func (s *Statement) BindRemote(ev *consumer.Event, arg func(name string) any, args []any) []any {
	for k, a := range s.args {
		if a == paramArg {
			args = append(args, arg(s.argNames[k]))
			continue
		}
		args = append(args, fields[a].one(ev))
	}
	return args
}

// TraceParent returns the W3C traceparent of ev's delivery span, as the
// @traceparent parameter binds it, and false when ev has none (tracing
// off).
func TraceParent(ev *consumer.Event) (string, bool) {
	t := traceParent(ev)
	return t.String, t.Valid
}

// PrepareStatements asks PostgreSQL to parse, analyse and describe each
// statement on conn, as Handler.Prepare does, and returns a *PrepareError
// (Statement: the index in stmts) for the first that does not prepare.
// conn must not be in a transaction.
func PrepareStatements(ctx context.Context, conn *pgconn.PgConn, stmts []*Statement) error {
	for k, s := range stmts {
		if _, err := conn.Prepare(ctx, "", s.sql, nil); err != nil {
			perr := &PrepareError{Statement: k, Err: err}
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Position > 0 {
				perr.Line, perr.Column = s.sourcePosition(int(pgErr.Position))
			}
			return perr
		}
	}
	return nil
}

// RemoteBatch is a remote statement's batch form (batch.go): the
// statement once for all the events of a batch whose answers each ask for
// that statement alone, over arrays of their fields and arguments. It is
// used only once Check found it may; its state changes through atomics:
// it is safe for concurrent use.
type RemoteBatch struct {
	s  *Statement
	f  *batchForm
	on atomic.Bool
	// offUntil (Unix ns) is when it may run again after its guard failed.
	offUntil atomic.Int64
}

// RemoteBatch returns s's batch form, off until Check, or why s has none.
func (s *Statement) RemoteBatch() (*RemoteBatch, string) {
	f, why := newBatchForm(s)
	if f == nil {
		return nil, why
	}
	return &RemoteBatch{s: s, f: f}, ""
}

// Check tells whether the batch form may run (as Handler.Prepare does for
// a SQL handler's), turns it on if so and returns "" or why not; err only
// when the connection failed. conn must not be in a transaction.
func (rb *RemoteBatch) Check(ctx context.Context, conn *pgconn.PgConn) (string, error) {
	why, err := checkBatchForm(ctx, conn, rb.f)
	if err != nil {
		return "", err
	}
	rb.on.Store(why == "")
	return why, nil
}

// On reports whether the batch form may run now.
func (rb *RemoteBatch) On() bool {
	return rb.on.Load() && time.Now().UnixNano() >= rb.offUntil.Load()
}

// SQL returns the batch form's statement.
func (rb *RemoteBatch) SQL() string { return rb.f.sql }

// Args returns the batch form's arguments for evs: one array per
// parameter, an event field from each event, an argument from arg(i,
// name) for event i (its text, or nil for NULL).
func (rb *RemoteBatch) Args(evs []consumer.Event, arg func(i int, name string) any) []any {
	out := make([]any, len(rb.s.args))
	for k, a := range rb.s.args {
		if a != paramArg {
			out[k] = fields[a].all(evs)
			continue
		}
		name := rb.s.argNames[k]
		vals := make([]*string, len(evs))
		for i := range evs {
			if v, ok := arg(i, name).(string); ok {
				vals[i] = &v
			}
		}
		out[k] = vals
	}
	return out
}

// Refused reports whether err is the batch form's guard refusing its
// table (changed since start); it then stays off for a while, as a SQL
// handler's.
func (rb *RemoteBatch) Refused(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, batchGuardMark) {
		rb.offUntil.Store(time.Now().Add(batchRetry).UnixNano())
		return true
	}
	return false
}
