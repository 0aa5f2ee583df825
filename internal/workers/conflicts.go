package workers

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
)

// ConflictLogIntervalDefault is the least time between two warnings of a
// pool's transaction conflicts.
const ConflictLogIntervalDefault = 10 * time.Second

// ConflictObserver is a pool's dedup.Observer: it counts transaction
// conflicts (platformd_tx_conflicts_total{sqlstate}) and batch replays
// (platformd_batch_replays_total), and says so at warn level, one line per
// interval with the counts since the last line, so that an operator sees
// why a pool slows down without a line per conflict. Safe for concurrent
// use.
type ConflictObserver struct {
	conflicts *prometheus.CounterVec
	replays   prometheus.Counter
	log       *slog.Logger
	interval  time.Duration
	now       func() time.Time

	mu      sync.Mutex
	last    time.Time
	pending map[string]int
	replay  int
}

var _ dedup.Observer = (*ConflictObserver)(nil)

// NewConflictObserver returns the observer of pool of service.
func NewConflictObserver(m *metrics.Metrics, service, pool string, log *slog.Logger) *ConflictObserver {
	return &ConflictObserver{
		conflicts: m.TxConflicts.MustCurryWith(prometheus.Labels{"service": service, "pool": pool}),
		replays:   m.BatchReplays.WithLabelValues(service, pool),
		log:       log.With(slog.String("service", service), slog.String("pool", pool)),
		interval:  ConflictLogIntervalDefault,
		now:       time.Now,
		pending:   map[string]int{},
	}
}

// Conflict counts a transaction aborted with sqlstate.
func (o *ConflictObserver) Conflict(sqlstate string) {
	o.conflicts.WithLabelValues(sqlstate).Inc()
	o.mu.Lock()
	o.pending[sqlstate]++
	o.flushLocked()
	o.mu.Unlock()
}

// Replay counts a failed batch replayed event by event.
func (o *ConflictObserver) Replay() {
	o.replays.Inc()
	o.mu.Lock()
	o.replay++
	o.mu.Unlock()
}

// flushLocked logs the pending counts if the interval has passed since the
// last line.
func (o *ConflictObserver) flushLocked() {
	now := o.now()
	if now.Sub(o.last) < o.interval {
		return
	}
	attrs := []any{slog.Int("replays", o.replay), slog.Duration("since", now.Sub(o.last))}
	if o.last.IsZero() {
		attrs[1] = slog.String("since", "start")
	}
	for code, n := range o.pending {
		attrs = append(attrs, slog.Int("sqlstate_"+code, n))
	}
	o.log.Warn("workers: batch transactions aborted by lock conflicts and retried; if this persists, sort the rows a batch handler locks, or set the pool's partition_key", attrs...)
	o.last = now
	clear(o.pending)
	o.replay = 0
}
