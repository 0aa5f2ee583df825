package sqlhandler

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/platformd/platformd/consumer"
)

// ParseRemote parses a remote handler's named statement (DESIGN.md,
// "Remote handlers"): as Parse, except that an @name that is not one of
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
	p.edits = append(p.edits, edit{outAt: p.out.Len(), outLen: len(repl), srcAt: start, srcLen: end - start, p: paramArg})
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
