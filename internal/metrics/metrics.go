// Package metrics defines platformd's Prometheus collectors in one place,
// so that their names and labels (a contract: docs/contracts.md, "Metrics
// and traces") are written once. The client library is prometheus/client_golang: exposition
// format, histograms and registry are not worth writing by hand.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Message outcomes (label "outcome" of MessagesTotal).
const (
	OutcomeProcessed = "processed"
	OutcomeDuplicate = "duplicate"
	OutcomeRetried   = "retried"
	OutcomeFailed    = "failed"
	OutcomeRejected  = "rejected"
)

// Reload results (label "result" of ConfigReloads).
const (
	ReloadApplied = "applied"
	ReloadInvalid = "invalid"
	ReloadRefused = "refused"
	ReloadFailed  = "failed"
)

// Duplicate sources (label "source" of DuplicatesTotal).
const (
	SourceRedelivery = "redelivery"
	SourceReplay     = "replay"
	SourceRepublish  = "republish"
)

// Metrics holds every collector. It is safe for concurrent use.
type Metrics struct {
	Registry *prometheus.Registry

	// MessagesTotal counts messages by final outcome for this delivery:
	// processed, duplicate, retried (sent to a delay queue), failed (sent to
	// the failure queue after a handler error), rejected (sent to the
	// failure queue without running: decode, no_handler, beyond_horizon).
	MessagesTotal *prometheus.CounterVec
	// DuplicatesTotal counts duplicates by where they came from.
	DuplicatesTotal *prometheus.CounterVec
	// FailuresTotal counts failures stored, by reason.
	FailuresTotal *prometheus.CounterVec
	// BatchDuration is the time from batch start to its outcome durable.
	BatchDuration *prometheus.HistogramVec
	// BatchSize is the number of deliveries per batch.
	BatchSize *prometheus.HistogramVec
	// HandlerDuration is the time one event's handlers took.
	HandlerDuration *prometheus.HistogramVec
	// PoolPaused is 1 while a pool is paused.
	PoolPaused *prometheus.GaugeVec
	// PoolInFlight is the deliveries a pool holds unacknowledged.
	PoolInFlight *prometheus.GaugeVec
	// Reconnects counts broker reconnections per pool.
	Reconnects *prometheus.CounterVec
	// BatchErrors counts batches whose outcome was unknown (requeued).
	BatchErrors *prometheus.CounterVec
	// TxConflicts counts batch transactions aborted by a deadlock (40P01)
	// or a serialization failure (40001), by SQLSTATE.
	TxConflicts *prometheus.CounterVec
	// BatchReplays counts failed batches replayed event by event.
	BatchReplays *prometheus.CounterVec
	// ConfigReloads counts config reloads by result (applied, invalid,
	// refused, failed).
	ConfigReloads *prometheus.CounterVec
	// ServiceUp is 1 while a service is up: migrated, running, and its
	// database answering.
	ServiceUp *prometheus.GaugeVec
	// BrokerConnected is 1 for the broker node each connection (label
	// connection: platformd-publish, platformd-<pool>) is on, 0 for a node
	// it was on and lost.
	BrokerConnected *prometheus.GaugeVec

	// PurgeRowsDeleted counts processed_event rows purged.
	PurgeRowsDeleted *prometheus.CounterVec
	// PurgeDuration is the duration of purge runs.
	PurgeDuration *prometheus.HistogramVec
	// PurgeChunkDuration is the duration of single purge chunks.
	PurgeChunkDuration *prometheus.HistogramVec
	// PurgeLastSuccess is the Unix time of the last successful purge.
	PurgeLastSuccess *prometheus.GaugeVec
	// ProcessedEventRows is the planner's estimate of processed_event rows.
	ProcessedEventRows *prometheus.GaugeVec

	// Outbox holds the outbox relay's collectors.
	Outbox OutboxMetrics
	// Remote holds the remote handlers' collectors.
	Remote RemoteMetrics
	// Failures holds the failure store's collectors.
	Failures FailureMetrics
	// Horizon holds the horizon advice's collectors.
	Horizon HorizonMetrics
	// Limits holds the live limits' collectors.
	Limits LimitsMetrics
}

