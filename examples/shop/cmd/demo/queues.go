package main

// This file watches RabbitMQ's side: how many messages wait in the shop's
// queues and how many consumers read them, with passive declares (the
// queues are the daemon's; the demo never declares or changes one).

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// inspector reads queue depths with passive declares, on a channel it
// reopens when the broker closes it (a missing queue closes the channel).
type inspector struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

// queue returns the messages ready in name and its consumer count; exists
// is false when the queue is not declared.
func (in *inspector) queue(name string) (ready, consumers int, exists bool, err error) {
	if in.ch == nil || in.ch.IsClosed() {
		if in.ch, err = in.conn.Channel(); err != nil {
			return 0, 0, false, fmt.Errorf("inspect queues: %w", err)
		}
	}
	q, err := in.ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			in.ch = nil
			return 0, 0, false, nil
		}
		return 0, 0, false, fmt.Errorf("inspect queue %s: %w", name, err)
	}
	return q.Messages, q.Consumers, true, nil
}

func (in *inspector) close() {
	if in.ch != nil {
		_ = in.ch.Close()
	}
}
