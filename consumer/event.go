package consumer

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// Event is one decoded delivery as a handler sees it. Events are values;
// a handler must not keep a reference to Payload after it returns.
type Event struct {
	// ID is the producer-set event id (a UUID). It is the dedup key.
	ID uuid.UUID
	// Name is the event name, e.g. "order.order.placed.v1".
	Name string
	// OccurredAt is when the producer says the event happened.
	OccurredAt time.Time
	// Payload is the raw JSON object of the envelope's payload field.
	Payload json.RawMessage
	// Attempt is 0 on the first delivery, 1 on the first retry, and so on
	// (the x-attempt header).
	Attempt int
	// Delivery holds the broker facts of this delivery.
	Delivery Delivery
	// SpanContext is the context of platformd's span of this delivery
	// ("process <queue>"): the parent of what a handler traces, and the
	// trace context of the messages it writes to the outbox (see
	// EventContext). It is the zero (invalid) SpanContext when tracing is
	// off.
	SpanContext trace.SpanContext
}

// Delivery holds the facts of how an event reached platformd.
type Delivery struct {
	// Pool is the name of the worker pool that consumed the event.
	Pool string
	// Queue is the RabbitMQ queue it was consumed from.
	Queue string
	// RoutingKey is the routing key it was published with.
	RoutingKey string
	// Redelivered is the broker's redelivered flag.
	Redelivered bool
	// Replay is true when the copy was sent back by replay tooling
	// (the x-replay header).
	Replay bool
	// FailureID is the stored failure this copy settles (its
	// x-failure-id header: an operator's retry of a failed event, or the
	// release of an event parked behind its key's failure); uuid.Nil for
	// an ordinary delivery. The transaction that applies the event marks
	// that failure resolved.
	FailureID uuid.UUID
	// SequenceKey is the value of the pool's partition_key in the payload
	// when the pool keeps each key's events in order across failures
	// (failures.ordered), "" otherwise: once an event of the key fails,
	// the key's later events wait behind it.
	SequenceKey string
}
