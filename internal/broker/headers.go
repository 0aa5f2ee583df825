package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

// maxErrorHeader bounds the x-error header.
const maxErrorHeader = 2048

// AttemptOf reads x-attempt: 0 when absent, unreadable or negative (a
// producer's or a republisher's header; a negative one would index the
// retry delays below zero).
func AttemptOf(h amqp.Table) int { return max(0, headerInt(h[HeaderAttempt])) }

// headerInt reads an integer header value of any AMQP integer type or as
// decimal text; 0 otherwise.
func headerInt(h any) int {
	switch v := h.(type) {
	case int:
		return v
	case int8:
		return int(v)
	case int16:
		return int(v)
	case int32:
		return int(v)
	case int64:
		return int(v)
	case uint8:
		return int(v)
	case uint16:
		return int(v)
	case uint32:
		return int(v)
	case string:
		n, _ := strconv.Atoi(v)
		return n
	}
	return 0
}

// OriginalRoutingKey is the event's routing key: a retried copy comes back
// from its delay queue routed by queue name, so it carries the original.
func OriginalRoutingKey(d *amqp.Delivery) string {
	if rk, ok := d.Headers[HeaderOriginalRoutingKey].(string); ok && rk != "" {
		return rk
	}
	return d.RoutingKey
}

// IsReplay reports whether d is a copy sent back by replay tooling
// (header x-replay, any value).
func IsReplay(d *amqp.Delivery) bool {
	_, ok := d.Headers[HeaderReplay]
	return ok
}

// BeyondHorizonOverride reports whether d is a copy an operator let
// through the beyond-horizon guard (x-beyond-horizon-override: true).
func BeyondHorizonOverride(d *amqp.Delivery) bool {
	switch v := d.Headers[HeaderBeyondHorizonOverride].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// cloneHeaders copies h so a copy's headers never alias the delivery's.
func cloneHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+8)
	for k, v := range h {
		if k == headerPublishID {
			continue
		}
		out[k] = v
	}
	return out
}

// CopyOf returns a publishing with d's body and properties, unchanged
// except for headers (cloned) and the fields a republish must not carry
// (per-message TTL, user id checked against our connection's user).
func CopyOf(d *amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers:         cloneHeaders(d.Headers),
		ContentType:     d.ContentType,
		ContentEncoding: d.ContentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.Priority,
		CorrelationId:   d.CorrelationId,
		ReplyTo:         d.ReplyTo,
		MessageId:       d.MessageId,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		AppId:           d.AppId,
		Body:            d.Body,
	}
}

// RetryCopy is d as it goes to a delay queue for attempt.
func RetryCopy(d *amqp.Delivery, attempt int, errText string) amqp.Publishing {
	return errorCopy(d, attempt, errText)
}

// errorCopy is d as it is sent on to a delay queue after its handler's
// error errText: x-error (errText, cut to maxErrorHeader bytes), x-attempt
// and the original routing key.
func errorCopy(d *amqp.Delivery, attempt int, errText string) amqp.Publishing {
	p := CopyOf(d)
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	p.Headers[HeaderError] = errText
	p.Headers[HeaderAttempt] = int32(attempt)
	p.Headers[HeaderOriginalRoutingKey] = OriginalRoutingKey(d)
	return p
}

// TableFromJSON converts a JSON object (headers kept as jsonb: an outbox
// row's, a stored failure's) to an AMQP table: strings, booleans and null
// as themselves, integers that fit as int64, other numbers as float64,
// objects as tables and arrays as arrays. Empty text and {} give a nil
// table. It does not check the table against AMQP's field types
// (amqp.Table.Validate).
func TableFromJSON(text []byte) (amqp.Table, error) {
	if len(text) == 0 || string(text) == "{}" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	t := make(amqp.Table, len(m))
	for k, v := range m {
		t[k] = amqpValue(v)
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
