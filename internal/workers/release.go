package workers

import (
	"context"
	"errors"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/startstop"
)

// releaseBatch is the most parked events one release sends.
const releaseBatch = 500

// releaseParked sends an ordered pool's parked events back to its queue
// once their key's head is resolved or discarded, in their arrival order,
// every releaseEvery until ctx ends. The copies carry x-failure-id, so the
// transaction that applies each resolves its row; the workers let a
// copy run only when no earlier failure of its key is open.
func (p *Pool) releaseParked(ctx context.Context) {
	pub := broker.NewPublisher(p.deps.Publish, releaseBatch)
	defer pub.Close()
	send := func(ctx context.Context, copies []failure.Copy) error {
		out := make([]broker.Outgoing, len(copies))
		for i := range copies {
			msg, err := copies[i].Publishing()
			if err != nil {
				return err
			}
			out[i] = broker.Outgoing{RoutingKey: p.cfg.Queue, Msg: msg}
		}
		pctx, cancel := context.WithTimeout(ctx, SettleTimeoutDefault)
		defer cancel()
		return errors.Join(pub.Publish(pctx, out)...)
	}
	startstop.Tick(ctx, releaseEvery, func(ctx context.Context) {
		for ctx.Err() == nil {
			n, err := p.deps.Failures.ReleaseParked(ctx, p.cfg.Name, releaseBatch, send)
			if err != nil {
				if ctx.Err() == nil {
					p.log.WarnContext(ctx, "workers: parked events not released, trying again", slog.Any("error", err))
				}
				return
			}
			if n > 0 {
				p.log.InfoContext(ctx, "workers: parked events released", slog.Int("events", n))
				p.testSignals.Released.Signal(n)
			}
			if n < releaseBatch {
				return
			}
		}
	})
}

// drainFailedQueue moves what an older version left in the pool's
// <queue>.failed into the failure store, once, at start: each message is
// stored (its x-* headers as the row's fields) before it is acked, so a
// crash in between leaves it in the queue, and its second move counts as a
// copy of the same row. A queue that does not exist is the usual case.
func (p *Pool) drainFailedQueue(ctx context.Context) {
	n, err := p.drain(ctx)
	if err != nil && ctx.Err() == nil {
		p.log.WarnContext(ctx, "workers: old failure queue not moved to the failure store", slog.String("queue", broker.FailedQueue(p.cfg.Queue)),
			slog.Int("moved", n), slog.Any("error", err))
		return
	}
	if n > 0 {
		p.log.InfoContext(ctx, "workers: old failure queue moved to the failure store", slog.String("queue", broker.FailedQueue(p.cfg.Queue)), slog.Int("moved", n))
	}
}

// drainChunk is how many messages of an old failure queue one store
// transaction takes.
const drainChunk = 200

func (p *Pool) drain(ctx context.Context) (int, error) {
	ch, err := p.deps.Consume.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	name := broker.FailedQueue(p.cfg.Queue)
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		if broker.IsNotFound(err) {
			return 0, nil
		}
		return 0, err
	}
	return moveQueue(ctx, ch, name, drainChunk, q.Messages, func(ctx context.Context, ms []amqp.Delivery) error {
		entries := make([]failure.Entry, len(ms))
		for i := range ms {
			entries[i] = p.oldFailure(&ms[i])
		}
		_, err := p.deps.Failures.Write(ctx, entries)
		return err
	})
}

// oldFailure is the row of a message of an old failure queue.
func (p *Pool) oldFailure(d *amqp.Delivery) failure.Entry {
	e := failure.Entry{
		Pool: p.cfg.Name, RoutingKey: broker.OriginalRoutingKey(d), Headers: d.Headers, Body: d.Body,
		State: failure.StateFailed, Attempt: broker.AttemptOf(d.Headers),
	}
	id, name := peek(d.Body)
	e.EventName = name
	e.Reason, _ = d.Headers[broker.HeaderFailureReason].(string)
	if e.Reason == "" {
		e.Reason = broker.ReasonPermanent
	}
	e.Error, _ = d.Headers[broker.HeaderError].(string)
	if id.Version() != 0 {
		e.EventID = id
	}
	if p.cfg.PartitionKey != "" {
		e.SequenceKey, _ = newPartitionKey(p.cfg.PartitionKey).text(d.Body)
	}
	return e
}
