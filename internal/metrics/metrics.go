// Package metrics defines platformd's Prometheus collectors in one place,
// so that their names and labels (a contract: DESIGN.md, "Metrics") are
// written once. The client library is prometheus/client_golang: exposition
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
	// FailuresTotal counts messages sent to the failure queue by reason.
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
}

// New creates the collectors on a fresh registry (with Go and process
// collectors).
func New() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sp := []string{"service", "pool"}
	latency := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	m := &Metrics{
		Registry: r,
		MessagesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_messages_total", Help: "Messages handled, by outcome.",
		}, []string{"service", "pool", "outcome"}),
		DuplicatesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_duplicates_total", Help: "Duplicate deliveries skipped, by source (redelivery, replay, republish).",
		}, []string{"service", "pool", "source"}),
		FailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_failures_total", Help: "Messages sent to the failure queue, by reason.",
		}, []string{"service", "pool", "reason"}),
		BatchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "platformd_batch_duration_seconds", Help: "Time from batch start until its outcome is durable and acked.", Buckets: latency,
		}, sp),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "platformd_batch_size", Help: "Deliveries per batch.", Buckets: []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000},
		}, sp),
		HandlerDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "platformd_handler_duration_seconds", Help: "Time one event's handlers took.", Buckets: latency,
		}, sp),
		PoolPaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_pool_paused", Help: "1 while the pool is paused.",
		}, sp),
		PoolInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_pool_in_flight", Help: "Deliveries held by the pool and not yet settled.",
		}, sp),
		Reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_broker_reconnects_total", Help: "Broker reconnections.",
		}, sp),
		BatchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_batch_errors_total", Help: "Batches whose outcome was not known durable; requeued whole.",
		}, sp),
		TxConflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_tx_conflicts_total", Help: "Batch transactions aborted by a deadlock or a serialization failure, by SQLSTATE (retried at once).",
		}, []string{"service", "pool", "sqlstate"}),
		BatchReplays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_batch_replays_total", Help: "Failed batches replayed event by event, one savepoint each.",
		}, sp),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_config_reloads_total", Help: "Config reloads (SIGHUP or ReloadConfig), by result: applied, invalid, refused (needs a restart), failed.",
		}, []string{"result"}),
		ServiceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_service_up", Help: "1 while the service is up: migrated, running, and its database answering.",
		}, []string{"service"}),
		BrokerConnected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_broker_connected", Help: "1 for the broker node a connection is on, 0 for a node it lost.",
		}, []string{"connection", "node"}),
		PurgeRowsDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platformd_purge_rows_deleted_total", Help: "processed_event rows deleted by purges.",
		}, []string{"service"}),
		PurgeDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "platformd_purge_duration_seconds", Help: "Duration of purge runs.", Buckets: prometheus.ExponentialBuckets(0.01, 3, 12),
		}, []string{"service"}),
		PurgeChunkDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "platformd_purge_chunk_duration_seconds", Help: "Duration of single purge chunks.", Buckets: latency,
		}, []string{"service"}),
		PurgeLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_purge_last_success_timestamp_seconds", Help: "Unix time of the last successful purge run.",
		}, []string{"service"}),
		ProcessedEventRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "platformd_processed_event_rows_estimate", Help: "Planner estimate of processed_event rows.",
		}, []string{"service"}),
	}
	m.Outbox = newOutboxMetrics(r)
	m.Remote = newRemoteMetrics(r)
	r.MustRegister(m.MessagesTotal, m.DuplicatesTotal, m.FailuresTotal, m.BatchDuration, m.BatchSize,
		m.HandlerDuration, m.PoolPaused, m.PoolInFlight, m.Reconnects, m.BatchErrors, m.TxConflicts, m.BatchReplays, m.ConfigReloads, m.ServiceUp, m.BrokerConnected,
		m.PurgeRowsDeleted, m.PurgeDuration, m.PurgeChunkDuration, m.PurgeLastSuccess, m.ProcessedEventRows)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}
