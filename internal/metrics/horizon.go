package metrics

import "github.com/prometheus/client_golang/prometheus"

// DuplicateAgeBuckets are the buckets, in seconds, of
// HorizonMetrics.DuplicateAge: 1 s to 90 days, where a redelivery (seconds),
// a relay's republish (minutes) and a replay (days) each land apart.
var DuplicateAgeBuckets = []float64{
	1, 5, 15, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 12 * 3600,
	86400, 2 * 86400, 3 * 86400, 7 * 86400, 14 * 86400, 21 * 86400, 30 * 86400, 45 * 86400, 60 * 86400, 90 * 86400,
}

// HorizonMetrics are the collectors of horizon advice (docs/operations.md,
// "Tuning a horizon"): how old the duplicates a service skips are, beside
// the horizon in force.
type HorizonMetrics struct {
	// DuplicateAge is the age of every duplicate skipped (the time of the
	// skip minus the time of its event's UUID v7 id, or its occurred_at),
	// by source: platformd_duplicate_age_seconds{service,pool,source}.
	DuplicateAge *prometheus.HistogramVec
	// DuplicateAgeMax is the oldest duplicate age a pool of this daemon
	// skipped since it started, by source.
	DuplicateAgeMax *prometheus.GaugeVec
	// Horizon is the replay horizon in force for a service, in seconds.
	Horizon *prometheus.GaugeVec
}

func newHorizonMetrics(f factory) HorizonMetrics {
	return HorizonMetrics{
		DuplicateAge: f.histogram("platformd_duplicate_age_seconds",
			"Age of the duplicates skipped (skip time minus the event's UUID v7 time or occurred_at), by source (redelivery, republish, replay).",
			DuplicateAgeBuckets, "service", "pool", "source"),
		DuplicateAgeMax: f.gauge("platformd_duplicate_age_max_seconds",
			"Oldest duplicate age a pool of this daemon skipped since the daemon started, by source.", "service", "pool", "source"),
		Horizon: f.gauge("platformd_horizon_seconds", "Replay horizon in force for the service, in seconds.", "service"),
	}
}
