package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// FailedMessage describes one message of a failure queue.
type FailedMessage struct {
	EventID, EventName string
	Reason, Error      string
	Attempt            int
	FailedAt           time.Time
	Pool, RoutingKey   string
}

// failedListMax bounds what one listing or retry holds unacked.
const failedListMax = 100_000

// headersResetOnRetry are the failure and retry bookkeeping headers a
// retried copy drops: it starts over at attempt 0.
var headersResetOnRetry = []string{
	HeaderAttempt, HeaderFailureReason, HeaderError, HeaderFailedAt, headerPublishID,
	"x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
	"x-last-death-exchange", "x-last-death-queue", "x-last-death-reason", "x-delivery-count",
}

// peekIDs reads event_id and event_name from a body without the strict
// checks (a decode failure may still carry readable ids).
func peekIDs(body []byte) (id, name string) {
	var v struct {
		EventID   string `json:"event_id"`
		EventName string `json:"event_name"`
	}
	if json.Unmarshal(body, &v) == nil {
		return v.EventID, v.EventName
	}
	return "", ""
}

func failedOf(d *amqp.Delivery) FailedMessage {
	m := FailedMessage{Attempt: AttemptOf(d.Headers), RoutingKey: OriginalRoutingKey(d)}
	m.EventID, m.EventName = peekIDs(d.Body)
	m.Reason, _ = d.Headers[HeaderFailureReason].(string)
	m.Error, _ = d.Headers[HeaderError].(string)
	m.Pool, _ = d.Headers[HeaderPool].(string)
	if s, ok := d.Headers[HeaderFailedAt].(string); ok {
		m.FailedAt, _ = time.Parse(time.RFC3339, s)
	}
	return m
}

// eachFailed opens a connection (to the first of the broker's nodes at
// urls, tried in turn from a random one, that answers) and a channel of
// its own and calls fn for each of the first limit messages of queue's
// failure queue, in queue order (at most as many as the queue held when it
// started, so that a message fn sends back is not met again), with the
// Conn fn may publish on. Closing the channel afterwards returns every
// message fn did not ack to the queue, in its place.
func eachFailed(ctx context.Context, urls []string, queue string, limit int, fn func(nodes *Conn, d *amqp.Delivery) error) error {
	nodes := NewConn(urls, "platformd-admin", nil, slog.New(slog.DiscardHandler))
	conn, err := nodes.dialOnce(ctx)
	if err != nil {
		return fmt.Errorf("failed queue of %s: %w", queue, err)
	}
	defer nodes.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("failed queue of %s: %w", queue, err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(FailedQueue(queue), true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("failed queue of %s: %w", queue, err)
	}
	for range min(q.Messages, limit, failedListMax) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d, ok, err := ch.Get(FailedQueue(queue), false)
		if err != nil {
			return fmt.Errorf("read failed queue of %s: %w", queue, err)
		}
		if !ok {
			break
		}
		if err := fn(nodes, &d); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// ListFailed returns up to limit messages of queue's failure queue, in
// queue order, and leaves every message there: they are fetched without
// ack and returned to the queue when the channel closes.
func ListFailed(ctx context.Context, urls []string, queue string, limit int) ([]FailedMessage, error) {
	var out []FailedMessage
	err := eachFailed(ctx, urls, queue, limit, func(_ *Conn, d *amqp.Delivery) error {
		out = append(out, failedOf(d))
		return nil
	})
	return out, err
}

// RetryFailed moves the chosen messages of queue's failure queue (those
// whose event id is in ids, or all) back to queue with the attempt count
// reset and the x-replay header set (and, with overrideBeyondHorizon, the
// header that lets them through the beyond-horizon guard). Each copy is
// confirmed by the broker before its original is acked; the others stay
// where they were.
func RetryFailed(ctx context.Context, urls []string, queue string, ids []uuid.UUID, all, overrideBeyondHorizon bool, actor string) (int, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[strings.ToLower(id.String())] = true
	}
	moved := 0
	var pub *Publisher
	defer func() {
		if pub != nil {
			pub.Close()
		}
	}()
	err := eachFailed(ctx, urls, queue, failedListMax, func(nodes *Conn, d *amqp.Delivery) error {
		id, _ := peekIDs(d.Body)
		if !all && !want[strings.ToLower(id)] {
			return nil
		}
		if pub == nil {
			// Copies go out on the same connection (a redial, should it
			// die, goes on to another node; the originals' acks then fail).
			pub = NewPublisher(nodes, 1)
		}
		msg := CopyOf(d)
		for _, h := range headersResetOnRetry {
			delete(msg.Headers, h)
		}
		msg.Headers[HeaderReplay] = "retry-failed:" + actor
		if overrideBeyondHorizon {
			msg.Headers[HeaderBeyondHorizonOverride] = true
		}
		msg.Headers[HeaderOriginalRoutingKey] = OriginalRoutingKey(d)
		if errs := pub.Publish(ctx, []Outgoing{{RoutingKey: queue, Msg: msg}}); errs[0] != nil {
			return fmt.Errorf("retry %s to %s: %w", id, queue, errs[0])
		}
		if err := d.Ack(false); err != nil {
			return fmt.Errorf("retry %s: remove original: %w", id, err)
		}
		moved++
		return nil
	})
	return moved, err
}
