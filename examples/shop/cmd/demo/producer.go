package main

// This file publishes events straight to the exchange, as replay tooling
// does: persistent, mandatory, with publisher confirms.

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// confirmWindow is the most publishes awaiting their confirm at once.
const confirmWindow = 256

// producer publishes envelopes to the exchange, persistent, mandatory and
// with publisher confirms, as replay tooling does: a publish counts only
// once the broker confirmed it and did not return it unroutable.
type producer struct {
	ch       *amqp.Channel
	returns  chan amqp.Return
	exchange string
}

func newProducer(conn *amqp.Connection, exchange string) (*producer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("producer channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("producer confirm mode: %w", err)
	}
	// Buffered for a whole window so the library's reader never blocks on
	// it while confirms are awaited.
	returns := ch.NotifyReturn(make(chan amqp.Return, confirmWindow+16))
	return &producer{ch: ch, returns: returns, exchange: exchange}, nil
}

func (p *producer) close() { _ = p.ch.Close() }

// publish sends evs with the given headers and waits for every confirm.
func (p *producer) publish(ctx context.Context, evs []*event, headers amqp.Table) error {
	for start := 0; start < len(evs); start += confirmWindow {
		window := evs[start:min(start+confirmWindow, len(evs))]
		confirms := make([]*amqp.DeferredConfirmation, len(window))
		for i, ev := range window {
			msg := amqp.Publishing{
				Headers:      headers,
				ContentType:  "application/json",
				DeliveryMode: amqp.Persistent,
				MessageId:    ev.id.String(),
				Timestamp:    time.Now(),
				AppId:        "platformd-demo",
				Body:         ev.body,
			}
			c, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, ev.name, true, false, msg)
			if err != nil {
				return fmt.Errorf("publish %s %s: %w", ev.name, ev.id, err)
			}
			confirms[i] = c
		}
		for i, c := range confirms {
			ok, err := c.WaitContext(ctx)
			if err != nil {
				return fmt.Errorf("confirm of %s %s: %w", window[i].name, window[i].id, err)
			}
			if !ok {
				return fmt.Errorf("the broker refused (nack) %s %s", window[i].name, window[i].id)
			}
		}
		// A basic.return is handed to the returns channel before the confirm
		// of the same message is resolved, so every return of this window is
		// already buffered.
		select {
		case r := <-p.returns:
			return fmt.Errorf("the broker could not route %s (%d %s): no queue is bound for it on exchange %q",
				r.RoutingKey, r.ReplyCode, r.ReplyText, p.exchange)
		default:
		}
	}
	if p.ch.IsClosed() {
		return errors.New("producer channel closed by the broker")
	}
	return nil
}
