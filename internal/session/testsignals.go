package session

import "github.com/platformd/platformd/internal/testsignal"

// TestSignals are a session's internal events that tests wait for instead
// of polling Listening (see internal/testsignal). Production code never
// initialises them: each costs a nil check.
type TestSignals struct {
	// Listening fires each time the session holds a connection and
	// LISTENs on it: at start and after every reconnection.
	Listening testsignal.Signal[struct{}]
	// Lost fires when the session has lost its connection (Do calls then
	// run on the pool until it holds one again).
	Lost testsignal.Signal[struct{}]
}

// TestSignals returns the session's test signals, for tests only: a test
// initialises the ones it waits on before Start. Safe for concurrent use.
func (s *Session) TestSignals() *TestSignals { return &s.testSignals }
