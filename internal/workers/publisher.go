package workers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrReturned is the error of a copy the broker could not route (its queue
// is missing); the original must not be acked.
var ErrReturned = errors.New("message returned unroutable")

// ErrNacked is the error of a copy the broker refused to confirm.
var ErrNacked = errors.New("message not confirmed by the broker")

var publishSeq atomic.Uint64

// outgoing is one copy to publish: to the default exchange, routed by queue
// name.
type outgoing struct {
	queue string
	msg   amqp.Publishing
}

// Publisher publishes copies with publisher confirms and mandatory routing
// on a channel of its own. It is used by one worker at a time.
type Publisher struct {
	conn    *Conn
	ch      *amqp.Channel
	returns chan amqp.Return
	// returnsCap bounds the copies in flight so the library's reader never
	// blocks on a full returns channel.
	returnsCap int
}

// NewPublisher returns a Publisher on conn for batches of up to maxBatch
// copies.
func NewPublisher(conn *Conn, maxBatch int) *Publisher {
	return &Publisher{conn: conn, returnsCap: maxBatch + 16}
}

func (p *Publisher) channel(ctx context.Context) (*amqp.Channel, error) {
	if p.ch != nil && !p.ch.IsClosed() {
		return p.ch, nil
	}
	conn, err := p.conn.Get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("publisher channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("publisher confirm mode: %w", err)
	}
	p.returns = ch.NotifyReturn(make(chan amqp.Return, p.returnsCap))
	p.ch = ch
	return ch, nil
}

// Publish sends every copy and waits for its confirm. It returns one error
// per copy: nil only when the broker confirmed it and did not return it.
func (p *Publisher) Publish(ctx context.Context, out []outgoing) []error {
	errs := make([]error, len(out))
	if len(out) == 0 {
		return errs
	}
	ch, err := p.channel(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	confirms := make([]*amqp.DeferredConfirmation, len(out))
	ids := make(map[string]int, len(out))
	for i, o := range out {
		id := strconv.FormatUint(publishSeq.Add(1), 36)
		if o.msg.Headers == nil {
			o.msg.Headers = amqp.Table{}
		}
		o.msg.Headers[headerPublishID] = id
		ids[id] = i
		confirms[i], errs[i] = ch.PublishWithDeferredConfirmWithContext(ctx, "", o.queue, true, false, o.msg)
	}
	for i, c := range confirms {
		if errs[i] != nil || c == nil {
			if errs[i] == nil {
				errs[i] = ErrNacked
			}
			continue
		}
		ok, err := c.WaitContext(ctx)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("publish to %s: %w", out[i].queue, err)
		case !ok:
			errs[i] = fmt.Errorf("publish to %s: %w", out[i].queue, ErrNacked)
		}
	}
	// A basic.return reaches the returns channel before the confirm of the
	// same message is resolved (one reader goroutine handles both in
	// order), so every return of this batch is already buffered.
drain:
	for {
		select {
		case r := <-p.returns:
			if id, ok := r.Headers[headerPublishID].(string); ok {
				if i, ok := ids[id]; ok {
					errs[i] = fmt.Errorf("publish to %s: %w (%d %s)", out[i].queue, ErrReturned, r.ReplyCode, r.ReplyText)
				}
			}
		default:
			break drain
		}
	}
	if p.ch.IsClosed() {
		p.ch = nil // the next Publish opens a fresh channel
	}
	return errs
}

// Close closes the publisher's channel.
func (p *Publisher) Close() {
	if p.ch != nil {
		_ = p.ch.Close()
		p.ch = nil
	}
}
