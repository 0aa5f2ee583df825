package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// broker is the bench's own AMQP connection: loading queues, watching their
// depth, cleaning up.
type broker struct {
	url       string
	queueType string
	conn      *amqp.Connection

	mu sync.Mutex
	ch *amqp.Channel // for declarations and passive polls; reopened after a 404/406
}

// dial opens the bench's own broker connection.
func dial(url string) (*amqp.Connection, error) {
	return amqp.DialConfig(url, amqp.Config{Properties: amqp.Table{"connection_name": "platformd-bench"}})
}

func dialBroker(url, queueType string) (*broker, error) {
	conn, err := dial(url)
	if err != nil {
		return nil, fmt.Errorf("broker: dial: %w", err)
	}
	return &broker{url: url, queueType: queueType, conn: conn}, nil
}

// version is RabbitMQ's version as the server announces it.
func (b *broker) version() string {
	if v, ok := b.conn.Properties["version"].(string); ok {
		return v
	}
	return "unknown"
}

// connection returns the live connection, dialling again if the broker
// closed it (a restart by someone else's test, say).
func (b *broker) connection() (*amqp.Connection, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.connLocked()
}

func (b *broker) connLocked() (*amqp.Connection, error) {
	if !b.conn.IsClosed() {
		return b.conn, nil
	}
	conn, err := dial(b.url)
	if err != nil {
		return nil, fmt.Errorf("broker: redial: %w", err)
	}
	b.conn, b.ch = conn, nil
	return conn, nil
}

func (b *broker) channel() (*amqp.Channel, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil && !b.ch.IsClosed() {
		return b.ch, nil
	}
	conn, err := b.connLocked()
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("broker: channel: %w", err)
	}
	b.ch = ch
	return ch, nil
}

// queueArgs are the arguments every bench queue is declared with, the same
// platformd declares its pool queue with (a mismatch would be a 406).
func (b *broker) queueArgs() amqp.Table {
	return amqp.Table{amqp.QueueTypeArg: b.queueType}
}

// declare (re)creates queue empty: deleted first so that no leftover of an
// earlier round stays in it.
func (b *broker) declare(queue string) error {
	ch, err := b.channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		return fmt.Errorf("broker: delete %s: %w", queue, err)
	}
	ch, err = b.channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, b.queueArgs()); err != nil {
		return fmt.Errorf("broker: declare %s: %w", queue, err)
	}
	return nil
}

// depth returns the ready messages and consumers of queue (passive
// declare: a cheap call, fine to make every few milliseconds).
func (b *broker) depth(queue string) (ready, consumers int, err error) {
	ch, err := b.channel()
	if err != nil {
		return 0, 0, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, b.queueArgs())
	if err != nil {
		return 0, 0, fmt.Errorf("broker: passive declare %s: %w", queue, err)
	}
	return q.Messages, q.Consumers, nil
}

// waitDepth waits until queue has want ready messages: a quorum queue
// counts a confirmed message at once, but be safe.
func (b *broker) waitDepth(ctx context.Context, queue string, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _, err := b.depth(queue)
		if err != nil {
			return err
		}
		if n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker: %s holds %d messages, want %d", queue, n, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// deleteQueues deletes queues, ignoring those that do not exist.
func (b *broker) deleteQueues(queues ...string) error {
	var first error
	for _, q := range queues {
		ch, err := b.channel()
		if err != nil {
			return err
		}
		if _, err := ch.QueueDelete(q, false, false, false); err != nil && first == nil {
			first = fmt.Errorf("broker: delete %s: %w", q, err)
		}
	}
	return first
}

func (b *broker) deleteExchange(name string) error {
	ch, err := b.channel()
	if err != nil {
		return err
	}
	return ch.ExchangeDelete(name, false, false)
}

func (b *broker) close() { _ = b.conn.Close() }
