package metrics

import "github.com/prometheus/client_golang/prometheus"

// Reasons an outbox row is held back (label "reason" of
// OutboxMetrics.Held).
const (
	// HeldReturned: the broker returned the message (no queue bound).
	HeldReturned = "returned"
	// HeldInvalid: the row cannot be encoded as the contract's envelope.
	HeldInvalid = "invalid"
)

// Outcomes of an unroutable outbox row (label "outcome" of
// OutboxMetrics.Unroutable).
const (
	// UnroutableKept: the broker keeps the event in the exchange's
	// unroutable queue (outbox.unroutable: hold).
	UnroutableKept = "kept"
	// UnroutableDropped: the row was deleted as the broker dropped its
	// message (outbox.unroutable: drop).
	UnroutableDropped = "dropped"
)

// OutboxMetrics are the outbox relay's collectors (the first three are
// the documented contract's).
type OutboxMetrics struct {
	// Published counts outbox rows whose message the broker confirmed.
	Published *prometheus.CounterVec
	// Pending is the number of rows in the service's platform.outbox.
	Pending *prometheus.GaugeVec
	// Oldest is the age in seconds of the oldest row of platform.outbox
	// (0 when it is empty).
	Oldest *prometheus.GaugeVec
	// Held counts the times a row was held back for a later retry, by
	// reason.
	Held *prometheus.CounterVec
	// Unroutable counts the rows whose message no queue was bound for and
	// that left the outbox: kept by the broker in the unroutable queue, or
	// dropped; by outcome. They count in Published too.
	Unroutable *prometheus.CounterVec
	// Active is 1 on the daemon whose relay holds the service's relay lock.
	Active *prometheus.GaugeVec
	// ReplayPublished counts the copies a replay published and the broker
	// confirmed, by producer service and replay id.
	ReplayPublished *prometheus.CounterVec
}

func newOutboxMetrics(f factory) OutboxMetrics {
	svc := []string{"service"}
	m := OutboxMetrics{
		Published: f.counter("platformd_outbox_published_total", "Outbox rows published and confirmed by the broker.", svc...),
		Pending:   f.gauge("platformd_outbox_pending", "Rows waiting in the service's platform.outbox.", svc...),
		Oldest:    f.gauge("platformd_outbox_oldest_seconds", "Age of the oldest row of the service's platform.outbox (0 when empty).", svc...),
		Held:      f.counter("platformd_outbox_held_total", "Outbox rows held back for a later retry, by reason (returned, invalid).", "service", "reason"),
		Unroutable: f.counter("platformd_outbox_unroutable_total",
			"Outbox rows no queue was bound for that left the outbox, by outcome (kept: in the exchange's unroutable queue; dropped).", "service", "outcome"),
		Active: f.gauge("platformd_outbox_relay_active", "1 on the daemon whose relay is the service's active one.", svc...),
	}
	m.ReplayPublished = f.counter("platformd_replay_published_total", "Copies a replay published and the broker confirmed, by producer service and replay.", "service", "replay")
	return m
}
