package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// FailedCount is the number of stored failures of one pool, reason and
// state (package failure's Count, copied here so that metrics imports no
// failure store).
type FailedCount struct {
	Pool, Reason, State string
	N                   int64
}

// FailureMetrics are the failure store's collectors.
type FailureMetrics struct {
	// FailedEvents is platformd_failed_events{service,pool,reason,state}:
	// the rows of each service's platform.failed_event, as last counted.
	FailedEvents *prometheus.GaugeVec

	mu *sync.Mutex // serializes SetFailedEvents' delete-then-set
}

func newFailureMetrics(f factory) FailureMetrics {
	return FailureMetrics{
		FailedEvents: f.gauge("platformd_failed_events", "Stored failures (platform.failed_event rows), by pool, reason and state.",
			"service", "pool", "reason", "state"),
		mu: &sync.Mutex{},
	}
}

// SetFailedEvents replaces service's series of FailedEvents with counts:
// a group counted before and absent from counts goes absent, not 0. Safe
// for concurrent use (two calls for one service apply one after the
// other).
func (m FailureMetrics) SetFailedEvents(service string, counts []FailedCount) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.FailedEvents.DeletePartialMatch(prometheus.Labels{"service": service})
	for _, c := range counts {
		m.FailedEvents.WithLabelValues(service, c.Pool, c.Reason, c.State).Set(float64(c.N))
	}
}
