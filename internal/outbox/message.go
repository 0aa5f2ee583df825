package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/envelope"
)

// occurredAtLayout is RFC 3339 in UTC with the microseconds timestamptz
// holds, always six digits.
const occurredAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// row is one platform.outbox row as the relay reads it: payload and headers
// as PostgreSQL renders the jsonb.
type row struct {
	id         uuid.UUID
	name       string
	occurredAt time.Time
	// finite is false when occurred_at is 'infinity' or '-infinity'.
	finite  bool
	payload string
	headers string
}

// message returns the row's message: the contract's envelope as body,
// persistent, application/json, the row's headers. The body is checked
// with the consumers' own decoder (maxBody is their limit), so a row that
// a consumer would reject is held instead of published.
func (r row) message(maxBody int) (amqp.Publishing, error) {
	if !r.finite {
		return amqp.Publishing{}, errors.New("occurred_at is not a finite time")
	}
	if len(r.headers) > consumer.MaxHeadersBytes {
		// The broker would close the connection on the frame, at every
		// try, and with it every other relay's channel on it.
		return amqp.Publishing{}, fmt.Errorf("headers are %d bytes as JSON, at most %d", len(r.headers), consumer.MaxHeadersBytes)
	}
	name, err := json.Marshal(r.name)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("event_name: %w", err)
	}
	body := make([]byte, 0, 96+len(name)+len(r.payload))
	body = append(body, `{"event_id":"`...)
	body = append(body, r.id.String()...)
	body = append(body, `","event_name":`...)
	body = append(body, name...)
	body = append(body, `,"occurred_at":"`...)
	body = r.occurredAt.UTC().AppendFormat(body, occurredAtLayout)
	body = append(body, `","payload":`...)
	body = append(body, r.payload...)
	body = append(body, '}')
	if _, err := envelope.Decode(body, maxBody); err != nil {
		return amqp.Publishing{}, err
	}
	headers, err := amqpHeaders(r.headers)
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("headers: %w", err)
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    r.id.String(),
		Timestamp:    r.occurredAt,
		AppId:        "platformd",
		Body:         body,
	}, nil
}

// amqpHeaders converts a row's jsonb headers to an AMQP table
// (broker.TableFromJSON) and checks it against AMQP's field types.
func amqpHeaders(text string) (amqp.Table, error) {
	t, err := broker.TableFromJSON([]byte(text))
	if err != nil || t == nil {
		return nil, err
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}
