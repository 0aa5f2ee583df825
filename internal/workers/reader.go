package workers

import (
	"context"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// reader is a partitioned pool's one consumer (Config.PartitionKey):
// it reads the queue on one channel, in queue order, and hands each
// delivery to the worker that owns its key (a hash of the value at the
// key's pointer, modulo the pool's concurrency), so that within a daemon
// no two transactions of the pool touch the same entity at once and a
// key's events are applied in delivery order. A delivery whose payload
// has no value at the pointer (or does not decode) goes to the workers in
// turn. The workers settle through the channel's tracker.
type reader struct {
	pool    *Pool
	workers []*worker
	ids     []int
	key     *partitionKey
	turn    int // next worker of a keyless delivery
	log     *slog.Logger
}

func newReader(p *Pool, workers []*worker) *reader {
	r := &reader{pool: p, workers: workers, key: newPartitionKey(p.cfg.PartitionKey), log: p.log.With(slog.String("consumer", "reader"))}
	for _, w := range workers {
		r.ids = append(r.ids, w.id)
	}
	return r
}

// run keeps the reader's consumer channel alive until fetchCtx ends.
func (r *reader) run(fetchCtx, workCtx context.Context) {
	defer func() {
		for _, w := range r.workers {
			w.pub.Close()
		}
	}()
	defer r.pool.setIdle(r.ids, true)
	r.pool.keepChannel(fetchCtx, r.log, func() error {
		return r.pool.runChannel(fetchCtx, "reader", r.pool.cfg.Prefetch, r.ids, func(ch *amqp.Channel) consumeFunc {
			trk := newTracker(ch, len(r.workers))
			return func(tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
				return r.consume(fetchCtx, workCtx, ch, trk, tag, deliveries, changed)
			}
		})
	})
}

// owner returns the index of the worker that owns d's key.
func (r *reader) owner(d *amqp.Delivery) int {
	if h, ok := r.key.hash(d.Body); ok {
		return int(h % uint64(len(r.workers)))
	}
	r.turn = (r.turn + 1) % len(r.workers)
	return r.turn
}

// consume hands deliveries to the workers until the pool is paused,
// fetchCtx ends or the channel dies. On a pause or a stop it cancels the
// consumer and hands on what the broker had already sent; it returns once
// every worker has settled what it was given.
func (r *reader) consume(fetchCtx, workCtx context.Context, ch *amqp.Channel, trk *tracker, tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd {
	ins := make([]chan amqp.Delivery, len(r.workers))
	var wg sync.WaitGroup
	for i, w := range r.workers {
		ins[i] = make(chan amqp.Delivery, w.prefetch)
		st := w.newSettler(trk.view(i))
		wg.Go(func() { w.serve(workCtx, fetchCtx, st, ins[i]) })
	}
	defer wg.Wait()
	defer func() {
		for _, in := range ins {
			close(in)
		}
	}()
	end := endChannelGone
	stop := fetchCtx.Done()
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				// After a cancel, the library closes deliveries once the
				// broker's last one is read; otherwise the channel died.
				if trk.dead() {
					return endChannelGone
				}
				return end
			}
			i := r.owner(&d)
			trk.dispatched(i, d.DeliveryTag)
			ins[i] <- d
		case <-changed:
			var paused bool
			paused, changed = r.pool.pauseState()
			if paused {
				changed, stop, end = nil, nil, endPaused
				if ch.Cancel(tag, false) != nil {
					end = endChannelGone
				}
			}
		case <-stop:
			changed, stop, end = nil, nil, endStopping
			if ch.Cancel(tag, false) != nil {
				end = endChannelGone
			}
		}
	}
}
