package lease

import "github.com/platformd/platformd/internal/testsignal"

// TestSignals are a lease's internal events that tests wait for instead of
// sleeping through its retries (see internal/testsignal). Production code
// never initialises them: each costs a nil check.
type TestSignals struct {
	// TurnedAway fires each time Run tried to take the lease and another
	// holder had it (value: nothing; a failed attempt does not fire).
	TurnedAway testsignal.Signal[struct{}]
}

// TestSignals returns the lease's test signals, for tests only: a test
// initialises the ones it waits on before Run. Safe for concurrent use.
func (l *Lease) TestSignals() *TestSignals { return &l.testSignals }
