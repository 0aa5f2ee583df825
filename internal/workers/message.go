package workers

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/metrics"
)

// duplicateSource says where a duplicate came from: replay tooling's
// header, the broker's redelivered flag, or else a republish (relay).
func duplicateSource(d *amqp.Delivery) string {
	switch {
	case broker.IsReplay(d):
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
		Attempt:    broker.AttemptOf(d.Headers),
		Delivery: consumer.Delivery{
			Pool:        pool,
			Queue:       queue,
			RoutingKey:  broker.OriginalRoutingKey(d),
			Redelivered: d.Redelivered,
			Replay:      broker.IsReplay(d),
		},
	}
}

// eventTime is the time the beyond-horizon guard judges an event by
// (envelope.EventTime).
func eventTime(ev consumer.Event) time.Time { return envelope.EventTime(ev.ID, ev.OccurredAt) }
