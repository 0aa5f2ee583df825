package broker

import "github.com/platformd/platformd/internal/testsignal"

// ConnTestSignals are a connection's internal events that tests wait for
// instead of polling Node (see internal/testsignal). Production code never
// initialises them: each costs a nil check.
type ConnTestSignals struct {
	// Reconnected fires after each successful redial, not the first dial
	// (value: the node, host:port).
	Reconnected testsignal.Signal[string]
	// Lost fires once Node and the connected gauge say that a connection
	// is gone, whatever closed it (value: its node).
	Lost testsignal.Signal[string]
}

// TestSignals returns the connection's test signals, for tests only: a
// test initialises the ones it waits on before the event can happen. Safe
// for concurrent use.
func (c *Conn) TestSignals() *ConnTestSignals { return &c.testSignals }
