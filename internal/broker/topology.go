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

// Headers of the topology contract (docs/contracts.md, "Topology").
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

// DelayQueuePrefix starts the name of every shared delay queue, and of the
// exchange in front of each.
const DelayQueuePrefix = "platformd.retry."

// DelayQueue returns the name of the delay queue shared by every pool of
// the vhost that retries after delay, and of the exchange in front of it:
// DelayQueuePrefix and the delay in Go duration syntax, e.g.
// "platformd.retry.10s", "platformd.retry.1m0s".
func DelayQueue(delay time.Duration) string { return DelayQueuePrefix + delay.String() }

// OldRetryQueue returns the delay queue an older version declared for queue
// and delay, one per pool and delay (e.g. "stock.events.retry.10s"): a pool
// drains what it finds there into the shared delay queues at start.
func OldRetryQueue(queue string, delay time.Duration) string {
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
// and the shared delay queues of its retry delays (DeclareDelays). Failures
// are not a queue: they are rows of the service database's failure store
// (package failure).
type Topology struct {
	Exchange  string
	Queue     string
	QueueType string // quorum | classic
	Bindings  []string
	// RetryDelays are the pool's retry delays: attempt n waits in the
	// shared delay queue of RetryDelays[n-1].
	RetryDelays []time.Duration
}

func (t Topology) queueArgs() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: t.QueueType}
}

// Declare declares the exchange, the pool's queue and its bindings on ch.
// Every declaration is idempotent; a queue that exists with other
// arguments makes the broker close ch (406). The shared delay queues are
// declared apart (DeclareDelays), on channels of their own, since another
// pool may have declared one with other arguments.
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
	return nil
}
