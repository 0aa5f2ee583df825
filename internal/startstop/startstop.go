// Package startstop is the one lifecycle contract of platformd's background
// services (worker pools, the purge scheduler, the admin server and the
// daemon's own loops), after River's rivershared/startstop:
//
//   - Start(ctx) starts the service and returns once it runs in the
//     background, or with the error that kept it from starting;
//   - Stop() stops it and blocks until it has; it may be called more than
//     once, concurrently, and before Start (then Start is refused).
//
// A service embeds Base, which keeps that bookkeeping in one place, and
// gives it the service's own start and stop through StartFunc. StopAllParallel
// handles a group; Stages stops groups in a stated order.
package startstop

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"
)

// Service is the lifecycle contract.
type Service interface {
	// Start starts the service in the background. The service runs until
	// Stop; ctx bounds the start only, unless a service documents more.
	Start(ctx context.Context) error
	// Stop stops the service and blocks until it has stopped. It is
	// idempotent and safe to call before Start.
	Stop()
}

// Stopper is what a shutdown needs of a service (or of a resource without a
// Start, such as a connection pool wrapped in StopFunc).
type Stopper interface {
	Stop()
}

// Errors of Base.StartFunc.
var (
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("already started")
	// ErrStopped is returned by a Start after Stop.
	ErrStopped = errors.New("stopped")
)

// Base implements the contract's bookkeeping for the service embedding it.
// Its zero value is ready; it is safe for concurrent use.
type Base struct {
	mu       sync.Mutex
	started  bool
	stopping bool
	stop     func()
	done     chan struct{} // closed once the stop function has returned
	up       chan struct{} // closed by MarkStarted; made on first need
	upOnce   sync.Once
}

// Started returns a channel closed once the service has said it is up
// (MarkStarted): not when Start returned, which for a service that
// connects in the background (a pool to its broker and database) is
// earlier. A service stopped before it came up never closes it: wait on it
// beside a context or Stop. Safe for concurrent use, before Start too.
func (b *Base) Started() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.upChan()
}

// MarkStarted closes Started's channel; calls after the first do nothing.
// The service calls it where it knows it is up.
func (b *Base) MarkStarted() {
	b.mu.Lock()
	up := b.upChan()
	b.mu.Unlock()
	b.upOnce.Do(func() { close(up) })
}

// upChan returns b.up, made on first need; b.mu is held.
func (b *Base) upChan() chan struct{} {
	if b.up == nil {
		b.up = make(chan struct{})
	}
	return b.up
}

// StartFunc starts the service once: start runs under Base's lock (a
// concurrent Stop waits for it, then stops what it started) and returns the
// function that stops it, which Stop calls at most once. A Start after Stop
// returns ErrStopped without calling start, a second Start ErrStarted; if
// start fails, the service is not started and may be started again.
func (b *Base) StartFunc(start func() (stop func(), err error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopping:
		return ErrStopped
	case b.started:
		return ErrStarted
	}
	stop, err := start()
	if err != nil {
		return err
	}
	b.started, b.stop = true, stop
	return nil
}

// Stop calls the stop function given to StartFunc, once, and blocks until
// it has returned; concurrent and later calls wait for the same stop. Before
// Start it only marks the service stopped.
func (b *Base) Stop() {
	b.mu.Lock()
	if b.stopping {
		done := b.done
		b.mu.Unlock()
		<-done
		return
	}
	b.stopping = true
	b.done = make(chan struct{})
	stop := b.stop
	b.mu.Unlock()
	if stop != nil {
		stop()
	}
	close(b.done)
}

// Stopped reports whether Stop has been called (it may still be running).
func (b *Base) Stopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopping
}

// Running reports whether the service started and Stop has not been called.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.started && !b.stopping
}

// StopAllParallel stops every service at once and returns when all have
// stopped. Nil entries are skipped.
func StopAllParallel[S Stopper](services ...S) {
	var wg sync.WaitGroup
	for _, s := range services {
		if isNil(s) {
			continue
		}
		wg.Go(s.Stop)
	}
	wg.Wait()
}

// Stages stops one stage after the other; the members of a stage stop in
// parallel. It is how a shutdown order is written down as one list.
func Stages(stages ...[]Stopper) {
	for _, st := range stages {
		StopAllParallel(st...)
	}
}

// StopFunc adapts a function to Stopper, called at most once.
func StopFunc(f func()) Stopper { return &stopFunc{f: f} }

type stopFunc struct {
	once sync.Once
	f    func()
}

func (s *stopFunc) Stop() { s.once.Do(s.f) }

// Loop is a Service running one function in a goroutine until Stop cancels
// its context. It suits the small loops a daemon keeps (watchers,
// refreshers).
type Loop struct {
	Base
	run func(ctx context.Context)
}

// NewLoop returns a Loop running run, not started.
func NewLoop(run func(ctx context.Context)) *Loop { return &Loop{run: run} }

// Start runs the loop in a goroutine under a context that ctx's
// cancellation does not end (Stop does).
func (l *Loop) Start(ctx context.Context) error {
	return l.StartFunc(func() (func(), error) {
		cancel, done := Go(ctx, l.run)
		return func() { cancel(); <-done }, nil
	})
}

// Go runs run in a goroutine under a context that ctx's cancellation does
// not end (a Start's ctx bounds the start only): cancel ends it, and done
// is closed once run has returned. It is the background half of a
// service's Start; its stop function cancels, then waits for done (with
// WaitDone where the wait is bounded).
func Go(ctx context.Context, run func(ctx context.Context)) (cancel context.CancelFunc, done <-chan struct{}) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		run(rctx)
	}()
	return cancel, ch
}

// Tick calls fn every period until ctx ends. The first call comes one
// period after Tick starts: a caller that wants one at once makes it.
func Tick(ctx context.Context, period time.Duration, fn func(ctx context.Context)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// isNil reports whether s is a nil interface or holds a nil pointer: a
// shutdown list may name components that were never built.
func isNil(s any) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
