// Package batchscope gives the handlers of one dedup batch a place to keep
// what they learnt for the rest of that batch: the dedup step opens a
// Scope per Process call and puts it in the context every handler call of
// that call derives from (the batch's try, a try again after a conflict,
// the replay event by event). A remote handler keeps there the answers of
// its call, so that a replay applies them instead of asking again: one
// answer per event per attempt. The Scope ends with the call; a
// redelivery gets a new one.
package batchscope

import (
	"context"
	"sync"
)

type scopeKey struct{}

// Scope is one Process call's store. It is safe for concurrent use.
type Scope struct {
	mu sync.Mutex
	m  map[any]any
}

// With returns ctx carrying a new, empty Scope.
func With(ctx context.Context) context.Context {
	return context.WithValue(ctx, scopeKey{}, &Scope{})
}

// From returns ctx's Scope, or nil when ctx has none (a handler called
// outside the dedup step).
func From(ctx context.Context) *Scope {
	s, _ := ctx.Value(scopeKey{}).(*Scope)
	return s
}

// Load returns the value stored under key. A nil Scope holds nothing.
func (s *Scope) Load(key any) (any, bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	return v, ok
}

// Store stores v under key (a comparable value). A nil Scope keeps
// nothing.
func (s *Scope) Store(key, v any) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[any]any)
	}
	s.m[key] = v
}
