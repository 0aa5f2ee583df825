package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"

	"github.com/platformd/platformd/consumer"
)

// Exchange is one call of a remote handler as it went over the wire: what
// platformd sent and what the handler answered, before the answer is
// checked. platformd try shows it to a handler's author.
type Exchange struct {
	// Handler is the handler's name; URL where the call went.
	Handler, URL string
	// Request is the body POSTed.
	Request []byte
	// Status is the answer's HTTP status (0 when none came).
	Status int
	// Answer is the answer's body as read (at most MaxAnswerBytes+1 bytes).
	Answer []byte
	// Duration is how long the call took.
	Duration time.Duration
	// Err is the call's error, if any: an *UnavailableError, a
	// *BadAnswerError, or the context's.
	Err error
}

type exchangeKey struct{}

// WithExchanges returns a context under which every call of a remote
// handler is passed to record once it ends, from the calling goroutine.
// Without it (the daemon's case) a call records nothing and costs one
// context lookup.
func WithExchanges(ctx context.Context, record func(Exchange)) context.Context {
	return context.WithValue(ctx, exchangeKey{}, record)
}

// recordExchange passes x to ctx's recorder, if it has one.
func recordExchange(ctx context.Context, x Exchange) {
	if rec, ok := ctx.Value(exchangeKey{}).(func(Exchange)); ok {
		rec(x)
	}
}

// CheckAnswer lists everything wrong in an answer of the handler about
// evs, each in a sentence, where a call stops at the first: the shape
// (not the contract's JSON, no "results", results not one-to-one with the
// events), and in every result each unknown statement, missing or extra
// arg, arg of no usable value, error beside effects, and message that
// cannot be published. Empty: the answer is one the handler's events
// would be applied from (or failed by, with their own "error"). Safe for
// concurrent use.
func (h *Handler) CheckAnswer(data []byte, evs []consumer.Event) []string {
	var a answerJSON
	if err := jsonv2.Unmarshal(data, &a); err != nil {
		return []string{fmt.Sprintf("not the contract's JSON: %v", err)}
	}
	if a.Results == nil {
		return []string{`no "results" array`}
	}
	var out []string
	seen := map[uuid.UUID]bool{}
	asked := map[uuid.UUID]bool{}
	for i := range evs {
		asked[evs[i].ID] = true
	}
	for k, r := range *a.Results {
		at := fmt.Sprintf("results[%d]", k)
		id, err := uuid.Parse(r.EventID)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("%s: event_id %q is not a UUID", at, r.EventID))
		case !asked[id]:
			out = append(out, fmt.Sprintf("%s: event %s was not in the call", at, id))
		case seen[id]:
			out = append(out, fmt.Sprintf("%s: a second result for event %s", at, id))
		}
		seen[id] = true
		hasError := len(r.Error) > 0 && string(r.Error) != "null"
		if hasError {
			var msg string
			if err := json.Unmarshal(r.Error, &msg); err != nil || msg == "" {
				out = append(out, at+`: "error" must be a non-empty string`)
			}
			if len(r.Effects) > 0 || len(r.Publish) > 0 {
				out = append(out, at+`: a result has "error" or effects and publish, not both`)
			}
		}
		for j, e := range r.Effects {
			out = append(out, h.checkEffect(fmt.Sprintf("%s.effects[%d]", at, j), e)...)
		}
		for j, p := range r.Publish {
			if len(p.EventName) > consumer.MaxMessageNameBytes || !messageNameRE.MatchString(p.EventName) {
				out = append(out, fmt.Sprintf("%s.publish[%d]: event_name %q: dot-separated words of letters, digits, _ and -", at, j, p.EventName))
			}
			if payload := bytes.TrimSpace(p.Payload); len(payload) == 0 || payload[0] != '{' {
				out = append(out, fmt.Sprintf("%s.publish[%d]: payload must be a JSON object", at, j))
			}
		}
	}
	for i := range evs {
		if !seen[evs[i].ID] {
			out = append(out, fmt.Sprintf("no result for event %s", evs[i].ID))
		}
	}
	return out
}

// checkEffect lists what is wrong in one effect of an answer.
func (h *Handler) checkEffect(at string, e effectJSON) []string {
	s, ok := h.stmts[e.Statement]
	if !ok {
		return []string{fmt.Sprintf("%s: unknown statement %q (the statements are %s)", at, e.Statement, strings.Join(h.names, ", "))}
	}
	var out []string
	want := s.ArgNames()
	names := slices.Sorted(maps.Keys(e.Args))
	for _, name := range names {
		if !slices.Contains(want, name) {
			out = append(out, fmt.Sprintf("%s: statement %s takes no arg %q (its args are %s)", at, e.Statement, name, strings.Join(want, ", ")))
			continue
		}
		if _, err := argValue(e.Args[name]); err != nil {
			out = append(out, fmt.Sprintf("%s: arg %q: %v", at, name, err))
		}
	}
	for _, name := range want {
		if _, ok := e.Args[name]; !ok {
			out = append(out, fmt.Sprintf("%s: statement %s needs arg %q", at, e.Statement, name))
		}
	}
	return out
}

// StatementSQL returns the SQL text each of the handler's statements is
// sent as, by the statement's name: what names an effect in a trace of
// the statements run.
func (h *Handler) StatementSQL() map[string]string {
	out := make(map[string]string, len(h.stmts))
	for name, s := range h.stmts {
		out[name] = s.SQL()
	}
	return out
}
