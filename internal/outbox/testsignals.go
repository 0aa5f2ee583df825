package outbox

import "github.com/platformd/platformd/internal/testsignal"

// RelayTestSignals are a relay's internal events that tests wait for
// instead of polling Active or the outbox (see internal/testsignal).
// Production code never initialises them: each costs a nil check.
type RelayTestSignals struct {
	// Active fires when the relay takes its lease and starts relaying
	// (true), and when it stops, its lease lost or released (false).
	Active testsignal.Signal[bool]
	// Deleted fires after a pass deleted (or archived) the rows the
	// broker confirmed (value: how many).
	Deleted testsignal.Signal[int]
}

// TestSignals returns the relay's test signals, for tests only: a test
// initialises the ones it waits on before the event can happen. Safe for
// concurrent use.
func (r *Relay) TestSignals() *RelayTestSignals { return &r.testSignals }
