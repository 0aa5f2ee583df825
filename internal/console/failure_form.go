package console

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// stateAny is the state field's value that selects failures in any state
// (the filter's State ""); without a state field the pages select
// failure.StateFailed.
const stateAny = "any"

// groupKeys are the group-by choices of the failures page, in the order
// it offers them; the first is the default.
var groupKeys = []string{failure.GroupReason, failure.GroupHandler, failure.GroupEventName, failure.GroupFingerprint, failure.GroupPool}

// failureStates are the state choices of the failures page's filter.
var failureStates = []string{failure.StateFailed, failure.StateParked, failure.StateRetrying, failure.StateResolved, failure.StateDiscarded, stateAny}

// pair is a name and its value, for hidden inputs and key listings.
type pair struct{ Name, Value string }

// failureForm is a selection of failures as a page or a form carries it:
// the fields of a failure.Filter as text (query or form values).
type failureForm struct {
	Pool, Reason, Handler, EventName, Fingerprint string
	// State is a failure.State… value or stateAny.
	State          string
	From, To, Text string
	// IDs are failure ids.
	IDs []string
}

// failureFormOf reads a selection from v; without a state field it is
// failure.StateFailed.
func failureFormOf(v url.Values) failureForm {
	f := failureForm{
		Pool: v.Get("pool"), Reason: v.Get("failure_reason"), Handler: v.Get("handler"), EventName: v.Get("event_name"),
		Fingerprint: v.Get("fingerprint"), State: v.Get("state"), From: v.Get("from"), To: v.Get("to"), Text: v.Get("text"),
	}
	for _, id := range v["id"] {
		if id = strings.TrimSpace(id); id != "" {
			f.IDs = append(f.IDs, id)
		}
	}
	if _, ok := v["state"]; !ok {
		f.State = failure.StateFailed
	}
	return f
}

// Pairs are the selection's fields as form fields (state always, the rest
// when set), for hidden inputs and links. The failure's own reason is the
// field failure_reason: reason is the operator's reason for an action.
func (f failureForm) Pairs() []pair {
	var out []pair
	for _, p := range []pair{
		{"pool", f.Pool}, {"failure_reason", f.Reason}, {"handler", f.Handler}, {"event_name", f.EventName},
		{"fingerprint", f.Fingerprint}, {"state", cmp.Or(f.State, stateAny)}, {"from", f.From}, {"to", f.To}, {"text", f.Text},
	} {
		if p.Value != "" {
			out = append(out, p)
		}
	}
	for _, id := range f.IDs {
		out = append(out, pair{"id", id})
	}
	return out
}

// values returns Pairs as url.Values.
func (f failureForm) values() url.Values {
	v := url.Values{}
	for _, p := range f.Pairs() {
		v.Add(p.Name, p.Value)
	}
	return v
}

// filter turns the selection into a failure.Filter; the error names the
// field.
func (f failureForm) filter() (failure.Filter, error) {
	out := failure.Filter{
		Pool: strings.TrimSpace(f.Pool), Reason: strings.TrimSpace(f.Reason), Handler: strings.TrimSpace(f.Handler),
		EventName: strings.TrimSpace(f.EventName), Fingerprint: f.Fingerprint, Text: strings.TrimSpace(f.Text),
	}
	switch f.State {
	case stateAny, "":
	default:
		if !slices.Contains(failureStates, f.State) {
			return out, fmt.Errorf("state: %q is not one of %s", f.State, strings.Join(failureStates, ", "))
		}
		out.State = f.State
	}
	for _, t := range []struct {
		name, value string
		dst         *time.Time
	}{{"From", f.From, &out.From}, {"To", f.To, &out.To}} {
		v := strings.TrimSpace(t.value)
		if v == "" {
			continue
		}
		at, err := parseWhen(v)
		if err != nil {
			return out, fmt.Errorf("%s: %q is not a time such as 2026-01-02T15:04:05Z (or 2026-01-02T15:04, UTC)", t.name, v)
		}
		*t.dst = at
	}
	if !out.From.IsZero() && !out.To.IsZero() && !out.From.Before(out.To) {
		return out, fmt.Errorf("from (%s) must be before to (%s)", fmtTime(out.From), fmtTime(out.To))
	}
	if len(f.IDs) > admin.ListLimitMax {
		return out, fmt.Errorf("at most %d failures can be selected at once", admin.ListLimitMax)
	}
	for _, v := range f.IDs {
		id, err := parseID("failure", v)
		if err != nil {
			return out, err
		}
		out.IDs = append(out.IDs, id)
	}
	return out, nil
}

