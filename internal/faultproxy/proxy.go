// Package faultproxy is a TCP relay between a client (platformd) and a
// server (PostgreSQL, RabbitMQ) that fails on demand, the one proxy of the
// fault tests and of the demo's lost broker connection:
//
//   - Blackhole holds every byte in both directions (and every close)
//     without closing anything, as a network partition does: what was sent
//     waits, as TCP retransmission would, and flows again on Heal. A
//     server that stops answering while its sockets stay open looks so.
//   - Freeze holds what the client sends while the server's side still
//     flows (acks lost on the way); Heal ends it.
//   - Cut closes every connection and keeps listening; Off also stops
//     listening (a node down), and On listens again on the same address.
//
// Hooks see each connection's bytes as they pass, so that a test can act
// on what the protocol says (the chaos suite cuts the session that sent a
// COMMIT). A Proxy is safe for concurrent use.
package faultproxy

import (
	"errors"
	"net"
	"sync"
)

// Hooks are what a connection's pipes call besides copying; each may be
// nil. They run on the pipe goroutines, one per direction.
type Hooks struct {
	// ToServer sees each chunk the client sent, after it was forwarded.
	ToServer func(chunk []byte)
	// ToClient sees each chunk the server sent, before it is forwarded.
	ToClient func(chunk []byte)
	// FilterToClient, when set, returns what to forward of each chunk the
	// server sent (after ToClient saw it): fewer bytes to hold some back,
	// more to send what it held. It must not keep chunk.
	FilterToClient func(chunk []byte) []byte
	// KeepServerOpen, asked when the client's side ends, leaves the
	// server's connection open when it answers true (for the server's
	// answer to arrive, seen by ToClient, which may then close it).
	KeepServerOpen func() bool
}

// Conn is one relayed connection: the client's side and the server's.
type Conn struct {
	Client, Server net.Conn
}

// Options tunes New.
type Options struct {
	// NewConn, when set, gives the hooks of each new connection.
	NewConn func(Conn) Hooks
}

// Proxy relays a local address to a target.
type Proxy struct {
	target string
	opts   Options
	addr   string
	done   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	ln     net.Listener  // nil while Off
	open   chan struct{} // closed while both directions flow
	toSrv  chan struct{} // closed while the client's bytes flow (Freeze)
	conns  map[net.Conn]struct{}
	ports  map[int]bool // local ports of live server connections
	closed bool
}

// New listens on a free loopback port and relays each connection to target
// (host:port).
func New(target string, opts Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, opts: opts, addr: ln.Addr().String(), done: make(chan struct{}),
		open: make(chan struct{}), toSrv: make(chan struct{}), conns: map[net.Conn]struct{}{}, ports: map[int]bool{}}
	close(p.open)
	close(p.toSrv)
	p.serve(ln)
	return p, nil
}

// Addr is the address clients connect to instead of the target's.
func (p *Proxy) Addr() string { return p.addr }

// Blackhole holds every byte and close in both directions until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already black-holed
	}
}

// Freeze holds what clients send (their acks, their queries) until Heal,
// while the server's bytes still reach them.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.toSrv:
		p.toSrv = make(chan struct{})
	default:
	}
}

// Heal ends Blackhole and Freeze: what waited flows first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range []chan struct{}{p.open, p.toSrv} {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
}

// Cut closes every relayed connection (new ones are still accepted).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Off stops listening and closes every relayed connection: connections are
// refused until On.
func (p *Proxy) Off() {
	p.mu.Lock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	p.mu.Unlock()
	p.Cut()
}

// On listens again on the proxy's address after Off.
func (p *Proxy) On() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("faultproxy: closed")
	}
	if p.ln != nil {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// UpstreamPorts are the local ports of the proxy's live connections to the
// target (for PostgreSQL: pg_stat_activity.client_port of its sessions).
func (p *Proxy) UpstreamPorts() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, 0, len(p.ports))
	for port := range p.ports {
		out = append(out, port)
	}
	return out
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. Safe to call twice.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
}

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		port := up.LocalAddr().(*net.TCPAddr).Port
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		p.conns[c], p.conns[up], p.ports[port] = struct{}{}, struct{}{}, true
		p.mu.Unlock()
		var h Hooks
		if p.opts.NewConn != nil {
			h = p.opts.NewConn(Conn{Client: c, Server: up})
		}
		var pair sync.WaitGroup
		pair.Add(2)
		p.wg.Go(func() {
			pair.Wait()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, up)
			delete(p.ports, port)
			p.mu.Unlock()
		})
		p.wg.Go(func() {
			defer pair.Done()
			p.pipe(up, c, true, nil, nil, h.ToServer, h.KeepServerOpen)
		})
		p.wg.Go(func() {
			defer pair.Done()
			p.pipe(c, up, false, h.ToClient, h.FilterToClient, nil, nil)
		})
	}
}

// gate blocks while the direction is held; false once the proxy closes.
func (p *Proxy) gate(toServer bool) bool {
	p.mu.Lock()
	open, toSrv := p.open, p.toSrv
	p.mu.Unlock()
	for _, ch := range []chan struct{}{open, toSrv} {
		if ch == toSrv && !toServer {
			continue
		}
		select {
		case <-ch:
		case <-p.done:
			return false
		}
	}
	return true
}

// pipe copies src to dst, holding every chunk (and the end of the stream)
// while its direction is held. peek sees a chunk before it is forwarded,
// filter says what of it to forward, after sees it once forwarded;
// keepDst, at the end, leaves dst open.
func (p *Proxy) pipe(dst, src net.Conn, toServer bool, peek func([]byte), filter func([]byte) []byte, after func([]byte), keepDst func() bool) {
	buf := make([]byte, 32<<10)
	for {
		if !p.gate(toServer) {
			break
		}
		n, err := src.Read(buf)
		if n > 0 {
			if peek != nil {
				peek(buf[:n])
			}
			if !p.gate(toServer) {
				break
			}
			out := buf[:n]
			if filter != nil {
				out = filter(out)
			}
			if _, werr := dst.Write(out); len(out) > 0 && werr != nil {
				break
			}
			if after != nil {
				after(buf[:n])
			}
		}
		if err != nil { // EOF, reset or closed: end both directions
			break
		}
	}
	p.gate(toServer)
	if keepDst == nil || !keepDst() {
		_ = dst.Close()
	}
	_ = src.Close()
}
