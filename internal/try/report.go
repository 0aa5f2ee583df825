package try

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is what a handler would have done with one event: `platformd try`
// prints it as text, or as this struct in JSON (-o json; the field tags
// are the document's shape, described in docs/remote-handlers.md).
type Report struct {
	// Service, Pool and Handler say what ran: the handler (or handlers,
	// in order, comma-separated), of the service, as the pool (-pool, else
	// the first of the service's pools that runs the first handler) would
	// run it. Kind is "go", "sql" or "remote" (each handler's, comma-
	// separated, when they differ).
	Service string `json:"service"`
	Pool    string `json:"pool,omitempty"`
	Handler string `json:"handler"`
	Kind    string `json:"kind"`
	// Event is the event tried; nil when the body did not decode.
	Event *Event `json:"event,omitempty"`
	// Outcome is the dedup step's: "processed" (the handler succeeded:
	// its effects would commit), "duplicate" (the id is in
	// processed_event: the handler would not run), or "failed".
	Outcome string `json:"outcome"`
	// WouldApply is Outcome == "processed": the exit code is 0 when the
	// handler would apply or the event is a duplicate, 1 when it fails.
	WouldApply bool `json:"would_apply"`
	// Error is the failure, when Outcome is "failed".
	Error *Failure `json:"error,omitempty"`
	// Effects are the statements the handler ran, in order, each with its
	// command tag and rows affected (or its error); a remote handler's are
	// the statements of its answer, then its outbox inserts.
	Effects []Effect `json:"effects"`
	// Outbox lists the rows of platform.outbox the event's transaction
	// would commit (the relay publishes them after the commit).
	Outbox []OutboxMessage `json:"outbox"`
	// Calls are a remote handler's HTTP calls (one, normally).
	Calls []Call `json:"calls,omitempty"`
	// Notes are further facts worth knowing (the event beyond the
	// horizon, a stored failure that the commit would resolve...).
	Notes []string `json:"notes,omitempty"`
	// RolledBack is always true: nothing the try did was committed.
	RolledBack bool `json:"rolled_back"`
}

// Event is the event as the handler saw it.
type Event struct {
	ID         string          `json:"event_id"`
	Name       string          `json:"event_name"`
	OccurredAt time.Time       `json:"occurred_at"`
	Attempt    int             `json:"attempt"`
	RoutingKey string          `json:"routing_key"`
	Payload    json.RawMessage `json:"payload"`
	// FailureID is the stored failure the event came from (-failure).
	FailureID string `json:"failure_id,omitempty"`
}

// Failure is why the event would not apply, and what the pool would do.
type Failure struct {
	// Class is "permanent" (no retry: the failure store at once),
	// "retryable" (the pool's retry delays, then the failure store), or
	// "unavailable" (a remote handler not answering: the batch is
	// requeued, no attempt counted, the pool waits until it answers).
	Class string `json:"class"`
	// Reason is the failure store's reason the pool would record now
	// ("permanent", "retries_exhausted", "no_handler", "decode",
	// "beyond_horizon"), "" when it would retry.
	Reason string `json:"reason,omitempty"`
	// Settlement says, in a sentence, what the pool would do.
	Settlement string `json:"settlement"`
	// Handler is the handler that failed; Message the error as the failure
	// store would keep it; SQLState PostgreSQL's code when it raised it.
	Handler  string `json:"handler,omitempty"`
	Message  string `json:"message"`
	SQLState string `json:"sqlstate,omitempty"`
}

// Effect is one statement a handler ran.
type Effect struct {
	// Handler ran it; Statement names it when it is a statement of the
	// config ("statement 1" of a SQL handler, a remote handler's name,
	// "outbox" for an outbox insert).
	Handler   string `json:"handler"`
	Statement string `json:"statement,omitempty"`
	// SQL is the statement as sent; Args its arguments as text.
	SQL  string   `json:"sql"`
	Args []string `json:"args,omitempty"`
	// Command is PostgreSQL's command tag ("INSERT 0 1") and Rows the rows
	// it affected; Error is set instead when the statement failed.
	Command string `json:"command,omitempty"`
	Rows    int64  `json:"rows"`
	Error   string `json:"error,omitempty"`
}

// OutboxMessage is one row the event's transaction wrote to platform.outbox.
type OutboxMessage struct {
	EventID   string          `json:"event_id"`
	EventName string          `json:"event_name"`
	Payload   json.RawMessage `json:"payload"`
	Headers   json.RawMessage `json:"headers"`
}