// New creates the collectors on a fresh registry (with Go and process
// collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{r: r}
	sp := []string{"service", "pool"}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	m := &Metrics{
		Registry:           r,
		MessagesTotal:      f.counter("platformd_messages_total", "Messages handled, by outcome.", "service", "pool", "outcome"),
		DuplicatesTotal:    f.counter("platformd_duplicates_total", "Duplicate deliveries skipped, by source (redelivery, replay, republish).", "service", "pool", "source"),
		FailuresTotal:      f.counter("platformd_failures_total", "Failures stored (platform.failed_event), by reason.", "service", "pool", "reason"),
		BatchDuration:      f.histogram("platformd_batch_duration_seconds", "Time from batch start until its outcome is durable and acked.", latency, sp...),
		BatchSize:          f.histogram("platformd_batch_size", "Deliveries per batch.", []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000}, sp...),
		HandlerDuration:    f.histogram("platformd_handler_duration_seconds", "Time one event's handlers took.", latency, sp...),
		PoolPaused:         f.gauge("platformd_pool_paused", "1 while the pool is paused.", sp...),
		PoolInFlight:       f.gauge("platformd_pool_in_flight", "Deliveries held by the pool and not yet settled.", sp...),
		Reconnects:         f.counter("platformd_broker_reconnects_total", "Broker reconnections.", sp...),
		BatchErrors:        f.counter("platformd_batch_errors_total", "Batches whose outcome was not known durable; requeued whole.", sp...),
		TxConflicts:        f.counter("platformd_tx_conflicts_total", "Batch transactions aborted by a deadlock or a serialization failure, by SQLSTATE (retried at once).", "service", "pool", "sqlstate"),
		BatchReplays:       f.counter("platformd_batch_replays_total", "Failed batches replayed event by event, one savepoint each.", sp...),
		ConfigReloads:      f.counter("platformd_config_reloads_total", "Config reloads (SIGHUP or ReloadConfig), by result: applied, invalid, refused (needs a restart), failed.", "result"),
		ServiceUp:          f.gauge("platformd_service_up", "1 while the service is up: migrated, running, and its database answering.", "service"),
		BrokerConnected:    f.gauge("platformd_broker_connected", "1 for the broker node a connection is on, 0 for a node it lost.", "connection", "node"),
		PurgeRowsDeleted:   f.counter("platformd_purge_rows_deleted_total", "processed_event rows deleted by purges.", "service"),
		PurgeDuration:      f.histogram("platformd_purge_duration_seconds", "Duration of purge runs.", prometheus.ExponentialBuckets(0.01, 3, 12), "service"),
		PurgeChunkDuration: f.histogram("platformd_purge_chunk_duration_seconds", "Duration of single purge chunks.", latency, "service"),
		PurgeLastSuccess:   f.gauge("platformd_purge_last_success_timestamp_seconds", "Unix time of the last successful purge run.", "service"),
		ProcessedEventRows: f.gauge("platformd_processed_event_rows_estimate", "Planner estimate of processed_event rows.", "service"),
	}
	m.Outbox = newOutboxMetrics(f)
	m.Remote = newRemoteMetrics(f)
	m.Failures = newFailureMetrics(f)
	m.Horizon = newHorizonMetrics(f)
	m.Limits = newLimitsMetrics(f)
	return m
}

// factory makes collectors registered on r as they are made, so that no
// collector is declared and left out of the registry.
type factory struct{ r *prometheus.Registry }

// counter makes a CounterVec, registered.
func (f factory) counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(c)
	return c
}

// gauge makes a GaugeVec, registered.
func (f factory) gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(g)
	return g
}

// histogram makes a HistogramVec with buckets, registered.
func (f factory) histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.r.MustRegister(h)
	return h
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
