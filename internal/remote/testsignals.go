package remote

import "github.com/platformd/platformd/internal/testsignal"

// HandlerTestSignals are a remote handler's internal events that tests
// wait for instead of polling the handler's server, its metrics or a
// timer (see internal/testsignal). Production code never initialises
// them: each costs a nil check.
type HandlerTestSignals struct {
	// CallStarted fires when a call holds its slot (max_in_flight) and is
	// about to be sent (value: how many events it asks about).
	CallStarted testsignal.Signal[int]
	// CallEnded fires when a call has ended and been counted (value: its
	// result, one of the metrics' Remote* results, or "" when the batch's
	// own end cut it and nothing was counted).
	CallEnded testsignal.Signal[string]
	// SlotWaited fires when a call finds every slot taken (the limit,
	// max_in_flight or adaptive, reached) and waits for one (value: the
	// limit then).
	SlotWaited testsignal.Signal[int]
	// LimitChanged fires when the adaptive limit moved (value: the new
	// limit), after CallLimit reports it.
	LimitChanged testsignal.Signal[int]
}

// TestSignals returns the handler's test signals, for tests only: a test
// initialises the ones it waits on before the calls it waits for. Safe for
// concurrent use.
func (h *Handler) TestSignals() *HandlerTestSignals { return &h.testSignals }