// Call is one HTTP call of a remote handler.
type Call struct {
	URL string `json:"url"`
	// Status is the HTTP status, 0 when no answer came.
	Status     int     `json:"status"`
	DurationMS float64 `json:"duration_ms"`
	// Request is the body sent; Answer the body received: its JSON when
	// it is JSON, else a string.
	Request json.RawMessage `json:"request"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	// Error is the call's error (unreachable, a bad answer).
	Error string `json:"error,omitempty"`
	// Problems lists everything wrong in the answer, each a sentence
	// (empty: the answer is of the contract's shape).
	Problems []string `json:"problems"`
}

// ExitCode is the process exit code of the report: 0 when the handler
// would apply the event (or the event is a duplicate), 1 when it fails.
func (r *Report) ExitCode() int {
	if r.Outcome == OutcomeFailed {
		return 1
	}
	return 0
}

// The outcomes of a Report.
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate"
	OutcomeFailed    = "failed"
)

// WriteJSON writes r as one indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("try: write json: %w", err)
	}
	return nil
}

// WriteText writes r for a reader.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	label, kind, it := "handler ", r.Kind+" handler", "it"
	if strings.Contains(r.Handler, ", ") {
		label, kind, it = "handlers", r.Kind+" handlers", "them"
	}
	where := kind + " of service " + r.Service
	if r.Pool != "" {
		where += ", as pool " + r.Pool + " runs " + it
	}
	fmt.Fprintf(&b, "%s %s (%s)\n", label, r.Handler, where)
	if e := r.Event; e != nil {
		fmt.Fprintf(&b, "event    %s %s, occurred %s, attempt %d", e.ID, e.Name, e.OccurredAt.Format(time.RFC3339Nano), e.Attempt)
		if e.FailureID != "" {
			fmt.Fprintf(&b, ", stored failure %s", e.FailureID)
		}
		b.WriteString("\n")
	}
	for _, c := range r.Calls {
		status := "no answer"
		if c.Status != 0 {
			status = fmt.Sprintf("%d", c.Status)
		}
		fmt.Fprintf(&b, "\ncall     POST %s -> %s in %.1f ms\n", c.URL, status, c.DurationMS)
		fmt.Fprintf(&b, "  request %s\n", c.Request)
		if len(c.Answer) > 0 {
			fmt.Fprintf(&b, "  answer  %s\n", strings.TrimSpace(string(c.Answer)))
		}
		if c.Error != "" {
			fmt.Fprintf(&b, "  error   %s\n", c.Error)
		}
		if len(c.Problems) == 0 && c.Status == 200 {
			b.WriteString("  answer problems: none\n")
		}
		for _, p := range c.Problems {
			fmt.Fprintf(&b, "  answer problem: %s\n", p)
		}
	}
	fmt.Fprintf(&b, "\neffects  %d\n", len(r.Effects))
	for i, e := range r.Effects {
		name := e.Handler
		if e.Statement != "" {
			name += " " + e.Statement
		}
		if e.Error != "" {
			fmt.Fprintf(&b, "  %d. %s: ERROR %s\n", i+1, name, e.Error)
		} else {
			fmt.Fprintf(&b, "  %d. %s: %s (%d %s)\n", i+1, name, e.Command, e.Rows, plural(e.Rows, "row", "rows"))
		}
		fmt.Fprintf(&b, "     %s\n", indent(e.SQL, "     "))
		if len(e.Args) > 0 {
			fmt.Fprintf(&b, "     args: %s\n", strings.Join(quoteAll(e.Args), ", "))
		}
	}
	fmt.Fprintf(&b, "\noutbox   %d\n", len(r.Outbox))
	for i, m := range r.Outbox {
		fmt.Fprintf(&b, "  %d. %s %s\n     payload %s\n     headers %s\n", i+1, m.EventName, m.EventID, m.Payload, m.Headers)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote     %s\n", n)
	}
	b.WriteString("\n")
	switch r.Outcome {
	case OutcomeProcessed:
		who := "the handler succeeds"
		if it == "them" {
			who = "every handler succeeds"
		}
		b.WriteString("result   WOULD APPLY: " + who + "; the effects and outbox rows would commit with the event's processed_event row\n")
	case OutcomeDuplicate:
		b.WriteString("result   DUPLICATE: the event id is in processed_event; the handler would not run (try -ignore-processed runs it anyway)\n")
	default:
		f := r.Error
		fmt.Fprintf(&b, "result   FAILS (%s", f.Class)
		if f.Reason != "" {
			fmt.Fprintf(&b, ", reason %s", f.Reason)
		}
		fmt.Fprintf(&b, "): %s\n", f.Settlement)
		if f.Handler != "" {
			fmt.Fprintf(&b, "  handler  %s\n", f.Handler)
		}
		if f.SQLState != "" {
			fmt.Fprintf(&b, "  sqlstate %s\n", f.SQLState)
		}
		fmt.Fprintf(&b, "  error    %s\n", f.Message)
	}
	b.WriteString("rolled back: nothing was written\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("try: write: %w", err)
	}
	return nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func indent(s, prefix string) string {
	return strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+prefix)
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		if s == "NULL" {
			out[i] = s
			continue
		}
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
