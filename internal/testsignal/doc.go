// Package testsignal lets tests wait for a component's internal events
// instead of sleeping or polling: River's riverinternal testsignal, for
// platformd.
//
// A component carries a struct of named signals (by convention
// XTestSignals, in a field testSignals or reached through a TestSignals
// method) and calls Signal at the point where the event has happened, after
// the state it changes is visible:
//
//	type PoolTestSignals struct {
//		Quiesced testsignal.Signal[string] // pool name: paused, every worker idle
//	}
//
//	p.testSignals.Quiesced.Signal(p.cfg.Name)
//
// A test initialises only the signals it waits on, before the event can
// happen, and then waits:
//
//	p.TestSignals().Quiesced.Init(t)
//	... pause the pool ...
//	p.TestSignals().Quiesced.WaitOrTimeout()
//
// Production code never initialises a signal: Signal then costs one atomic
// load and a nil check, allocates nothing and never blocks. An initialised
// signal buffers BufferSizeDefault values; Signal never blocks there either
// and drops a value when the buffer is full (Dropped counts them). A test
// that counts values must therefore drain them as they come; a test that
// waits for a condition uses WaitUntil, which re-checks the condition on
// every value and so needs none of them individually (a full buffer means
// a wake-up is already pending).
//
// Every wait is bounded by WaitTimeoutDefault (or the timeout given to
// InitTimeout) and fails the test with what it waited for: a test never
// hangs on a signal that does not come.
package testsignal
