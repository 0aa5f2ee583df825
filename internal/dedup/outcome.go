package dedup

import (
	"errors"
	"fmt"
	"strings"
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
	// OutcomeParked: not run, because an earlier event of its sequence key
	// (consumer.Delivery.SequenceKey, set only by pools that keep their
	// keys in order) failed in the same call; nothing of it was recorded.
	OutcomeParked
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
	case OutcomeParked:
		return "parked"
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

// ErrorText is the text a failed result is stored and reported with: its
// error, prefixed with the failing handler's name once, whether or not the
// handler's own error already starts with it (the shop's handlers write
// "stock.reserve: event ...: payload: ...").
func (r Result) ErrorText() string {
	text := r.Err.Error()
	if r.Handler == "" || strings.HasPrefix(text, r.Handler+": ") {
		return text
	}
	return r.Handler + ": " + text
}
