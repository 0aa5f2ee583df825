package failure

import (
	"time"

	"github.com/google/uuid"
)

// States of a failure (platform.failed_event.state).
const (
	// StateFailed: stored, waiting for an operator.
	StateFailed = "failed"
	// StateParked: an event of an ordered pool held behind its key's
	// unresolved head; released once the head is resolved or discarded.
	StateParked = "parked"
	// StateRetrying: a copy is on its way back to the pool (a retry, a
	// release), or, in an ordered pool, the event waits in a retry delay.
	StateRetrying = "retrying"
	// StateResolved: a copy was applied, or found already applied, in the
	// transaction that marked the row.
	StateResolved = "resolved"
	// StateDiscarded: an operator gave it up.
	StateDiscarded = "discarded"
)

// Reasons a failure is stored for, beyond the failure queue's five
// (broker.Reason…, which keep their names).
const (
	// ReasonParked: held behind its key's head (ordered pools).
	ReasonParked = "parked"
	// ReasonRetrying: an ordered pool's event waiting in a retry delay;
	// it blocks its key like a failure, and becomes one only if its last
	// attempt fails.
	ReasonRetrying = "retrying"
)

// HeaderFailureID is the header a retried or released copy carries: the
// id of the row its outcome settles.
const HeaderFailureID = "x-failure-id"

// Failure is one row of platform.failed_event.
type Failure struct {
	// ID is the failure's id (UUID v7, minted at its first write).
	ID uuid.UUID
	// Pool is the pool the message failed in.
	Pool string
	// EventID is the envelope's id; uuid.Nil when the body did not decode.
	EventID uuid.UUID
	// EventName and RoutingKey are the event's name and its original
	// routing key.
	EventName, RoutingKey string
	// Headers are the delivery's headers (AMQP values as JSON).
	Headers map[string]any
	// Body is the message body, byte for byte.
	Body []byte
	// Reason is one of broker.Reason… or Reason….
	Reason string
	// Error is the last error's text; Fingerprint is the error with its
	// uuids, numbers and quoted values replaced by placeholders.
	Error, Fingerprint string
	// Handler names the handler that failed ("" when none ran).
	Handler string
	// Attempt is the attempt that failed last (x-attempt).
	Attempt int
	// FirstFailedAt is when the row was written first; FailedAt when it
	// failed last.
	FirstFailedAt, FailedAt time.Time
	// Copies counts the copies of this failure met (1 at first).
	Copies int
	// SequenceKey is the pool's partition_key value ("" when the pool has
	// none or the body held none: NULL in the table).
	SequenceKey string
	// State is one of the State… constants.
	State string
	// ResolvedAt and ResolvedBy say when and by what it was resolved or
	// discarded (zero and "" otherwise).
	ResolvedAt time.Time
	ResolvedBy string
	// EditedBody is the body as an operator edited it (nil unless
	// edited); a retry sends it instead of Body.
	EditedBody []byte
	// EditedAt and EditedBy say who edited it last, and when.
	EditedAt time.Time
	EditedBy string
	// RetryID is the server-side retry that sent it last (uuid.Nil if
	// none).
	RetryID uuid.UUID
	// UpdatedAt is when the row last changed.
	UpdatedAt time.Time
}

// SendBody is the body a retry sends: the edited body when there is one.
func (f *Failure) SendBody() []byte {
	if f.EditedBody != nil {
		return f.EditedBody
	}
	return f.Body
}
