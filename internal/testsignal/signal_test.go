package testsignal

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeTB records a Fatalf instead of ending the goroutine, to test the
// timeouts.
type fakeTB struct {
	mu       sync.Mutex
	fatal    string
	cleanups []func()
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatal = fmt.Sprintf(format, args...)
}

func (f *fakeTB) failure() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// An uninitialised signal, as every one is in production, does nothing:
// it never blocks, however many values it is given, and allocates nothing.
func TestUninitialisedCostsNothingAndNeverBlocks(t *testing.T) { // not parallel: AllocsPerRun
	var s Signal[int]
	require.False(t, s.Initialized())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 * BufferSizeDefault {
			s.Signal(i)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Signal blocked on an uninitialised signal")
	}
	require.Zero(t, testing.AllocsPerRun(1000, func() { s.Signal(1) }))
	require.Zero(t, s.Dropped())
	require.Panics(t, func() { s.WaitOrTimeout() }, "a wait on an uninitialised signal is a bug in the test")
}

// Values come out in the order signalled.
func TestWaitOrTimeoutReturnsValuesInOrder(t *testing.T) {
	t.Parallel()
	var s Signal[string]
	s.Init(t)
	require.True(t, s.Initialized())
	go func() {
		s.Signal("a")
		s.Signal("b")
	}()
	require.Equal(t, "a", s.WaitOrTimeout())
	require.Equal(t, "b", s.WaitOrTimeout())
	s.RequireEmpty()
}

// A full buffer drops values rather than block the component; Dropped
// counts them, and an initialised signal's Signal does not allocate either.
func TestFullBufferDropsWithoutBlocking(t *testing.T) { // not parallel: AllocsPerRun
	var s Signal[int]
	s.Init(t)
	for i := range BufferSizeDefault + 5 {
		s.Signal(i)
	}
	require.EqualValues(t, 5, s.Dropped())
	require.Zero(t, testing.AllocsPerRun(100, func() { s.Signal(1) }))
	require.Equal(t, 0, s.WaitOrTimeout(), "the first values are kept")
}

// A signal that does not come fails the test with a bound, not a hang.
func TestWaitOrTimeoutFailsTheTest(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	tb := &fakeTB{}
	s.InitTimeout(tb, 50*time.Millisecond)
	start := time.Now()
	require.Zero(t, s.WaitOrTimeout())
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	require.Contains(t, tb.failure(), "no signal within 50ms")
}

// WaitUntil re-checks its condition on every signal and returns once it
// holds, whatever the number of values (here more than the buffer holds).
func TestWaitUntil(t *testing.T) {
	t.Parallel()
	var s Signal[struct{}]
	s.Init(t)
	var mu sync.Mutex
	n := 0
	count := func() int { mu.Lock(); defer mu.Unlock(); return n }
	go func() {
		for range 3 * BufferSizeDefault {
			mu.Lock()
			n++
			mu.Unlock()
			s.Signal(struct{}{})
		}
	}()
	s.WaitUntil("every increment", func() bool { return count() == 3*BufferSizeDefault })

	var never Signal[int]
	tb := &fakeTB{}
	never.InitTimeout(tb, 20*time.Millisecond)
	never.Signal(1) // a value that does not make the condition true
	never.WaitUntil("the impossible", func() bool { return false })
	require.Contains(t, tb.failure(), "the impossible: not within 20ms")
}

// RequireEmpty fails on a value nobody waited for.
func TestRequireEmpty(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	tb := &fakeTB{}
	s.Init(tb)
	s.RequireEmpty()
	require.Empty(t, tb.failure())
	s.Signal(7)
	s.RequireEmpty()
	require.Contains(t, tb.failure(), "expected no signal, got 7")
}

// The test's cleanup uninitialises the signal: a component that outlives
// the test pays nothing for it again.
func TestCleanupUninitialises(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	t.Run("sub", func(t *testing.T) {
		s.Init(t)
		require.True(t, s.Initialized())
	})
	require.False(t, s.Initialized())
	s.Signal(1) // no-op again
}

// Init may run while the component signals from other goroutines (a test
// that initialises a signal of a running daemon): the race detector finds
// nothing.
func TestInitWhileSignalling(t *testing.T) {
	t.Parallel()
	var s Signal[int]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					s.Signal(1)
				}
			}
		})
	}
	s.Init(t)
	require.Equal(t, 1, s.WaitOrTimeout())
	close(stop)
	wg.Wait()
}

// BenchmarkSignalUninitialised is what production pays per event.
func BenchmarkSignalUninitialised(b *testing.B) {
	var s Signal[int]
	for i := 0; b.Loop(); i++ {
		s.Signal(i)
	}
}
