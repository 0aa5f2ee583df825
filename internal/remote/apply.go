package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/sqlhandler"
)

// answer is the handler's answer about one event: an error, or the
// effects to run and the messages to write to the outbox.
type answer struct {
	err     error
	effects []effect
	publish []outboxRow
}

// effect is one statement to run, with its arguments as bound values.
type effect struct {
	name string
	stmt *sqlhandler.Statement
	args map[string]any
}

// outboxRow is one message to write to platform.outbox.
type outboxRow struct {
	name    string
	payload []byte
	headers map[string]jsontext.Value
}

// messageNameRE is consumer.Publish's rule for a message name.
var messageNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// result turns one result of the answer into an answer. An error is a
// shape the whole answer is refused for; an event's own mistake (an
// unknown statement, a missing or extra argument, a message that cannot
// be published) is the answer's permanent error.
func (h *Handler) result(r resultJSON) (*answer, error) {
	if len(r.Error) > 0 && !bytes.Equal(r.Error, []byte("null")) {
		var msg string
		if err := json.Unmarshal(r.Error, &msg); err != nil || msg == "" {
			return nil, errors.New(`"error" must be a non-empty string`)
		}
		if len(r.Effects) > 0 || len(r.Publish) > 0 {
			return nil, errors.New(`a result has "error" or effects and publish, not both`)
		}
		err := &EventError{Handler: h.name, Msg: msg}
		if r.Permanent {
			return &answer{err: consumer.Permanent(err)}, nil
		}
		return &answer{err: err}, nil
	}
	a := &answer{}
	for k, e := range r.Effects {
		s, ok := h.stmts[e.Statement]
		if !ok {
			return permanent(h, "effects[%d]: unknown statement %q (the statements are %s)", k, e.Statement, strings.Join(h.names, ", ")), nil
		}
		args := make(map[string]any, len(e.Args))
		want := s.ArgNames()
		for name, raw := range e.Args {
			if !slices.Contains(want, name) {
				return permanent(h, "effects[%d]: statement %s takes no arg %q (its args are %s)", k, e.Statement, name, strings.Join(want, ", ")), nil
			}
			v, err := argValue(raw)
			if err != nil {
				return permanent(h, "effects[%d]: arg %q: %v", k, name, err), nil
			}
			args[name] = v
		}
		for _, name := range want {
			if _, ok := e.Args[name]; !ok {
				return permanent(h, "effects[%d]: statement %s needs arg %q", k, e.Statement, name), nil
			}
		}
		a.effects = append(a.effects, effect{name: e.Statement, stmt: s, args: args})
	}
	for k, p := range r.Publish {
		if len(p.EventName) > consumer.MaxMessageNameBytes || !messageNameRE.MatchString(p.EventName) {
			return permanent(h, "publish[%d]: event_name %q: dot-separated words of letters, digits, _ and -", k, p.EventName), nil
		}
		payload := bytes.TrimSpace(p.Payload)
		if len(payload) == 0 || payload[0] != '{' {
			return permanent(h, "publish[%d]: payload must be a JSON object", k), nil
		}
		a.publish = append(a.publish, outboxRow{name: p.EventName, payload: payload, headers: p.Headers})
	}
	return a, nil
}

// EventError is the handler's own error about one event (its result's
// "error"), or a mistake of its result; wrapped with consumer.Permanent
// when the event must not be retried.
type EventError struct {
	// Handler is the handler's name.
	Handler string
	// Msg is the handler's text.
	Msg string
}

// Error returns the handler's text: it becomes the failure queue's x-error.
func (e *EventError) Error() string { return e.Msg }

func permanent(h *Handler, format string, args ...any) *answer {
	return &answer{err: consumer.Permanent(&EventError{Handler: h.name, Msg: fmt.Sprintf(format, args...)})}
}

// argValue is an arg as bound: text, or nil for NULL. A string is its
// value, a number its literal as written, true/false, an object or array
// its JSON text.
func argValue(raw jsontext.Value) (any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("no value")
	}
	switch raw[0] {
	case 'n':
		return nil, nil
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return s, nil
	default:
		// A number, true, false, an object or an array: its text.
		return string(raw), nil
	}
}

