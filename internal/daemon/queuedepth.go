package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/startstop"
)

// QueueDepthRefreshDefault is how often each daemon reads the ready count
// of the queues of the pools it runs (platformd_queue_messages_ready): a
// passive declare per queue, all on one throwaway channel per service and
// refresh. Alerts look at the gauge over minutes, so 15 s is plenty.
const QueueDepthRefreshDefault = 15 * time.Second

// queueDepthTimeout bounds one refresh (opening its channel included): a
// broker that does not answer leaves the gauges as they were.
const queueDepthTimeout = 5 * time.Second

// watchQueueDepths refreshes the queue depth gauge of the service's pools
// every Options.queueDepthEvery (default QueueDepthRefreshDefault) until
// ctx ends, then removes the gauges it set: a daemon that no longer runs a
// pool reports nothing for it. It reads on a channel of its own, never on a
// consumer's, so the consume path never waits for it.
func (s *service) watchQueueDepths(ctx context.Context) {
	shown := map[string]bool{}
	defer func() {
		for pool := range shown {
			s.d.metrics.Limits.QueueReady.DeleteLabelValues(s.name, pool)
		}
	}()
	every := s.d.opts.queueDepthEvery
	if every <= 0 {
		every = QueueDepthRefreshDefault
	}
	startstop.Tick(ctx, every, func(ctx context.Context) {
		if s.up.Load() {
			s.refreshQueueDepths(ctx, shown)
		}
	})
}

// refreshQueueDepths reads the ready count of every pool's queue and sets
// the gauges; shown holds the pools with a gauge, and loses those gone
// since (a reload removed them).
func (s *service) refreshQueueDepths(ctx context.Context, shown map[string]bool) {
	pools := s.workerPools()
	running := make(map[string]bool, len(pools))
	for _, p := range pools {
		running[p.Name()] = true
	}
	for pool := range shown {
		if !running[pool] {
			s.d.metrics.Limits.QueueReady.DeleteLabelValues(s.name, pool)
			delete(shown, pool)
		}
	}
	if len(pools) == 0 {
		return
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Config().Queue
	}
	ctx, cancel := context.WithTimeout(ctx, queueDepthTimeout)
	defer cancel()
	// One pool's consuming connection serves them all: a channel of its
	// own, opened and closed by this read.
	depths := pools[0].QueueDepths(ctx, names)
	for i, p := range pools {
		switch err := depths[i].Err; {
		case err == nil:
			s.d.metrics.Limits.QueueReady.WithLabelValues(s.name, p.Name()).Set(float64(depths[i].Messages))
			shown[p.Name()] = true
		case errors.Is(err, broker.ErrQueueNotFound):
			// Not declared yet (the pool declares it as it connects).
			s.d.log.DebugContext(ctx, "daemon: queue depth: queue not found", slog.String("service", s.name), slog.String("pool", p.Name()), slog.String("queue", names[i]))
		case ctx.Err() == nil:
			s.d.log.DebugContext(ctx, "daemon: queue depth not read", slog.String("service", s.name), slog.String("pool", p.Name()), slog.Any("error", err))
		}
	}
}
