package daemon

import (
	"context"
	"slices"
	"time"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/workers"
)

// startRetrier starts the service's failure retry runner: it sends the
// server-side retries of the service's failure store (one runner per
// database is active across daemons) to the pools this daemon hosts.
func (s *service) startRetrier(ctx context.Context) error {
	yielded := s.d.metrics.Failures.RetryYieldSeconds.WithLabelValues(s.name)
	r, err := failure.NewRunner(failure.RunnerConfig{
		Store: failure.NewStore(s.db), Broker: s.d.publish, QueueOf: s.queueOf, Logger: s.d.log, ControlFunc: s.control,
		Backlog: s.backlogBesides, Yielded: func(d time.Duration) { yielded.Add(d.Seconds()) },
	})
	if err != nil {
		return err
	}
	return startKept(ctx, s, &s.retrier, r)
}

// queueOf returns the queue of the service's pool named pool, if this
// daemon hosts it now.
func (s *service) queueOf(pool string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, sp := range s.pools {
		if sp.cfg.Name == pool {
			return sp.cfg.Queue, true
		}
	}
	return "", false
}

// retryRunner returns the service's failure retry runner, nil until it
// runs.
func (s *service) retryRunner() *failure.Runner {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.retrier
}

// wakeRetrier tells the service's retry runner that a retry was stored, so
// that it starts sending now rather than at its next poll (not for a dry
// run, which stores nothing).
func (s *service) wakeRetrier(dryRun bool) {
	if r := s.retryRunner(); r != nil && !dryRun {
		r.Wake()
	}
}

// backlogTimeout bounds one look at the queues for a backlog: a broker
// slow to answer counts as no backlog, so the retry keeps its rate.
const backlogTimeout = 2 * time.Second

// backlogBesides names a pool of the daemon, any service's, with messages
// ready in its queue although it consumes at full speed (a backlog it
// cannot keep up with), leaving out this service's pools in targets;
// "" when none has. A retry gives way to it: the daemon's cores serve live
// traffic first. One passive declare per such pool, on a channel of its
// own on the publishing connection, never a consumer's; a queue not read
// counts as none.
func (s *service) backlogBesides(ctx context.Context, targets []string) string {
	type candidate struct {
		service string
		pool    *workers.Pool
	}
	var cands []candidate
	for _, other := range s.d.serviceList() {
		for _, p := range other.workerPools() {
			// A pool that is not working has no backlog it works
			// through: no broker round trip for it (most pools of a
			// daemon of many tenants are idle at any moment).
			if (other == s && slices.Contains(targets, p.Name())) || !p.AtFullSpeed() || !p.Working() {
				continue
			}
			cands = append(cands, candidate{other.name, p})
		}
	}
	if len(cands) == 0 {
		return ""
	}
	names := make([]string, len(cands))
	for i, c := range cands {
		names[i] = c.pool.Config().Queue
	}
	ctx, cancel := context.WithTimeout(ctx, backlogTimeout)
	defer cancel()
	// On the publishing connection: a consuming one busy delivering a
	// backlog answers late, which would hide that very backlog.
	for i, d := range broker.QueueDepths(ctx, s.d.publish, names) {
		if d.Err == nil && d.Messages > 0 {
			return cands[i].service + "/" + cands[i].pool.Name()
		}
	}
	return ""
}
