package main

// This file is the demo's small TCP proxy between platformd and RabbitMQ:
// it lets the demo take platformd's broker connection away mid-stream
// (what platformd sends is dropped, then every connection is closed), the
// way a network failure does, so that RabbitMQ requeues the deliveries
// whose acks it never received.

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// brokerProxy relays TCP connections to upstream. It is safe for
// concurrent use; close stops it and waits for its goroutines.
type brokerProxy struct {
	ln       net.Listener
	upstream string
	frozen   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{} // both ends of every relayed connection
	wg    sync.WaitGroup
}

// newBrokerProxy listens on a free loopback port and relays to upstream.
func newBrokerProxy(upstream string) (*brokerProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("broker proxy: listen: %w", err)
	}
	p := &brokerProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// addr is the address platformd dials instead of the broker's.
func (p *brokerProxy) addr() string { return p.ln.Addr().String() }

func (p *brokerProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, up) {
			return
		}
		p.wg.Add(2)
		go p.pipe(up, c, true) // platformd -> broker: dropped while frozen
		go p.pipe(c, up, false)
	}
}

// track registers both ends; false (and both closed) once the proxy is closed.
func (p *brokerProxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_, _ = a.Close(), b.Close()
		return false
	}
	p.conns[a], p.conns[b] = struct{}{}, struct{}{}
	return true
}

// pipe copies src to dst until either fails; with freezable set, what is
// read while the proxy is frozen is dropped.
func (p *brokerProxy) pipe(dst, src net.Conn, freezable bool) {
	defer p.wg.Done()
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !(freezable && p.frozen.Load()) {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or an end closed by cut
		}
	}
}

// freeze drops, from now on, everything platformd sends (its acks
// included); the broker's side still flows.
func (p *brokerProxy) freeze() { p.frozen.Store(true) }

// heal ends a freeze for the connections made from now on.
func (p *brokerProxy) heal() { p.frozen.Store(false) }

// cut closes every relayed connection.
func (p *brokerProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// close stops the proxy and its connections, and waits for its goroutines.
func (p *brokerProxy) close() {
	_ = p.ln.Close()
	p.cut()
	p.mu.Lock()
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
