package replay

import "github.com/platformd/platformd/internal/testsignal"

// RunnerTestSignals are a replay runner's internal events that tests wait
// for instead of polling platform.replay (see internal/testsignal).
// Production code never initialises them: each costs a nil check.
type RunnerTestSignals struct {
	// Active fires when the runner starts working under its lease (true)
	// and when it stops, its lease lost or released (false).
	Active testsignal.Signal[bool]
	// ChunkRecorded fires after a chunk's progress was recorded (value: the
	// replay's record as recorded).
	ChunkRecorded testsignal.Signal[Record]
}

// TestSignals returns the runner's test signals, for tests only (this
// package's and the daemon's): a test initialises the ones it waits on
// before the event can happen. Safe for concurrent use.
func (r *Runner) TestSignals() *RunnerTestSignals { return &r.testSignals }

// runnerTest holds the runner's test-only hooks: code a test runs inside
// the runner at a chosen point (to take its lease away, say), where a
// signal would only report. Set before Start; nil in production.
type runnerTest struct {
	// afterCommit runs after the broker committed a chunk and before its
	// progress is recorded.
	afterCommit func(r Record)
	// afterChunk runs after a chunk's progress was recorded.
	afterChunk func(r Record)
}
