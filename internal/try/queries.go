package try

import (
	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/query"
)

// forgetProcessed deletes an event's processed_event row inside the
// rolled-back transaction (try -ignore-processed), so that an event
// already applied reaches its handler again.
var forgetProcessed = query.NewExec("try.forget_processed", `DELETE FROM processed_event WHERE event_id = $1`,
	func(id uuid.UUID) []any { return []any{id} })

// outboxRow is one row of platform.outbox as try shows it.
type outboxRow struct {
	EventID   uuid.UUID
	EventName string
	Payload   string
	Headers   string
}

// writtenOutbox reads the outbox rows the transaction wrote: created_at
// defaults to now(), the transaction's start, which no other
// transaction's rows share (they started at another moment).
var writtenOutbox = query.NewRows[query.NoParams]("try.written_outbox",
	`SELECT event_id, event_name, payload::text, headers::text FROM platform.outbox WHERE created_at = now() ORDER BY event_id`,
	nil, func(r *outboxRow) []any { return []any{&r.EventID, &r.EventName, &r.Payload, &r.Headers} })
