package daemon

import (
	"context"

	"github.com/platformd/platformd/internal/failure"
)

// startRetrier starts the service's failure retry runner: it sends the
// server-side retries of the service's failure store (one runner per
// database is active across daemons) to the pools this daemon hosts.
func (s *service) startRetrier(ctx context.Context) error {
	r, err := failure.NewRunner(failure.RunnerConfig{
		Store: failure.NewStore(s.db), Broker: s.d.publish, QueueOf: s.queueOf, Logger: s.d.log, ControlFunc: s.control,
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
