package metrics

import "github.com/prometheus/client_golang/prometheus"

// LimitsMetrics are the live limits' collectors (docs/operations.md, "Limits"; names
// and labels are relied on by alert rules and dashboards).
type LimitsMetrics struct {
	// PoolRateLimit is the pool's rate limit in force, in events per
	// second for the pool across every daemon (the same on each); 0: none.
	PoolRateLimit *prometheus.GaugeVec
	// PoolThrottled counts the seconds the pool's workers waited for
	// tokens of its rate limit (summed over its workers).
	PoolThrottled *prometheus.CounterVec
	// QueueReady is the ready messages of the pool's queue, as the broker
	// answers a passive declare, refreshed by each daemon running the
	// pool every QueueDepthRefreshDefault (internal/daemon); it lets an
	// alert tell a throttled pool whose backlog grows from one keeping up.
	QueueReady *prometheus.GaugeVec
	// RemoteLimit is a remote handler's limit on calls at once in this
	// daemon (max_in_flight, or the adaptive limit now); absent: none.
	RemoteLimit *prometheus.GaugeVec
}

func newLimitsMetrics(f factory) LimitsMetrics {
	return LimitsMetrics{
		PoolRateLimit: f.gauge("platformd_pool_rate_limit", "The pool's rate limit in force, events per second across every daemon running it; 0: none.", "service", "pool"),
		PoolThrottled: f.counter("platformd_pool_throttled_seconds_total", "Seconds the pool's workers waited on its rate limit, summed over workers.", "service", "pool"),
		QueueReady:    f.gauge("platformd_queue_messages_ready", "Ready messages of the pool's queue, as the broker reports them on a passive declare (by default refreshed every 15 s).", "service", "pool"),
		RemoteLimit:   f.gauge("platformd_remote_handler_limit", "Calls to the remote handler allowed at once in this daemon (max_in_flight, or the adaptive limit now).", "service", "handler"),
	}
}
