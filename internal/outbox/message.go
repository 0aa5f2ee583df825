package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
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

// amqpHeaders converts a jsonb object to an AMQP table: strings, booleans
// and null as themselves, integers that fit as int64, other numbers as
// float64, objects as tables and arrays as arrays.
func amqpHeaders(text string) (amqp.Table, error) {
	if text == "" || text == "{}" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	t := make(amqp.Table, len(m))
	for k, v := range m {
		t[k] = amqpValue(v)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

func amqpValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		t := make(amqp.Table, len(x))
		for k, e := range x {
			t[k] = amqpValue(e)
		}
		return t
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = amqpValue(e)
		}
		return out
	default:
		return x // string, bool, nil
	}
}
