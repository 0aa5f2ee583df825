package testsignal

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of an initialised signal.
const (
	// BufferSizeDefault is how many values an initialised signal holds
	// before Signal drops further ones.
	BufferSizeDefault = 1000
	// WaitTimeoutDefault bounds every wait: long enough for a loaded
	// two-core machine running tests under -race, short enough that a
	// missing event fails the test rather than its package's timeout.
	WaitTimeoutDefault = 30 * time.Second
)

// TB is the part of testing.TB a signal uses; *testing.T and *testing.B
// satisfy it. It is an interface of its own so that components that carry
// signals do not link package testing into the binary.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// Signal is one named internal event of a component, carrying a value of
// type T. The zero value is an uninitialised signal: Signal is a no-op on
// it. Signal may be called from any goroutine, concurrently with Init and
// the waits; the waits are meant for the test's own goroutine (they call
// tb.Fatalf on a timeout).
type Signal[T any] struct {
	s atomic.Pointer[armed[T]]
}

// armed is an initialised signal's state.
type armed[T any] struct {
	ch      chan T
	tb      TB
	timeout time.Duration
	dropped atomic.Int64
}

// Init initialises the signal for the test tb, with WaitTimeoutDefault:
// from now on Signal buffers its values for the waits. The signal goes back
// to uninitialised when tb's cleanups run, so that a component outliving
// the test pays nothing for it. Calling Init again starts afresh, dropping
// what was buffered.
func (s *Signal[T]) Init(tb TB) { s.InitTimeout(tb, WaitTimeoutDefault) }

// InitTimeout is Init with waits bounded by timeout instead of
// WaitTimeoutDefault (for an event that legitimately takes longer, such as
// a queue drained under load).
func (s *Signal[T]) InitTimeout(tb TB, timeout time.Duration) {
	tb.Helper()
	a := &armed[T]{ch: make(chan T, BufferSizeDefault), tb: tb, timeout: timeout}
	s.s.Store(a)
	tb.Cleanup(func() { s.s.CompareAndSwap(a, nil) })
}

// Initialized reports whether a test initialised the signal. A component
// computes an expensive value for Signal only when it is true.
func (s *Signal[T]) Initialized() bool { return s.s.Load() != nil }

// Signal records that the event happened, with v. Uninitialised (always in
// production), it does nothing. Initialised, it buffers v without ever
// blocking: when the buffer is full, v is dropped and counted in Dropped.
// Safe for concurrent use.
func (s *Signal[T]) Signal(v T) {
	a := s.s.Load()
	if a == nil {
		return
	}
	select {
	case a.ch <- v:
	default:
		a.dropped.Add(1)
	}
}

// Dropped returns how many values Signal dropped on a full buffer since
// Init; 0 when uninitialised.
func (s *Signal[T]) Dropped() int64 {
	a := s.s.Load()
	if a == nil {
		return 0
	}
	return a.dropped.Load()
}

// WaitOrTimeout returns the next value signalled, or fails the test once
// the signal's timeout passed without one. The signal must be initialised.
func (s *Signal[T]) WaitOrTimeout() T {
	a := s.mustArmed()
	a.tb.Helper()
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	select {
	case v := <-a.ch:
		return v
	case <-t.C:
		a.tb.Fatalf("testsignal: no signal within %s", a.timeout)
		var zero T
		return zero // Fatalf of a real test does not return; a fake's may
	}
}

// WaitUntil returns once cond is true, or fails the test with what once the
// signal's timeout passed. It checks cond first, then again after every
// value signalled (discarding them): the component must signal after every
// change that can make cond true. The signal must be initialised.
func (s *Signal[T]) WaitUntil(what string, cond func() bool) {
	a := s.mustArmed()
	a.tb.Helper()
	t := time.NewTimer(a.timeout)
	defer t.Stop()
	for !cond() {
		select {
		case <-a.ch:
		case <-t.C:
			if cond() {
				return
			}
			a.tb.Fatalf("testsignal: %s: not within %s", what, a.timeout)
			return
		}
	}
}

// RequireEmpty fails the test if a value was signalled and not yet waited
// for: the event did not happen (or was consumed). The signal must be
// initialised.
func (s *Signal[T]) RequireEmpty() {
	a := s.mustArmed()
	a.tb.Helper()
	select {
	case v := <-a.ch:
		a.tb.Fatalf("testsignal: expected no signal, got %s", fmt.Sprint(v))
	default:
	}
}

// mustArmed returns the signal's state; a wait on an uninitialised signal
// is a bug in the test, which would otherwise hang or pass vacuously.
func (s *Signal[T]) mustArmed() *armed[T] {
	a := s.s.Load()
	if a == nil {
		panic("testsignal: wait on a signal the test did not Init")
	}
	return a
}
