package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Message is one message a handler (or any Go code holding a transaction on
// a service database) emits through the outbox: platformd's relay publishes
// it after the transaction commits, as the contract's envelope, with
// routing key Name (docs/contracts.md, "Outbox, archive and replay").
type Message struct {
	// Name is the event name and routing key, e.g. "stock.stock.reserved.v1":
	// dot-separated words of ASCII letters, digits, '_' and '-', at most
	// MaxMessageNameBytes bytes.
	Name string
	// Payload is the envelope's payload: a json.RawMessage or []byte holding
	// a JSON object, or any value encoding/json marshals to one.
	Payload any
	// Headers, optional, become the message's AMQP headers (strings,
	// numbers, booleans, nested objects and arrays).
	Headers map[string]any
}

// MaxMessageNameBytes bounds Message.Name: it is an AMQP routing key.
const MaxMessageNameBytes = 255

// MaxHeadersBytes bounds Message.Headers as JSON. AMQP carries a message's
// headers in one frame (131,072 bytes on RabbitMQ by default); a larger one
// makes the broker close the relay's connection, every time the relay
// tries, so the relay holds such a row back and Publish refuses it.
const MaxHeadersBytes = 64 << 10

// ErrInvalidMessage is wrapped by Publish's errors for a message that
// cannot be published (bad name, payload or headers). Such an error is
// marked Permanent: retrying the same event cannot fix it.
var ErrInvalidMessage = errors.New("invalid outbox message")

var messageNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)

// insertOutboxSQL writes one row of platform.outbox. The created_at and
// occurred_at columns take the transaction's now(). It starts with the
// comment internal/query gives platformd's named queries, so that
// pg_stat_activity names it as it names them (consumer, imported by other
// modules, imports no package of platformd's).
const insertOutboxSQL = `/* platformd:consumer.publish */ INSERT INTO platform.outbox (event_id, event_name, payload, headers) VALUES ($1, $2, $3::jsonb, $4::jsonb)`

// Publish writes m to the service's outbox (table platform.outbox) through
// tx and returns the event id it minted, a UUID v7. The row commits or rolls
// back with tx: a handler that platformd runs once (its dedup step sees to
// it) publishes its messages once, and one whose transaction rolls back
// publishes none. The relay delivers each committed message at least once;
// consumers deduplicate by its event id. The message carries the trace
// context of ctx's span as its traceparent header (a handler's ctx carries
// its delivery's span), unless m.Headers has one. Publish is safe for
// concurrent use on distinct transactions.
func Publish(ctx context.Context, tx pgx.Tx, m Message) (uuid.UUID, error) {
	if tx == nil {
		return uuid.Nil, errors.New("consumer.Publish: nil transaction")
	}
	m.Headers = withTraceContext(ctx, m.Headers)
	payload, headers, err := m.encode()
	if err != nil {
		return uuid.Nil, Permanent(fmt.Errorf("consumer.Publish %q: %w", m.Name, err))
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, fmt.Errorf("consumer.Publish %q: event id: %w", m.Name, err)
	}
	// Text, not []byte: pgx sends it as text and PostgreSQL parses it as
	// jsonb, so numbers keep their digits.
	if _, err := tx.Exec(ctx, insertOutboxSQL, id, m.Name, string(payload), string(headers)); err != nil {
		err = fmt.Errorf("consumer.Publish %q: insert into platform.outbox: %w", m.Name, err)
		// The database refusing the message itself (22: a \u0000 in the
		// payload's jsonb; 23: a constraint) refuses it every time.
		if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && (pgerrcode.IsDataException(pe.Code) || pgerrcode.IsIntegrityConstraintViolation(pe.Code)) {
			err = Permanent(err)
		}
		return uuid.Nil, err
	}
	return id, nil
}

// encode validates m and returns its payload and headers as JSON objects.
func (m Message) encode() (payload, headers []byte, err error) {
	if len(m.Name) > MaxMessageNameBytes || !messageNameRE.MatchString(m.Name) {
		return nil, nil, fmt.Errorf("%w: name must be dot-separated words of letters, digits, _ and - (at most %d bytes)",
			ErrInvalidMessage, MaxMessageNameBytes)
	}
	switch p := m.Payload.(type) {
	case json.RawMessage:
		payload = p
	case []byte:
		payload = p
	case nil:
		return nil, nil, fmt.Errorf("%w: payload is required", ErrInvalidMessage)
	default:
		if payload, err = json.Marshal(p); err != nil {
			return nil, nil, fmt.Errorf("%w: payload: %w", ErrInvalidMessage, err)
		}
	}
	if !isJSONObject(payload) {
		return nil, nil, fmt.Errorf("%w: payload must be a JSON object", ErrInvalidMessage)
	}
	headers = []byte("{}")
	if len(m.Headers) > 0 {
		if headers, err = json.Marshal(m.Headers); err != nil {
			return nil, nil, fmt.Errorf("%w: headers: %w", ErrInvalidMessage, err)
		}
		if len(headers) > MaxHeadersBytes {
			return nil, nil, fmt.Errorf("%w: headers are %d bytes as JSON, at most %d", ErrInvalidMessage, len(headers), MaxHeadersBytes)
		}
	}
	return payload, headers, nil
}

// isJSONObject reports whether b is one valid JSON object (surrounding
// whitespace allowed).
func isJSONObject(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}
