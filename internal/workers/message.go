package workers

import (
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/metrics"
)

// maxErrorHeader bounds the x-error header.
const maxErrorHeader = 2048

// attemptOf reads x-attempt: 0 when absent, unreadable or negative (a
// producer's or a republisher's header; a negative one would index the
// retry delays below zero).
func attemptOf(h amqp.Table) int { return max(0, headerInt(h[HeaderAttempt])) }

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

// originalRoutingKey is the event's routing key: a retried copy comes back
// from its delay queue routed by queue name, so it carries the original.
func originalRoutingKey(d *amqp.Delivery) string {
	if rk, ok := d.Headers[HeaderOriginalRoutingKey].(string); ok && rk != "" {
		return rk
	}
	return d.RoutingKey
}

func isReplay(d *amqp.Delivery) bool {
	_, ok := d.Headers[HeaderReplay]
	return ok
}

func beyondHorizonOverride(d *amqp.Delivery) bool {
	switch v := d.Headers[HeaderBeyondHorizonOverride].(type) {
	case bool:
		return v
	case string:
		return v == "true"
	}
	return false
}

// duplicateSource says where a duplicate came from: replay tooling's
// header, the broker's redelivered flag, or else a republish (relay).
func duplicateSource(d *amqp.Delivery) string {
	switch {
	case isReplay(d):
		return metrics.SourceReplay
	case d.Redelivered:
		return metrics.SourceRedelivery
	default:
		return metrics.SourceRepublish
	}
}

// toEvent builds the handler's view of a decoded delivery.
func toEvent(env envelope.Envelope, d *amqp.Delivery, pool, queue string) consumer.Event {
	return consumer.Event{
		ID:         env.EventID,
		Name:       env.EventName,
		OccurredAt: env.OccurredAt,
		Payload:    env.Payload,
		Attempt:    attemptOf(d.Headers),
		Delivery: consumer.Delivery{
			Pool:        pool,
			Queue:       queue,
			RoutingKey:  originalRoutingKey(d),
			Redelivered: d.Redelivered,
			Replay:      isReplay(d),
		},
	}
}

// eventTime is the time the beyond-horizon guard judges an event by: the
// timestamp of a UUID v7 id (set by the producer when it wrote its outbox
// row), else occurred_at.
func eventTime(ev consumer.Event) time.Time {
	if ev.ID.Version() == 7 {
		sec, nsec := ev.ID.Time().UnixTime()
		return time.Unix(sec, nsec)
	}
	return ev.OccurredAt
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

// copyOf returns a publishing with d's body and properties, unchanged
// except for headers (cloned) and the fields a republish must not carry
// (per-message TTL, user id checked against our connection's user).
func copyOf(d *amqp.Delivery) amqp.Publishing {
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

// failureCopy is d as it goes to the failure queue, with the contract's
// headers.
func failureCopy(d *amqp.Delivery, pool, reason, errText string, now time.Time) amqp.Publishing {
	p := copyOf(d)
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	p.Headers[HeaderFailureReason] = reason
	p.Headers[HeaderError] = errText
	p.Headers[HeaderAttempt] = int32(attemptOf(d.Headers))
	p.Headers[HeaderFailedAt] = now.UTC().Format(time.RFC3339)
	p.Headers[HeaderOriginalRoutingKey] = originalRoutingKey(d)
	p.Headers[HeaderPool] = pool
	return p
}

// retryCopy is d as it goes to a delay queue for attempt.
func retryCopy(d *amqp.Delivery, attempt int, errText string) amqp.Publishing {
	p := copyOf(d)
	if len(errText) > maxErrorHeader {
		errText = errText[:maxErrorHeader]
	}
	p.Headers[HeaderAttempt] = int32(attempt)
	p.Headers[HeaderOriginalRoutingKey] = originalRoutingKey(d)
	p.Headers[HeaderError] = errText
	return p
}
