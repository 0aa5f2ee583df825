package broker

import (
	"fmt"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Failure reasons (header x-failure-reason).
const (
	ReasonDecode           = "decode"
	ReasonNoHandler        = "no_handler"
	ReasonPermanent        = "permanent"
	ReasonRetriesExhausted = "retries_exhausted"
	ReasonBeyondHorizon    = "beyond_horizon"
)

// Headers of the topology contract (DESIGN.md).
const (
	HeaderAttempt               = "x-attempt"
	HeaderFailureReason         = "x-failure-reason"
	HeaderError                 = "x-error"
	HeaderFailedAt              = "x-failed-at"
	HeaderOriginalRoutingKey    = "x-original-routing-key"
	HeaderPool                  = "x-pool"
	HeaderReplay                = "x-replay"
	HeaderBeyondHorizonOverride = "x-beyond-horizon-override"
	headerPublishID             = "x-platformd-publish-id"
)

// FailedQueue returns the failure queue an older version declared for
// queue: failures are rows of the failure store now, and a pool moves
// what it finds there into the store at start.
func FailedQueue(queue string) string { return queue + ".failed" }

// RetryQueue returns the delay queue of queue for delay, e.g.
// "stock.events.retry.10s".
func RetryQueue(queue string, delay time.Duration) string {
	return queue + ".retry." + compactDuration(delay)
}

func compactDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
}

// Topology is what a pool declares: the exchange, its queue and bindings,
// and its retry delay queues. Failures are not a queue: they are rows of
// the service database's failure store (package failure).
type Topology struct {
	Exchange    string
	Queue       string
	QueueType   string // quorum | classic
	Bindings    []string
	RetryDelays []time.Duration
}

func (t Topology) queueArgs() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: t.QueueType}
}

// Declare declares the topology on ch. Every declaration is idempotent; a
// queue that exists with other arguments makes the broker close ch (406).
func (t Topology) Declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", t.Exchange, err)
	}
	if _, err := ch.QueueDeclare(t.Queue, true, false, false, false, t.queueArgs()); err != nil {
		return fmt.Errorf("declare queue %s: %w", t.Queue, err)
	}
	for _, key := range t.Bindings {
		if err := ch.QueueBind(t.Queue, key, t.Exchange, false, nil); err != nil {
			return fmt.Errorf("bind %s to %s with %s: %w", t.Queue, t.Exchange, key, err)
		}
	}
	for _, d := range t.RetryDelays {
		args := t.queueArgs()
		args["x-message-ttl"] = d.Milliseconds()
		args["x-dead-letter-exchange"] = ""
		args["x-dead-letter-routing-key"] = t.Queue
		if t.QueueType == "quorum" {
			// Quorum queues can dead-letter at least once; classic
			// dead-lettering may lose a message if the broker fails mid-way.
			args["x-dead-letter-strategy"] = "at-least-once"
			args["x-overflow"] = "reject-publish"
		}
		name := RetryQueue(t.Queue, d)
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			return fmt.Errorf("declare retry queue %s: %w", name, err)
		}
	}
	return nil
}
