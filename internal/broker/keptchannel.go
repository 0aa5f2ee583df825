package broker

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// KeptChannel is a channel kept open across calls for one kind of work (a
// publisher's confirms, a replay's transactions): opened on first use, set
// up by its setup function, and opened and set up again after the broker
// or the connection closed it. It is used by one goroutine at a time.
type KeptChannel struct {
	conn *Conn
	// name prefixes the errors of opening and setting up: "publisher".
	name string
	// setup puts a fresh channel in its mode (confirm.select, tx.select)
	// and registers what must be registered per channel (NotifyReturn).
	setup func(*amqp.Channel) error
	ch    *amqp.Channel
}

// NewKeptChannel returns a KeptChannel on conn; setup runs on every channel
// it opens, before its first use.
func NewKeptChannel(conn *Conn, name string, setup func(*amqp.Channel) error) *KeptChannel {
	return &KeptChannel{conn: conn, name: name, setup: setup}
}

// Get returns the open channel, or opens and sets up a new one when there
// is none or it was closed. A channel whose setup failed is closed.
func (k *KeptChannel) Get(ctx context.Context) (*amqp.Channel, error) {
	if k.ch != nil && !k.ch.IsClosed() {
		return k.ch, nil
	}
	k.ch = nil
	ch, err := k.conn.Channel(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.name, err)
	}
	if err := k.setup(ch); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%s: %w", k.name, err)
	}
	k.ch = ch
	return ch, nil
}

// Close closes the channel if one is open; the next Get opens a new one.
// A caller closes it after an error that leaves the channel unusable but
// open (a failed tx.commit).
func (k *KeptChannel) Close() {
	if k.ch != nil {
		_ = k.ch.Close()
		k.ch = nil
	}
}
