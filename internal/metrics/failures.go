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
	// RetryYieldSeconds is platformd_failure_retry_yield_seconds_total{service}:
	// the time the service's retries spent at a share of their rate,
	// giving way to another pool's backlog.
	RetryYieldSeconds *prometheus.CounterVec

	mu *sync.Mutex // serializes SetFailedEvents' delete-then-set
}

func newFailureMetrics(f factory) FailureMetrics {
	return FailureMetrics{
		FailedEvents: f.gauge("platformd_failed_events", "Stored failures (platform.failed_event rows), by pool, reason and state.",
			"service", "pool", "reason", "state"),
		RetryYieldSeconds: f.counter("platformd_failure_retry_yield_seconds_total",
			"Time the service's failure retries sent at a share of their rate, giving way to a backlog of another pool.", "service"),
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
