package main

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// proxy is a TCP relay between platformd and RabbitMQ that can lose
// platformd's traffic on demand: the network failure of the seed's broker
// redelivery ("the worker committed, then lost its connection before the
// ack"). While frozen, what platformd sends (its acks) is dropped while the
// broker's side still flows; cut then closes every connection, and the
// broker requeues every delivery it never saw acknowledged, flagged
// redelivered.
type proxy struct {
	ln       net.Listener
	upstream string
	frozen   atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy listens on a free loopback port and relays to upstream
// (host:port).
func newProxy(upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// addr is the address platformd connects to instead of the broker's.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go func() { // broker -> platformd, always
			defer p.wg.Done()
			_, _ = io.Copy(c, s)
			p.drop(c, s)
		}()
		go func() { // platformd -> broker, unless frozen
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 && !p.frozen.Load() {
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			p.drop(c, s)
		}()
	}
}

// track registers a relayed pair; false once the proxy is closed.
func (p *proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		_, _ = c.Close(), s.Close()
		return false
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

func (p *proxy) drop(c, s net.Conn) {
	_, _ = c.Close(), s.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// freeze starts dropping what platformd sends.
func (p *proxy) freeze() { p.frozen.Store(true) }

// cut closes every relayed connection, then relays normally again for the
// next connections.
func (p *proxy) cut() {
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.frozen.Store(false)
}

// close stops the proxy and its connections.
func (p *proxy) close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
