package scheduler

import (
	"time"

	"github.com/platformd/platformd/internal/state"
	"github.com/platformd/platformd/internal/testsignal"
)

// TestSignals are the scheduler's internal events that tests wait for
// instead of sleeping or polling (see internal/testsignal). Production
// code never initialises them: each costs a nil check.
type TestSignals struct {
	// PurgeFinished fires when a purge run (scheduled or RunNow) that
	// started, under the lease, has ended and recorded itself (or failed
	// to), whatever its outcome.
	PurgeFinished testsignal.Signal[PurgeSignal]
	// PurgeSkipped fires when a scheduled purge was turned away because
	// another run holds the service's purge lease: gocron runs it again at
	// the next period (value: the service).
	PurgeSkipped testsignal.Signal[string]
	// ArchiveFinished fires when an "archive:<service>" run has ended
	// (value: its error, nil on success).
	ArchiveFinished testsignal.Signal[error]
	// FailuresFinished fires when a "failures:<service>" run has ended
	// (value: its error, nil when it succeeded).
	FailuresFinished testsignal.Signal[error]
	// RowsEstimated fires when the processed_event row estimate metric
	// was set (value: the estimate).
	RowsEstimated testsignal.Signal[int64]
}

// PurgeSignal is a PurgeFinished value.
type PurgeSignal struct {
	Service string
	// Started is when the run started deleting, on the daemon's clock.
	Started time.Time
	Run     state.PurgeRun
	Err     error
}

// TestSignals returns the scheduler's test signals, for tests only: a test
// initialises the ones it waits on before the event can happen. Safe for
// concurrent use.
func (s *Scheduler) TestSignals() *TestSignals { return &s.testSignals }
