package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ChannelOpener opens a channel of the caller's own (*Conn does).
type ChannelOpener interface {
	Channel(ctx context.Context) (*amqp.Channel, error)
}

var _ ChannelOpener = (*Conn)(nil)

// DelayQueueArgs returns the arguments platformd declares the shared delay
// queue of delay with, for pools whose queues are of queueType: the delay
// as the queue's message TTL, dead-lettering through the default exchange
// by the message's own routing key (the pool's queue name, which a retry
// copy is published with), and the queue type. A quorum delay queue
// dead-letters at least once (x-dead-letter-strategy, which needs
// x-overflow reject-publish): a message that expires while its pool's
// queue cannot take it stays until it can. A classic one dead-letters at
// most once: a broker failing mid-way may lose the message.
func DelayQueueArgs(queueType string, delay time.Duration) amqp.Table {
	args := amqp.Table{
		amqp.QueueTypeArg:        queueType,
		"x-message-ttl":          delay.Milliseconds(),
		"x-dead-letter-exchange": "",
	}
	if queueType == amqp.QueueTypeQuorum {
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

// delaysLogged remembers the delay queues found with other arguments than
// a pool wanted, by name and what was found, so that each is logged once
// per process rather than at every channel run of every pool (each
// consumer channel a pool opens declares them).
var delaysLogged sync.Map

// DeclareDelays declares the shared delay queue of each of t's retry
// delays, idempotently: a durable fanout exchange named DelayQueue(d),
// bound to the durable queue of the same name (DelayQueueArgs for
// t.QueueType). It opens its own channels on conn, since a declaration
// that meets a queue with other arguments costs the channel (406).
//
// Pools of either queue type, in any daemon, share one delay queue per
// delay: the first to declare it sets its type. A pool that finds it of
// the other type, or with other arguments (an operator's, another
// version's), uses it as it is: it tries the other type's arguments (to
// learn the type), else declares it passively, and logs what it found once
// per process. A retry copy goes to the exchange, so it lands in the queue
// whatever its type; only the dead-lettering guarantee is the queue's.
//
// It is safe for concurrent use.
func (t Topology) DeclareDelays(ctx context.Context, conn ChannelOpener, log *slog.Logger) error {
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	open := func() (*amqp.Channel, error) {
		if ch != nil && !ch.IsClosed() {
			return ch, nil
		}
		if ch != nil {
			_ = ch.Close()
		}
		var err error
		ch, err = conn.Channel(ctx)
		return ch, err
	}
	seen := make([]time.Duration, 0, len(t.RetryDelays))
	for _, d := range t.RetryDelays {
		if slices.Contains(seen, d) {
			continue
		}
		seen = append(seen, d)
		if err := declareDelay(ctx, open, t.QueueType, d, log); err != nil {
			return err
		}
	}
	return nil
}

// declareDelay declares delay's exchange and queue and binds them, through
// open, which gives a live channel (a new one after a 406).
func declareDelay(ctx context.Context, open func() (*amqp.Channel, error), queueType string, delay time.Duration, log *slog.Logger) error {
	name := DelayQueue(delay)
	ch, err := open()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(name, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare delay exchange %s: %w", name, err)
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, DelayQueueArgs(queueType, delay))
	if isPreconditionFailed(err) {
		err = useExisting(ctx, open, name, queueType, delay, log)
	}
	if err != nil {
		return fmt.Errorf("declare delay queue %s: %w", name, err)
	}
	if ch, err = open(); err != nil {
		return err
	}
	if err := ch.QueueBind(name, "", name, false, nil); err != nil {
		return fmt.Errorf("bind delay queue %s: %w", name, err)
	}
	return nil
}

// useExisting accepts the delay queue name that exists with other
// arguments than queueType's: the other type's as platformd declares them,
// or, failing that, whatever it has (a passive declare). It logs what it
// found once per process.
func useExisting(ctx context.Context, open func() (*amqp.Channel, error), name, queueType string, delay time.Duration, log *slog.Logger) error {
	other := amqp.QueueTypeClassic
	if queueType == amqp.QueueTypeClassic {
		other = amqp.QueueTypeQuorum
	}
	ch, err := open()
	if err != nil {
		return err
	}
	found := other
	_, err = ch.QueueDeclare(name, true, false, false, false, DelayQueueArgs(other, delay))
	if isPreconditionFailed(err) {
		found = "unknown (other arguments)"
		if ch, err = open(); err != nil {
			return err
		}
		_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
	}
	if err != nil {
		return err
	}
	if _, logged := delaysLogged.LoadOrStore(name+"\x00"+found, true); !logged {
		log.InfoContext(ctx, "broker: shared delay queue exists with other arguments, using it as it is",
			slog.String("queue", name), slog.String("wanted_type", queueType), slog.String("found_type", found))
	}
	return nil
}

// isPreconditionFailed reports whether err is the broker's 406: a
// declaration that does not match what exists.
func isPreconditionFailed(err error) bool {
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == amqp.PreconditionFailed
}

// IsNotFound reports whether err is the broker's 404: a queue or exchange
// that does not exist (it closes the channel it was asked on).
func IsNotFound(err error) bool {
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == amqp.NotFound
}

// ErrQueueNotFound is the error of a queue that does not exist.
var ErrQueueNotFound = errors.New("queue does not exist")

// QueueDepth is a queue's depth as a passive declare reports it: its ready
// messages, or Err.
type QueueDepth struct {
	Name     string
	Messages int
	Err      error
}

// QueueDepths reads the depth of each named queue with passive declares on
// channels of its own on conn (a missing queue costs the channel): one
// QueueDepth per name, in order, Err wrapping ErrQueueNotFound for a queue
// that does not exist. It is safe for concurrent use.
func QueueDepths(ctx context.Context, conn ChannelOpener, names []string) []QueueDepth {
	out := make([]QueueDepth, len(names))
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	for i, name := range names {
		out[i].Name = name
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = conn.Channel(ctx); err != nil {
				ch = nil
				for j := i; j < len(names); j++ {
					out[j] = QueueDepth{Name: names[j], Err: err}
				}
				return out
			}
		}
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		switch {
		case IsNotFound(err):
			out[i].Err = fmt.Errorf("%s: %w", name, ErrQueueNotFound)
		case err != nil:
			out[i].Err = fmt.Errorf("inspect %s: %w", name, err)
		default:
			out[i].Messages = q.Messages
		}
	}
	return out
}