// parseWhen parses an RFC 3339 time, or a browser's datetime-local value
// (minutes or seconds, no zone) taken as UTC.
func parseWhen(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("not a time")
}

// parseID parses the id of a failure or a retry: a UUID in canonical
// hyphenated form, not the nil UUID; what names it in the error.
func parseID(what, s string) (uuid.UUID, error) {
	id, err := parseEventID(s)
	if err != nil {
		return uuid.Nil, fmt.Errorf(`"%s" is not a %s id: want a UUID such as 0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b`, s, what)
	}
	return id, nil
}

// withKey returns f narrowed to a group's key value.
func (f failureForm) withKey(key, value string) failureForm {
	switch key {
	case failure.GroupReason:
		f.Reason = value
	case failure.GroupHandler:
		f.Handler = value
	case failure.GroupEventName:
		f.EventName = value
	case failure.GroupFingerprint:
		f.Fingerprint = value
	case failure.GroupPool:
		f.Pool = value
	}
	return f
}

// Paths of the failure pages.
func failuresPath(service string) string { return servicePath(service) + "/failures" }

func failureEventsPath(service string) string { return failuresPath(service) + "/events" }

func failurePath(id uuid.UUID) string { return "/failures/" + id.String() }

func failureRetryPath(service string, id uuid.UUID) string {
	return failuresPath(service) + "/retries/" + id.String()
}

// withQuery returns path with the query v ("" when v is empty).
func withQuery(path string, v url.Values) string {
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// shownBody is a body as the failure page shows it: indented when it is
// JSON, else as text, else (not UTF-8) quoted.
type shownBody struct {
	Text string
	// Kind is "json", "text" or "binary".
	Kind string
}

func showBody(b []byte) shownBody {
	if json.Valid(b) {
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err == nil {
			return shownBody{Text: buf.String(), Kind: "json"}
		}
	}
	if utf8.Valid(b) {
		return shownBody{Text: string(b), Kind: "text"}
	}
	return shownBody{Text: strconv.Quote(string(b)), Kind: "binary"}
}

// headerPairs lists a failure's headers by name, each value as JSON
// (strings as they are).
func headerPairs(h map[string]any) []pair {
	out := make([]pair, 0, len(h))
	for k, v := range h {
		s, ok := v.(string)
		if !ok {
			raw, err := json.Marshal(v)
			if err != nil {
				s = fmt.Sprint(v)
			} else {
				s = string(raw)
			}
		}
		out = append(out, pair{k, s})
	}
	slices.SortFunc(out, func(a, b pair) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// filterSummary describes a retry's selection in one line.
func filterSummary(f failure.Filter) string {
	var parts []string
	for _, p := range []pair{
		{"pool", f.Pool}, {"reason", f.Reason}, {"handler", f.Handler}, {"event", f.EventName},
		{"fingerprint", f.Fingerprint}, {"state", f.State}, {"text", f.Text},
	} {
		if p.Value != "" {
			parts = append(parts, p.Name+" "+p.Value)
		}
	}
	if !f.From.IsZero() {
		parts = append(parts, "from "+fmtTime(f.From))
	}
	if !f.To.IsZero() {
		parts = append(parts, "to "+fmtTime(f.To))
	}
	switch n := len(f.IDs); {
	case n == 1:
		parts = append(parts, "failure "+f.IDs[0].String())
	case n > 1:
		parts = append(parts, strconv.Itoa(n)+" selected failures")
	}
	if len(parts) == 0 {
		return "every failure"
	}
	return strings.Join(parts, " · ")
}
