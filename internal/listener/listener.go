// Package listener holds what platformd's network servers (the admin API
// and the console) share around their protocol: a startstop lifecycle that
// listens on a TCP address when started, the address it bound, and
// lifecycle errors named after the server.
package listener

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/platformd/platformd/internal/startstop"
)

// Lifecycle is the listening part of a server, which embeds a *Lifecycle
// made by New and gets Stop, Stopped, Running and Addr from it. It is safe
// for concurrent use.
type Lifecycle struct {
	startstop.Base

	name string // the server's name, prefixing its errors: admin, console
	addr string // the address Start listens on

	mu    sync.Mutex
	bound net.Addr
}

// New returns the Lifecycle of the server called name (the prefix of its
// errors), which Start makes listen on addr.
func New(name, addr string) *Lifecycle {
	return &Lifecycle{name: name, addr: addr}
}

// Start listens on the address given to New and calls serve with the
// listener, once: serve starts serving in the background and returns the
// function that stops it, which Stop calls. ctx bounds only the listen.
// A Start after Stop, or a second Start or Serve, fails with the server's
// name: "<name>: server stopped", "<name>: server already started".
func (l *Lifecycle) Start(ctx context.Context, serve func(lis net.Listener) (stop func())) error {
	return l.named(l.StartFunc(func() (func(), error) {
		var lc net.ListenConfig
		lis, err := lc.Listen(ctx, "tcp", l.addr)
		if err != nil {
			return nil, fmt.Errorf("%s: error listening on %s: %w", l.name, l.addr, err)
		}
		l.setBound(lis.Addr())
		return serve(lis), nil
	}))
}

// Serve is Start on lis, a listener the caller made, instead of listening:
// on an error lis is left open for the caller to close.
func (l *Lifecycle) Serve(lis net.Listener, serve func(lis net.Listener) (stop func())) error {
	return l.named(l.StartFunc(func() (func(), error) {
		l.setBound(lis.Addr())
		return serve(lis), nil
	}))
}

// Addr returns the address the server listens on, or nil before Start or
// Serve.
func (l *Lifecycle) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bound
}

func (l *Lifecycle) setBound(a net.Addr) {
	l.mu.Lock()
	l.bound = a
	l.mu.Unlock()
}

// named names startstop's lifecycle errors after the server.
func (l *Lifecycle) named(err error) error {
	switch {
	case errors.Is(err, startstop.ErrStopped):
		return fmt.Errorf("%s: server stopped", l.name)
	case errors.Is(err, startstop.ErrStarted):
		return fmt.Errorf("%s: server already started", l.name)
	}
	return err
}
