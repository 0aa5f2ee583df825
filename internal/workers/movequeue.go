package workers

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// moveQueue moves the messages of queue name elsewhere, chunk by chunk,
// on ch: up to chunk messages are taken unacked (basic.get) and handed to
// move, then acked together once move returned nil, so that a crash in
// between leaves them in the queue to be moved again (each mover makes a
// second move harmless). If move fails, the chunk goes back to the queue
// and its error is returned. At most limit messages are taken (< 0: until
// the queue is empty), so that a queue others keep filling does not hold
// the mover for ever. It returns how many were moved.
func moveQueue(ctx context.Context, ch *amqp.Channel, name string, chunk, limit int, move func(context.Context, []amqp.Delivery) error) (int, error) {
	moved := 0
	for ctx.Err() == nil && limit != 0 {
		batch := make([]amqp.Delivery, 0, chunk)
		for len(batch) < chunk && limit != 0 {
			m, ok, err := ch.Get(name, false)
			if err != nil {
				return moved, fmt.Errorf("get from %s: %w", name, err)
			}
			if !ok {
				// Empty ends the chunk, not the move: the next round
				// asks again after the chunk's ack, so that the get
				// that finds the queue empty follows every ack (a
				// quorum queue counts unacked gets among its consumers
				// until their ack is in, and the caller may delete it
				// next).
				break
			}
			batch = append(batch, m)
			limit--
		}
		if len(batch) == 0 {
			break
		}
		last := batch[len(batch)-1].DeliveryTag
		if err := move(ctx, batch); err != nil {
			_ = ch.Nack(last, true, true)
			return moved, err
		}
		if err := ch.Ack(last, true); err != nil {
			return moved, fmt.Errorf("ack moved messages of %s: %w", name, err)
		}
		moved += len(batch)
	}
	return moved, ctx.Err()
}
