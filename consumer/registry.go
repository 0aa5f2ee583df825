package consumer

import (
	"errors"
	"fmt"
	"regexp"
	"sync"
)

// ErrUnknownHandler is returned when a handler name is not registered.
var ErrUnknownHandler = errors.New("unknown handler")

var handlerNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// Registry holds named handlers. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	order []string
	regs  map[string]Registration
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{regs: make(map[string]Registration)}
}

// Register adds a handler. It fails on an empty or malformed name, a name
// already taken, no event names, or a nil Handler.
func (r *Registry) Register(reg Registration) error {
	if !handlerNameRE.MatchString(reg.Name) {
		return fmt.Errorf("register handler %q: name must match %s", reg.Name, handlerNameRE)
	}
	if reg.Handler == nil {
		return fmt.Errorf("register handler %q: nil Handler", reg.Name)
	}
	if len(reg.Events) == 0 {
		return fmt.Errorf("register handler %q: no event names", reg.Name)
	}
	for _, e := range reg.Events {
		if e == "" {
			return fmt.Errorf("register handler %q: empty event name", reg.Name)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.regs[reg.Name]; ok {
		return fmt.Errorf("register handler %q: already registered", reg.Name)
	}
	reg.Events = append([]string(nil), reg.Events...)
	r.regs[reg.Name] = reg
	r.order = append(r.order, reg.Name)
	return nil
}

// MustRegister is Register that panics on error, for package init code.
func (r *Registry) MustRegister(reg Registration) {
	if err := r.Register(reg); err != nil {
		panic(err)
	}
}

// Lookup returns the registration of name.
func (r *Registry) Lookup(name string) (Registration, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	reg, ok := r.regs[name]
	if !ok {
		return Registration{}, fmt.Errorf("%w %q", ErrUnknownHandler, name)
	}
	return reg, nil
}

// Names returns the registered handler names in registration order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]string(nil), r.order...)
}
