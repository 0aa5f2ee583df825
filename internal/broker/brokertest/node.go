// Package brokertest stands in for RabbitMQ nodes in tests: a Node is a
// loopback address that forwards to the real broker (internal/faultproxy)
// and can be lost, black-holed or stalled on demand without touching the
// broker. It is for tests only.
package brokertest

import (
	"encoding/binary"
	"net/url"
	"sync"
	"testing"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/platformd/platformd/internal/faultproxy"
)

// URL is the broker the tests use: TEST_AMQP_URL, else the local one.
func URL() string {
	return testenv.AMQPURL()
}

// Target is the host:port of URL.
func Target(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	return u.Host
}

// Node is one node of a cluster as its clients see it. Safe for concurrent
// use.
type Node struct {
	t     testing.TB
	proxy *faultproxy.Proxy

	mu      sync.Mutex
	stalled bool
}

// NewNode starts a node forwarding to target (host:port); it is closed when
// the test ends.
func NewNode(t testing.TB, target string) *Node {
	t.Helper()
	n := &Node{t: t}
	p, err := faultproxy.New(target, faultproxy.Options{NewConn: func(faultproxy.Conn) faultproxy.Hooks {
		var f frameHold
		return faultproxy.Hooks{FilterToClient: func(chunk []byte) []byte { return f.filter(chunk, n.isStalled()) }}
	}})
	if err != nil {
		t.Fatalf("brokertest: %v", err)
	}
	n.proxy = p
	t.Cleanup(p.Close)
	return n
}

// Addr is the node's host:port.
func (n *Node) Addr() string { return n.proxy.Addr() }

// URL is the broker's URL with this node's host and port.
func (n *Node) URL() string {
	u, err := url.Parse(URL())
	if err != nil {
		n.t.Fatalf("brokertest: %v", err)
	}
	u.Host = n.proxy.Addr()
	return u.String()
}

// Hole stops forwarding in both directions, closing nothing: what a
// black-holed node is to its peers (a partition, a dead host without a
// RST). Bytes sent meanwhile wait and flow again at Heal.
func (n *Node) Hole() { n.proxy.Blackhole() }

// Heal forwards again.
func (n *Node) Heal() { n.proxy.Heal() }

// Stall holds every frame the broker sends but heartbeats: what a node
// that is cut off from its cluster, or stuck, can be to its clients for as
// long as it does not pause: its connection processes answer nothing that
// needs the cluster, while its heartbeats keep every read deadline of the
// client's alive. Unstall sends what was held, with the next frame.
func (n *Node) Stall() { n.setStalled(true) }

// Unstall ends Stall.
func (n *Node) Unstall() { n.setStalled(false) }

// Down loses the node: its connections are cut and new ones refused.
func (n *Node) Down() { n.proxy.Off() }

// Up brings the node back on the same address.
func (n *Node) Up() {
	if err := n.proxy.On(); err != nil {
		n.t.Fatalf("brokertest: %v", err)
	}
}

func (n *Node) setStalled(v bool) {
	n.mu.Lock()
	n.stalled = v
	n.mu.Unlock()
}

func (n *Node) isStalled() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stalled
}

// frameHold cuts the broker's side of one connection into AMQP 0-9-1
// frames (type, channel, size, payload, frame end) across chunks, and
// holds all but heartbeat frames while stalled.
type frameHold struct {
	buf  []byte // bytes of a frame not complete yet
	held []byte // whole frames held while stalled
}

// filter returns what to forward of chunk now.
func (f *frameHold) filter(chunk []byte, stalled bool) []byte {
	f.buf = append(f.buf, chunk...)
	var out []byte
	for len(f.buf) >= 7 {
		size := int(binary.BigEndian.Uint32(f.buf[3:7]))
		if len(f.buf) < 7+size+1 {
			break
		}
		frame := f.buf[:7+size+1]
		switch {
		case stalled && frame[0] != 8: // 8: heartbeat
			f.held = append(f.held, frame...)
		default:
			if len(f.held) > 0 && !stalled {
				out = append(out, f.held...)
				f.held = nil
			}
			out = append(out, frame...)
		}
		f.buf = f.buf[7+size+1:]
	}
	f.buf = append([]byte(nil), f.buf...) // keep no alias of out's source
	return out
}
