package workers

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/testsignal"
)

// poolMetrics are a pool's collectors with their labels bound once, so the
// hot path does no label lookups.
type poolMetrics struct {
	processed, duplicate, retried, failed, rejected prometheus.Counter
	dupRedelivery, dupReplay, dupRepublish          prometheus.Counter
	failures                                        *prometheus.CounterVec
	batchDuration, batchSize, handlerDuration       prometheus.Observer
	paused, inFlight                                prometheus.Gauge
	batchErrors, reconnects                         prometheus.Counter
	// dupAge and dupAgeMax are the duplicate age histogram and max gauge
	// of each source (sourceIndex).
	dupAge    [3]prometheus.Observer
	dupAgeMax [3]prometheus.Gauge
}

func newPoolMetrics(m *metrics.Metrics, service, pool string) poolMetrics {
	out := func(o string) prometheus.Counter { return m.MessagesTotal.WithLabelValues(service, pool, o) }
	dup := func(s string) prometheus.Counter { return m.DuplicatesTotal.WithLabelValues(service, pool, s) }
	return poolMetrics{
		processed: out(metrics.OutcomeProcessed), duplicate: out(metrics.OutcomeDuplicate),
		retried: out(metrics.OutcomeRetried), failed: out(metrics.OutcomeFailed), rejected: out(metrics.OutcomeRejected),
		dupRedelivery: dup(metrics.SourceRedelivery), dupReplay: dup(metrics.SourceReplay), dupRepublish: dup(metrics.SourceRepublish),
		failures:        m.FailuresTotal.MustCurryWith(prometheus.Labels{"service": service, "pool": pool}),
		batchDuration:   m.BatchDuration.WithLabelValues(service, pool),
		batchSize:       m.BatchSize.WithLabelValues(service, pool),
		handlerDuration: m.HandlerDuration.WithLabelValues(service, pool),
		paused:          m.PoolPaused.WithLabelValues(service, pool),
		inFlight:        m.PoolInFlight.WithLabelValues(service, pool),
		batchErrors:     m.BatchErrors.WithLabelValues(service, pool),
		reconnects:      m.Reconnects.WithLabelValues(service, pool),
		dupAge: [3]prometheus.Observer{
			m.Horizon.DuplicateAge.WithLabelValues(service, pool, metrics.SourceRedelivery),
			m.Horizon.DuplicateAge.WithLabelValues(service, pool, metrics.SourceReplay),
			m.Horizon.DuplicateAge.WithLabelValues(service, pool, metrics.SourceRepublish),
		},
		dupAgeMax: [3]prometheus.Gauge{
			m.Horizon.DuplicateAgeMax.WithLabelValues(service, pool, metrics.SourceRedelivery),
			m.Horizon.DuplicateAgeMax.WithLabelValues(service, pool, metrics.SourceReplay),
			m.Horizon.DuplicateAgeMax.WithLabelValues(service, pool, metrics.SourceRepublish),
		},
	}
}

// counters are a pool's outcome counts: the atomics Info reads and the
// Prometheus collectors, moved together once a delivery is settled (its
// ack sent). Safe for concurrent use by the pool's workers.
type counters struct {
	processed, duplicates, retried, failed atomic.Uint64
	dupRedelivery, dupReplay, dupRepublish atomic.Uint64
	m                                      poolMetrics
	// ages accumulates the duplicates' ages until the pool's flusher
	// writes them (nil in the settler's unit tests); agesNoted wakes the
	// flusher (buffered, one slot).
	ages      *state.DuplicateAges
	agesNoted chan struct{}
	// ageMax is the oldest age of each source (sourceIndex) seen, in
	// nanoseconds, behind dupAgeMax.
	ageMax [3]atomic.Int64
	// settled, the pool's BatchSettled test signal (nil in the settler's
	// unit tests), fires after every change of the counts above.
	settled *testsignal.Signal[int]
}

// signalSettled fires the BatchSettled test signal with n deliveries.
func (c *counters) signalSettled(n int) {
	if c.settled != nil {
		c.settled.Signal(n)
	}
}

// tally is the outcomes of settled deliveries not yet counted, and the
// ages of its duplicates.
type tally struct {
	processed, redelivery, replay, republish int
	ages                                     []state.DuplicateAge
}

// add counts s, a delivery acked after its commit (processed or duplicate).
func (t *tally) add(s settlement) {
	switch {
	case s.outcome == metrics.OutcomeProcessed:
		t.processed++
		return
	case s.source == metrics.SourceRedelivery:
		t.redelivery++
	case s.source == metrics.SourceReplay:
		t.replay++
	default:
		t.republish++
	}
	t.ages = append(t.ages, state.DuplicateAge{Source: s.source, Age: s.age})
}

// countAcked moves t to the counters.
func (c *counters) countAcked(t tally) {
	c.processed.Add(uint64(t.processed))
	c.m.processed.Add(float64(t.processed))
	dups := t.redelivery + t.replay + t.republish
	defer c.signalSettled(t.processed + dups)
	if dups == 0 {
		return
	}
	c.duplicates.Add(uint64(dups))
	c.m.duplicate.Add(float64(dups))
	c.dupRedelivery.Add(uint64(t.redelivery))
	c.dupReplay.Add(uint64(t.replay))
	c.dupRepublish.Add(uint64(t.republish))
	c.m.dupRedelivery.Add(float64(t.redelivery))
	c.m.dupReplay.Add(float64(t.replay))
	c.m.dupRepublish.Add(float64(t.republish))
	c.noteAges(t.ages)
}

// countCopied counts s, a delivery whose retry or failure copy was
// confirmed and whose original was acked.
func (c *counters) countCopied(s settlement) {
	switch s.kind {
	case settleRetry, settlePark:
		c.retried.Add(1)
		c.m.retried.Inc()
	case settleFail:
		c.failed.Add(1)
		if s.outcome == metrics.OutcomeFailed {
			c.m.failed.Inc()
		} else {
			c.m.rejected.Inc()
		}
		c.m.failures.WithLabelValues(s.reason).Inc()
	}
	c.signalSettled(1)
}
