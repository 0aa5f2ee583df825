package startstop

import (
	"context"
	"time"
)

// Sleep is a background service's wait between two units of work: it
// waits d or until ctx ends (the service is being stopped) and reports
// whether d passed. A d <= 0 does not wait. Safe for concurrent use.
func Sleep(ctx context.Context, d time.Duration) bool {
	return SleepOrWake(ctx, d, nil)
}

// SleepOrWake is Sleep that a receive on wake also ends (a service's Wake
// asking it to look for work now; a nil wake never does): it reports
// whether the service goes on, false only when ctx ended. A d <= 0 does
// not wait. Safe for concurrent use.
func SleepOrWake(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return true
	case <-t.C:
		return true
	}
}

// WaitDone waits up to d for done to be closed and reports whether it was:
// a service's Stop bounds its wait for the goroutine Go started with it.
func WaitDone(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
