package startstop_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/internal/startstop"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// svc is a service that records its starts and stops.
type svc struct {
	startstop.Base
	name    string
	fail    error
	starts  atomic.Int32
	stops   atomic.Int32
	log     *[]string
	logMu   *sync.Mutex
	release chan struct{} // when set, stop blocks until it is closed
}

func (s *svc) Start(context.Context) error {
	return s.StartFunc(func() (func(), error) {
		s.starts.Add(1)
		if s.fail != nil {
			return nil, s.fail
		}
		return func() {
			if s.release != nil {
				<-s.release
			}
			s.stops.Add(1)
			if s.log != nil {
				s.logMu.Lock()
				*s.log = append(*s.log, s.name)
				s.logMu.Unlock()
			}
		}, nil
	})
}

func TestBase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("start runs once and a second start is refused", func(t *testing.T) {
		t.Parallel()
		s := &svc{}
		require.NoError(t, s.Start(ctx))
		require.ErrorIs(t, s.Start(ctx), startstop.ErrStarted)
		require.True(t, s.Running())
		s.Stop()
		require.False(t, s.Running())
		require.EqualValues(t, 1, s.starts.Load())
		require.EqualValues(t, 1, s.stops.Load())
	})

	t.Run("stop twice stops once", func(t *testing.T) {
		t.Parallel()
		s := &svc{}
		require.NoError(t, s.Start(ctx))
		s.Stop()
		s.Stop()
		require.EqualValues(t, 1, s.stops.Load())
	})

	t.Run("stop before start is safe and refuses a later start", func(t *testing.T) {
		t.Parallel()
		s := &svc{}
		s.Stop()
		require.ErrorIs(t, s.Start(ctx), startstop.ErrStopped)
		require.Zero(t, s.starts.Load())
		require.Zero(t, s.stops.Load())
	})

	t.Run("a failed start leaves the service startable", func(t *testing.T) {
		t.Parallel()
		s := &svc{fail: errors.New("db down")}
		require.ErrorContains(t, s.Start(ctx), "db down")
		require.False(t, s.Running())
		s.fail = nil
		require.NoError(t, s.Start(ctx))
		s.Stop()
		require.EqualValues(t, 1, s.stops.Load())
	})

	t.Run("concurrent stops all wait for the one stop", func(t *testing.T) {
		t.Parallel()
		s := &svc{release: make(chan struct{})}
		require.NoError(t, s.Start(ctx))
		var returned atomic.Int32
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { s.Stop(); returned.Add(1) })
		}
		require.Zero(t, returned.Load(), "no Stop returns before the service has stopped")
		close(s.release)
		wg.Wait()
		require.EqualValues(t, 4, returned.Load())
		require.EqualValues(t, 1, s.stops.Load())
	})
}

func TestStagesStopInOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var log []string
	mk := func(name string) *svc {
		s := &svc{name: name, log: &log, logMu: &mu}
		require.NoError(t, s.Start(context.Background()))
		return s
	}
	first, second1, second2, last := mk("first"), mk("second"), mk("second"), mk("last")
	var never *svc // a component that was never built
	startstop.Stages(
		[]startstop.Stopper{first, never},
		[]startstop.Stopper{second1, second2},
		[]startstop.Stopper{last, startstop.StopFunc(func() { mu.Lock(); log = append(log, "func"); mu.Unlock() })},
	)
	require.Equal(t, []string{"first", "second", "second"}, log[:3])
	require.ElementsMatch(t, []string{"last", "func"}, log[3:])
}

func TestLoopRunsUntilStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	loopCtx := make(chan context.Context, 1)
	var ended atomic.Bool
	l := startstop.NewLoop(func(ctx context.Context) {
		loopCtx <- ctx
		<-ctx.Done()
		ended.Store(true)
	})
	require.NoError(t, l.Start(ctx))
	lctx := <-loopCtx
	cancel()
	require.NoError(t, lctx.Err(), "the start context ending does not stop the loop")
	l.Stop()
	require.ErrorIs(t, lctx.Err(), context.Canceled)
	require.True(t, ended.Load(), "Stop returns once the loop has returned")
}

func TestSleepOrWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	wake := make(chan struct{}, 1)
	wake <- struct{}{}
	require.True(t, startstop.SleepOrWake(ctx, time.Hour, wake), "a wake-up ends the wait at once")
	require.True(t, startstop.SleepOrWake(ctx, time.Millisecond, nil), "the wait ends when d passed")
	require.True(t, startstop.SleepOrWake(ctx, 0, wake), "d <= 0 does not wait")

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.False(t, startstop.SleepOrWake(cctx, time.Hour, wake), "an ended ctx stops the service")
	require.False(t, startstop.Sleep(cctx, 0))
}

func TestGoAndWaitDone(t *testing.T) {
	t.Parallel()
	ctx, cancelStart := context.WithCancel(context.Background())
	running := make(chan struct{})
	cancel, done := startstop.Go(ctx, func(ctx context.Context) {
		close(running)
		<-ctx.Done()
	})
	<-running
	cancelStart()
	require.False(t, startstop.WaitDone(done, time.Millisecond), "the start context ending does not end run")
	cancel()
	require.True(t, startstop.WaitDone(done, time.Minute), "cancel ends run, and done is closed once it returned")
}

// Started closes when the service says it is up, which may be well after
// Start returned, and only once however often it is said.
func TestStartedClosesWhenTheServiceSaysItIsUp(t *testing.T) {
	var b startstop.Base
	started := b.Started() // before Start: the same channel later
	require.NoError(t, b.StartFunc(func() (func(), error) { return func() {}, nil }))
	select {
	case <-started:
		t.Fatal("Started closed by Start alone")
	default:
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(b.MarkStarted)
	}
	wg.Wait()
	select {
	case <-started:
	default:
		t.Fatal("Started not closed after MarkStarted")
	}
	require.Equal(t, started, b.Started(), "one channel for the service's life")
	b.Stop()
}
