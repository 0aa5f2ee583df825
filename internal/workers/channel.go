package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/startstop"
)

// channelEnd is why one consumer of a channel run ended. A channel run is
// one consumer channel's life, from its opening to its death or a stop:
// not a database session (package session is the control session).
type channelEnd uint8

const (
	endPaused      channelEnd = iota + 1 // the pool was paused: consume again on resume
	endStopping                          // fetchCtx ended
	endChannelGone                       // the channel died or the broker cancelled the consumer
)

// consumeFunc runs one consumer, tagged tag, over its deliveries until the
// pool's pause state changes to paused (changed is closed on any change),
// fetchCtx ends or the channel dies, and says which.
type consumeFunc func(tag string, deliveries <-chan amqp.Delivery, changed <-chan struct{}) channelEnd

// keepChannel runs run (a channel run) again and again, with backoff and
// jitter after a failure, until fetchCtx ends: amqp091-go does not
// reconnect by itself, and every run gets a fresh channel.
func (p *Pool) keepChannel(fetchCtx context.Context, log *slog.Logger, run func() error) {
	var backoff startstop.Backoff
	for fetchCtx.Err() == nil {
		start := time.Now()
		err := run()
		if fetchCtx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			backoff.Reset()
		}
		wait := backoff.Next()
		// The message keeps its older words: a test of the delays reads
		// them.
		log.WarnContext(fetchCtx, "workers: consumer session ended, restarting", slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(fetchCtx, wait) {
			return
		}
	}
}

// runChannel opens a fresh channel, declares the topology, sets prefetch and
// consumes through the consumeFunc that start returns for the channel,
// again after each pause, until the channel dies or fetchCtx ends. workers
// returns the ids of the workers the channel serves, for the pause
// bookkeeping (a partitioned pool's reader changes them within a consume,
// and counts the change itself); name tells the channel's consumer tags
// apart.
func (p *Pool) runChannel(fetchCtx context.Context, name string, prefetch int, workers func() []int, start func(ch *amqp.Channel) consumeFunc) error {
	ch, err := p.deps.Consume.Channel(fetchCtx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := p.cfg.Topology.Declare(ch); err != nil {
		return err
	}
	if err := p.cfg.Topology.DeclareDelays(fetchCtx, p.deps.Consume, p.log); err != nil {
		return err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	p.testSignals.Connected.Signal(p.connected.Add(int64(len(workers()))))
	defer func() { p.connected.Add(-int64(len(workers()))) }()
	p.markUpWhenServing()
	// Without a channel a worker applies nothing: whatever its consumer had
	// been sent goes back to the queue with the channel.
	defer func() { p.setIdle(workers(), true) }()
	consume := start(ch)
	for n := 1; ; n++ {
		paused, changed := p.pauseState()
		if paused {
			p.setIdle(workers(), true)
			select {
			case <-changed:
				continue
			case <-fetchCtx.Done():
				return nil
			case e := <-closed:
				return fmt.Errorf("channel closed while paused: %w", amqpErr(e))
			}
		}
		p.setIdle(workers(), false)
		tag := fmt.Sprintf("platformd.%s.%s.%d.%d", p.cfg.Name, name, time.Now().UnixNano(), n)
		deliveries, err := ch.Consume(p.cfg.Queue, tag, false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consume %s: %w", p.cfg.Queue, err)
		}
		p.testSignals.ConsumerStarted.Signal(tag)
		switch consume(tag, deliveries, changed) {
		case endPaused:
			continue
		case endStopping:
			return nil
		case endChannelGone:
			select {
			case e := <-closed:
				return fmt.Errorf("channel closed: %w", amqpErr(e))
			default:
				return errors.New("consumer cancelled by the broker")
			}
		}
	}
}

func amqpErr(e *amqp.Error) error {
	if e == nil {
		return errors.New("closed")
	}
	return e
}
