package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
)

// drainOldRetryQueues moves what an older version left in the pool's own
// delay queues (broker.OldRetryQueue, for the pool's delays and the
// default ones) into the shared delay queues of the same delays, once, at
// start, and deletes each old queue once it is empty. A message is acked
// in the old queue only after its copy in the shared one is confirmed:
// nothing is lost, and a crash in between leaves it in both, its second
// run a duplicate the dedup step skips. A moved message waits its delay
// again from the start. Old queues that do not exist are the usual case.
func (p *Pool) drainOldRetryQueues(ctx context.Context) {
	delays := slices.Clone(p.cfg.RetryDelays)
	for _, d := range config.RetryDelaysDefault() {
		if !slices.Contains(delays, d) {
			delays = append(delays, d)
		}
	}
	pub := broker.NewPublisher(p.deps.Publish, drainChunk)
	defer pub.Close()
	total := 0
	for _, d := range delays {
		name := broker.OldRetryQueue(p.cfg.Queue, d)
		n, err := p.drainOldRetryQueue(ctx, pub, name, d)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				p.log.WarnContext(ctx, "workers: old delay queue not moved to the shared one", slog.String("queue", name),
					slog.String("delay_queue", broker.DelayQueue(d)), slog.Int("moved", n), slog.Any("error", err))
			}
			continue
		}
		if n > 0 {
			p.log.InfoContext(ctx, "workers: old delay queue moved to the shared one", slog.String("queue", name),
				slog.String("delay_queue", broker.DelayQueue(d)), slog.Int("moved", n))
		}
	}
	p.testSignals.OldRetryDrained.Signal(total)
}

// drainOldRetryQueue moves the messages of the old delay queue name (of
// delay d) to d's shared delay queue, routed by the pool's queue name, in
// confirmed chunks, then deletes it if it is empty. It works on channels
// of its own: a missing queue, like a 406, closes the channel it is asked
// on.
func (p *Pool) drainOldRetryQueue(ctx context.Context, pub *broker.Publisher, name string, d time.Duration) (int, error) {
	ch, err := p.deps.Consume.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil {
		if broker.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	shared := broker.Topology{QueueType: p.cfg.QueueType, RetryDelays: []time.Duration{d}}
	if err := shared.DeclareDelays(ctx, p.deps.Consume, p.log); err != nil {
		return 0, err
	}
	moved, err := moveQueue(ctx, ch, name, drainChunk, -1, func(ctx context.Context, ms []amqp.Delivery) error {
		out := make([]broker.Outgoing, len(ms))
		for i := range ms {
			out[i] = broker.Outgoing{Exchange: broker.DelayQueue(d), RoutingKey: p.cfg.Queue, Msg: broker.CopyOf(&ms[i])}
		}
		// A chunk that fails goes back whole: the copies that were
		// confirmed come back once more, as duplicates.
		pctx, cancel := context.WithTimeout(ctx, SettleTimeoutDefault)
		defer cancel()
		return errors.Join(pub.Publish(pctx, out)...)
	})
	if err != nil {
		return moved, err
	}
	return moved, p.deleteOldRetryQueue(ctx, ch, name, d)
}

// deleteOldRetryQueue deletes the old delay queue name once it is empty.
// A classic queue is deleted only if empty, by the broker; a quorum queue
// cannot be (if-empty on one closes the connection, 540), so it is checked
// empty and unused first, then deleted: a message an older daemon still
// running sends to it in between would be lost, and is logged.
func (p *Pool) deleteOldRetryQueue(ctx context.Context, ch *amqp.Channel, name string, d time.Duration) error {
	// The old queue's own arguments with the classic type are accepted
	// only by a classic queue: that tells its type without a management
	// API.
	_, err := ch.QueueDeclare(name, true, false, false, false, oldRetryArgs(amqp.QueueTypeClassic, p.cfg.Queue, d))
	if err == nil {
		if _, err := ch.QueueDelete(name, false, true, false); err != nil {
			return fmt.Errorf("delete %s if empty: %w", name, err)
		}
		return nil
	}
	qch, err := p.deps.Consume.Channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = qch.Close() }()
	q, err := qch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", name, err)
	}
	if q.Messages > 0 || q.Consumers > 0 {
		return fmt.Errorf("%s not deleted: %d messages, %d consumers", name, q.Messages, q.Consumers)
	}
	n, err := qch.QueueDelete(name, false, false, false)
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if n > 0 {
		p.log.ErrorContext(ctx, "workers: old delay queue received messages while being deleted; they are lost",
			slog.String("queue", name), slog.Int("messages", n))
	}
	return nil
}

// oldRetryArgs are the arguments an older version declared its delay
// queue of delay for queue with: a shared delay queue's, but
// dead-lettering to queue by name rather than by the message's routing key.
func oldRetryArgs(queueType, queue string, delay time.Duration) amqp.Table {
	args := broker.DelayQueueArgs(queueType, delay)
	args["x-dead-letter-routing-key"] = queue
	return args
}

// QueueDepths reads the depths of the named queues (the shared delay
// queues, for the admin API) on the pool's consuming connection, which
// never publishes and so is not blocked by a broker alarm. It is safe for
// concurrent use.
func (p *Pool) QueueDepths(ctx context.Context, names []string) []broker.QueueDepth {
	return broker.QueueDepths(ctx, p.deps.Consume, names)
}

// redeclareDelays declares the pool's shared delay queues again, after a
// retry copy found one missing (an operator deleted it while the pool ran).
func (p *Pool) redeclareDelays(ctx context.Context) {
	p.log.WarnContext(ctx, "workers: a retry delay queue is missing, declaring the pool's again", slog.Any("delays", p.cfg.RetryDelays))
	if err := p.cfg.Topology.DeclareDelays(ctx, p.deps.Consume, p.log); err != nil && ctx.Err() == nil {
		p.log.WarnContext(ctx, "workers: retry delay queues not declared", slog.Any("error", err))
	}
}