// apply runs the effects of every event's answer, event by event in
// order, then its outbox rows, as one pipeline.
func (h *Handler) apply(ctx context.Context, tx pgx.Tx, evs []consumer.Event, answers []*answer) error {
	b := &pgx.Batch{}
	// owner[k] is the event and effect of queued query k, for its error.
	type owner struct {
		ev     int
		effect string
		query  string // the named query's, when it is one (the outbox insert)
	}
	var owners []owner
	// A batch whose events each ask for one statement, the same, that has
	// a batch form: that statement once for all (their effects are those
	// of running it event by event: batch.go of package sqlhandler).
	rb, name := h.batchOf(answers)
	if rb != nil {
		b.Queue(rb.SQL(), rb.Args(evs, func(i int, arg string) any { return answers[i].effects[0].args[arg] })...)
		owners = append(owners, owner{-1, "statement " + name + " (once for the batch)", ""})
	}
	for i := range evs {
		ev := &evs[i]
		a := answers[i]
		for _, e := range a.effects {
			if rb != nil {
				break // in the batch form above
			}
			args := e.stmt.BindRemote(ev, func(name string) any { return e.args[name] }, nil)
			b.Queue(e.stmt.SQL(), args...)
			owners = append(owners, owner{i, "statement " + e.name, ""})
		}
		for k, m := range a.publish {
			headers, err := outboxHeaders(ev, m.headers)
			if err != nil {
				return consumer.Permanent(fmt.Errorf("event %s: publish[%d]: %w", ev.ID, k, err))
			}
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("outbox event id: %w", err)
			}
			// Text, not []byte: PostgreSQL parses it as jsonb, so numbers
			// keep their digits.
			q := outbox.QueueInsert(b, outbox.InsertParams{ID: id, Name: m.name, Payload: string(m.payload), Headers: string(headers)})
			owners = append(owners, owner{i, fmt.Sprintf("publish[%d]", k), q})
		}
	}
	if b.Len() == 0 {
		return nil
	}
	br := tx.SendBatch(ctx, b)
	for k := range b.Len() {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			o := owners[k]
			if o.query != "" {
				err = fmt.Errorf("%s: %w", o.query, err)
			}
			if o.ev < 0 {
				// The batch form: which event failed is not known (the
				// dedup step replays the batch event by event, where it
				// is), or its guard refused a changed table.
				if rb.Refused(err) {
					return fmt.Errorf("%s refused by its guard, the table changed since start: %w", o.effect, err)
				}
				return fmt.Errorf("%s: %w", o.effect, err)
			}
			err = fmt.Errorf("event %s: %s: %w", evs[o.ev].ID, o.effect, err)
			if dbutil.DataError(err) {
				// The handler's values refused by the database: no retry
				// can change them.
				return consumer.Permanent(err)
			}
			return err
		}
	}
	return br.Close()
}

// batchOf returns the batch form of the statement every answer asks for
// alone, when there are several answers, that statement has one and it
// is on; else nil.
func (h *Handler) batchOf(answers []*answer) (*sqlhandler.RemoteBatch, string) {
	if len(answers) < 2 || len(answers[0].effects) != 1 {
		return nil, ""
	}
	name := answers[0].effects[0].name
	rb := h.batches[name]
	if rb == nil || !rb.On() {
		return nil, ""
	}
	for _, a := range answers[1:] {
		if len(a.effects) != 1 || a.effects[0].name != name {
			return nil, ""
		}
	}
	return rb, name
}

// outboxHeaders returns a message's headers as JSON with the delivery's
// traceparent added, unless the handler set one.
func outboxHeaders(ev *consumer.Event, headers map[string]jsontext.Value) ([]byte, error) {
	if tp, ok := sqlhandler.TraceParent(ev); ok {
		if _, set := headers[consumer.HeaderTraceParent]; !set {
			if headers == nil {
				headers = map[string]jsontext.Value{}
			}
			q, _ := json.Marshal(tp)
			headers[consumer.HeaderTraceParent] = q
		}
	}
	if len(headers) == 0 {
		return []byte("{}"), nil
	}
	out, err := json.Marshal(headers)
	if err != nil {
		return nil, fmt.Errorf("headers: %w", err)
	}
	if len(out) > consumer.MaxHeadersBytes {
		return nil, fmt.Errorf("headers are %d bytes as JSON, at most %d", len(out), consumer.MaxHeadersBytes)
	}
	return out, nil
}
