package broker

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

// Outgoing is one message to publish: to Exchange ("" is the default
// exchange, which routes by queue name) with RoutingKey.
type Outgoing struct {
	Exchange   string
	RoutingKey string
	Msg        amqp.Publishing
}

// Publisher publishes messages with publisher confirms and mandatory
// routing on a channel of its own: the pools' retry and failure copies, and
// the outbox relay's messages. It is used by one goroutine at a time.
type Publisher struct {
	ch *KeptChannel // in confirm mode, with returns registered
	// returns are the current channel's basic.returns, buffered to the
	// copies in flight (maxBatch+16) so the library's reader never blocks
	// on a full returns channel.
	returns chan amqp.Return
}

// NewPublisher returns a Publisher on conn for batches of up to maxBatch
// copies.
func NewPublisher(conn *Conn, maxBatch int) *Publisher {
	p := &Publisher{}
	p.ch = NewKeptChannel(conn, "publisher", func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("confirm mode: %w", err)
		}
		p.returns = ch.NotifyReturn(make(chan amqp.Return, maxBatch+16))
		return nil
	})
	return p
}

// Publish sends every message and waits for its confirm. It returns one
// error per message: nil only when the broker confirmed it and did not
// return it. A basic.return is matched to its message by MessageId when
// every message of out has a distinct one, else by a header of the
// Publisher's own added to each message.
func (p *Publisher) Publish(ctx context.Context, out []Outgoing) []error {
	errs := make([]error, len(out))
	if len(out) == 0 {
		return errs
	}
	ch, err := p.ch.Get(ctx)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	confirms := make([]*amqp.DeferredConfirmation, len(out))
	byMessageID := distinctMessageIDs(out)
	ids := make(map[string]int, len(out))
	for i, o := range out {
		if byMessageID != nil {
			ids[o.Msg.MessageId] = i
		} else {
			id := strconv.FormatUint(publishSeq.Add(1), 36)
			if o.Msg.Headers == nil {
				o.Msg.Headers = amqp.Table{}
			}
			o.Msg.Headers[headerPublishID] = id
			ids[id] = i
		}
		confirms[i], errs[i] = ch.PublishWithDeferredConfirmWithContext(ctx, o.Exchange, o.RoutingKey, true, false, o.Msg)
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
			errs[i] = fmt.Errorf("publish to %s: %w", out[i].dest(), err)
		case !ok:
			errs[i] = fmt.Errorf("publish to %s: %w", out[i].dest(), ErrNacked)
		}
	}
	// A basic.return reaches the returns channel before the confirm of the
	// same message is resolved (one reader goroutine handles both in
	// order), so every return of this batch is already buffered. The
	// library closes the channel when the AMQP channel dies (its node
	// lost, an oversized message): then there is nothing more to read.
drain:
	for {
		select {
		case r, open := <-p.returns:
			if !open {
				break drain
			}
			id, ok := r.Headers[headerPublishID].(string)
			if byMessageID != nil {
				id, ok = r.MessageId, true
			}
			if i, found := ids[id]; ok && found {
				errs[i] = fmt.Errorf("publish to %s: %w (%d %s)", out[i].dest(), ErrReturned, r.ReplyCode, r.ReplyText)
			}
		default:
			break drain
		}
	}
	return errs
}

// dest names where o goes, for errors.
func (o Outgoing) dest() string {
	if o.Exchange == "" {
		return o.RoutingKey
	}
	return o.Exchange + "/" + o.RoutingKey
}

// distinctMessageIDs returns the set of out's MessageIds when every message
// has one and no two share it, else nil.
func distinctMessageIDs(out []Outgoing) map[string]bool {
	seen := make(map[string]bool, len(out))
	for _, o := range out {
		if o.Msg.MessageId == "" || seen[o.Msg.MessageId] {
			return nil
		}
		seen[o.Msg.MessageId] = true
	}
	return seen
}

// Close closes the publisher's channel.
func (p *Publisher) Close() { p.ch.Close() }
