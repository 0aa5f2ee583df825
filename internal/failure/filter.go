package failure

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// states are the five states of a row.
var states = []string{StateFailed, StateParked, StateRetrying, StateResolved, StateDiscarded}

// groupColumns maps each group-by key to its column: the only text a
// request chooses in a statement, picked from this fixed set.
var groupColumns = map[string]string{
	GroupReason:      "f.reason",
	GroupHandler:     "f.handler",
	GroupEventName:   "f.event_name",
	GroupFingerprint: "f.fingerprint",
	GroupPool:        "f.pool",
}

// empty reports whether f names no field: it selects every failure.
func (f *Filter) empty() bool {
	return f.Pool == "" && f.Reason == "" && f.Handler == "" && f.EventName == "" && f.Fingerprint == "" &&
		f.State == "" && f.From.IsZero() && f.To.IsZero() && f.Text == "" && len(f.IDs) == 0
}

// validate checks f: its state is one of the five, From is before To.
// Errors wrap ErrInvalid and name the field.
func (f *Filter) validate() error {
	if f.State != "" && !contains(states, f.State) {
		return fmt.Errorf("%w: filter.state: %q is not a state (%s)", ErrInvalid, f.State, strings.Join(states, ", "))
	}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		return fmt.Errorf("%w: filter.from: %s is not before filter.to %s", ErrInvalid,
			f.From.UTC().Format(time.RFC3339Nano), f.To.UTC().Format(time.RFC3339Nano))
	}
	for _, s := range []struct{ name, v string }{
		{"pool", f.Pool}, {"reason", f.Reason}, {"handler", f.Handler}, {"event_name", f.EventName},
		{"fingerprint", f.Fingerprint}, {"text", f.Text},
	} {
		if strings.IndexByte(s.v, 0) >= 0 {
			return fmt.Errorf("%w: filter.%s: holds a NUL byte", ErrInvalid, s.name)
		}
	}
	return nil
}

// validateGroupBy checks the group-by keys and returns them, GroupReason
// when by is empty.
func validateGroupBy(by []string) ([]string, error) {
	if len(by) == 0 {
		return []string{GroupReason}, nil
	}
	seen := make(map[string]bool, len(by))
	for _, k := range by {
		if _, ok := groupColumns[k]; !ok {
			return nil, fmt.Errorf("%w: group_by: %q is not a group-by key (reason, handler, event_name, fingerprint, pool)", ErrInvalid, k)
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: group_by: %q named twice", ErrInvalid, k)
		}
		seen[k] = true
	}
	return by, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// where is a WHERE clause being built: conditions of fixed text over the
// table aliased f, and their values as arguments ($1, $2...). Nothing a
// request sends becomes statement text.
type where struct {
	conds []string
	args  []any
}

// newWhere starts a clause whose first arguments are args (the
// statement's own, before the filter's).
func newWhere(args ...any) *where { return &where{args: args} }

// arg adds v as an argument and returns its placeholder.
func (w *where) arg(v any) string {
	w.args = append(w.args, v)
	return "$" + strconv.Itoa(len(w.args))
}

// add adds a condition.
func (w *where) add(cond string) { w.conds = append(w.conds, cond) }

// sql returns the conditions joined by AND ("true" when none).
func (w *where) sql() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

// likeEscaper escapes ILIKE's wildcards and its escape character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// filter adds f's conditions. The conditions are the ones the table's
// indexes serve: state and failed_at (failed_event_state_failed_at_idx),
// pool, state and failed_at (failed_event_pool_state_idx), fingerprint and
// state (failed_event_fingerprint_idx), ids (the primary key).
func (w *where) filter(f *Filter) *where {
	if f.Pool != "" {
		w.add("f.pool = " + w.arg(f.Pool))
	}
	if f.State != "" {
		w.add("f.state = " + w.arg(f.State))
	}
	if f.Fingerprint != "" {
		w.add("f.fingerprint = " + w.arg(f.Fingerprint))
	}
	if f.Reason != "" {
		w.add("f.reason = " + w.arg(f.Reason))
	}
	if f.Handler != "" {
		w.add("f.handler = " + w.arg(f.Handler))
	}
	if f.EventName != "" {
		w.add("f.event_name = " + w.arg(f.EventName))
	}
	if !f.From.IsZero() {
		w.add("f.failed_at >= " + w.arg(f.From))
	}
	if !f.To.IsZero() {
		w.add("f.failed_at < " + w.arg(f.To))
	}
	if f.Text != "" {
		p := w.arg("%" + likeEscaper.Replace(f.Text) + "%")
		w.add("(f.error ILIKE " + p + " OR f.event_name ILIKE " + p + " OR f.event_id::text ILIKE " + p + ")")
	}
	if len(f.IDs) > 0 {
		w.add("f.id = ANY(" + w.arg(f.IDs) + ")")
	}
	return w
}

// unresolved restricts the clause to rows failed, parked or retrying.
func (w *where) unresolved() *where {
	w.add("f.state IN ('failed', 'parked', 'retrying')")
	return w
}

// filterJSON is a Filter as platform.failure_retry.filter and the audit
// log store it; OverrideBeyondHorizon rides along in a retry's.
type filterJSON struct {
	Pool                  string      `json:"pool,omitempty"`
	Reason                string      `json:"reason,omitempty"`
	Handler               string      `json:"handler,omitempty"`
	EventName             string      `json:"event_name,omitempty"`
	Fingerprint           string      `json:"fingerprint,omitempty"`
	State                 string      `json:"state,omitempty"`
	From                  *time.Time  `json:"from,omitempty"`
	To                    *time.Time  `json:"to,omitempty"`
	Text                  string      `json:"text,omitempty"`
	IDs                   []uuid.UUID `json:"ids,omitempty"`
	OverrideBeyondHorizon bool        `json:"override_beyond_horizon,omitempty"`
}

func toJSON(f *Filter) filterJSON {
	j := filterJSON{Pool: f.Pool, Reason: f.Reason, Handler: f.Handler, EventName: f.EventName,
		Fingerprint: f.Fingerprint, State: f.State, Text: f.Text, IDs: f.IDs}
	if !f.From.IsZero() {
		t := f.From.UTC()
		j.From = &t
	}
	if !f.To.IsZero() {
		t := f.To.UTC()
		j.To = &t
	}
	return j
}

func (j *filterJSON) filter() Filter {
	f := Filter{Pool: j.Pool, Reason: j.Reason, Handler: j.Handler, EventName: j.EventName,
		Fingerprint: j.Fingerprint, State: j.State, Text: j.Text, IDs: j.IDs}
	if j.From != nil {
		f.From = *j.From
	}
	if j.To != nil {
		f.To = *j.To
	}
	return f
}

// auditFilter is f as an audit entry's detail holds it.
func auditFilter(f *Filter) map[string]any {
	j := toJSON(f)
	m := map[string]any{}
	add := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	add("pool", j.Pool)
	add("reason", j.Reason)
	add("handler", j.Handler)
	add("event_name", j.EventName)
	add("fingerprint", j.Fingerprint)
	add("state", j.State)
	add("text", j.Text)
	if j.From != nil {
		m["from"] = j.From.Format(time.RFC3339Nano)
	}
	if j.To != nil {
		m["to"] = j.To.Format(time.RFC3339Nano)
	}
	if len(j.IDs) > 0 {
		ids := make([]string, len(j.IDs))
		for i, id := range j.IDs {
			ids[i] = id.String()
		}
		m["ids"] = ids
	}
	return m
}

var errEmptyFilter = errors.New("filter: empty: name at least one field")
