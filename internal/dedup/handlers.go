package dedup

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
)

// Route is one handler of an event name, in registration order.
type Route struct {
	Name    string
	Handler consumer.Handler
}

// RoutesFor builds the routes of the named handlers from reg, in the order
// given.
func RoutesFor(reg *consumer.Registry, handlerNames []string) (map[string][]Route, error) {
	routes := map[string][]Route{}
	for _, name := range handlerNames {
		r, err := reg.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("dedup routes: %w", err)
		}
		for _, ev := range r.Events {
			routes[ev] = append(routes[ev], Route{Name: r.Name, Handler: r.Handler})
		}
	}
	return routes, nil
}

// eventsScratch is runHandlers' working memory, reused across batches: a
// batch's events gathered per handler were the largest allocation of the
// hot path.
type eventsScratch struct{ events []consumer.Event }

var scratchPool = sync.Pool{New: func() any { return new(eventsScratch) }}

// runHandlers runs the handlers of the new events: handler by handler in
// registration order, a BatchHandler once over all its events, any other
// handler event by event. A handler's failure returns a *handlerFailure
// (with the failing task's result set when one event's call failed); any
// other error is the database's or the caller's.
func (p *Processor) runHandlers(ctx context.Context, tx pgx.Tx, fresh []*task) error {
	s := scratchPool.Get().(*eventsScratch)
	defer func() {
		clear(s.events[:cap(s.events)]) // drop the references to the deliveries' bodies
		s.events = s.events[:0]
		scratchPool.Put(s)
	}()
	for _, h := range p.order {
		s.events = s.events[:0]
		for _, t := range fresh {
			if routed(p.routes[t.ev.Name], h.Name) {
				s.events = append(s.events, *t.ev)
			}
		}
		if len(s.events) == 0 {
			continue
		}
		hctx, span := p.tr.startHandler(ctx, h.Name, len(s.events))
		if bh, ok := h.Handler.(consumer.BatchHandler); ok && len(s.events) > 1 {
			err := call(func() error { return bh.HandleBatch(hctx, tx, s.events) })
			endSpan(span, err)
			if err != nil {
				return handlerError(ctx, tx, h.Name, err, nil)
			}
			continue
		}
		for _, t := range fresh {
			if !routed(p.routes[t.ev.Name], h.Name) {
				continue
			}
			if err := call(func() error { return h.Handler.Handle(consumer.EventContext(ctx, *t.ev), tx, *t.ev) }); err != nil {
				endSpan(span, err)
				return handlerError(ctx, tx, h.Name, err, t)
			}
		}
		endSpan(span, nil)
	}
	return nil
}

// runEvent calls every handler of t's event in order, stopping at the first
// failure (see runHandlers for the errors).
func (p *Processor) runEvent(ctx context.Context, tx pgx.Tx, t *task) error {
	for _, r := range p.routes[t.ev.Name] {
		_, span := p.tr.startHandler(ctx, r.Name, 1)
		err := call(func() error { return r.Handler.Handle(consumer.EventContext(ctx, *t.ev), tx, *t.ev) })
		endSpan(span, err)
		if err != nil {
			return handlerError(ctx, tx, r.Name, err, t)
		}
	}
	return nil
}

// handlerError sorts a handler's error: the database's or the caller's
// fault is returned wrapped (the batch's outcome is unknown); the event's
// is recorded on t, when known, and returned as a *handlerFailure.
func handlerError(ctx context.Context, tx pgx.Tx, handler string, err error, t *task) error {
	if infra(ctx, tx, err) {
		return fmt.Errorf("handler %s: %w", handler, err)
	}
	if t != nil {
		t.result = Result{Outcome: OutcomeFailed, Err: err, Permanent: consumer.IsPermanent(err), Handler: handler}
	}
	return &handlerFailure{cause: err}
}

func routed(routes []Route, name string) bool {
	for _, r := range routes {
		if r.Name == name {
			return true
		}
	}
	return false
}

// call is the one recovery point of handler code: it runs fn and turns a
// panic into a PanicError. The panicked flag also catches a handler that
// ends its goroutine with runtime.Goexit (a test's t.FailNow): that cannot
// be stopped, but it is then reported as a failure of the event rather
// than vanishing.
func call(fn func() error) (err error) {
	panicked := true
	defer func() {
		if v := recover(); v != nil || panicked {
			if v == nil {
				v = "runtime.Goexit"
			}
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	err = fn()
	panicked = false
	return err
}
