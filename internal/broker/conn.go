package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/startstop"
)

// Dial timeouts: a node that does not answer must not hold a failover to
// the next one for long, while a loaded broker gets the library's usual
// time to complete the AMQP handshake.
const (
	DialConnectTimeoutDefault   = 5 * time.Second
	DialHandshakeTimeoutDefault = 30 * time.Second
)

// HeartbeatDefault is the heartbeat interval asked of the broker. It is
// also how a broker that stops answering without closing anything (a
// partition, a host gone without a RST) is found out: amqp091-go's reads
// time out once no frame, heartbeats included, came for one and a half
// intervals (three of its half-interval ticks: 15 s at the default), and
// the connection ends, which ends every call blocked on it; the library's
// writes and closes have no deadline of their own.
const HeartbeatDefault = 10 * time.Second

// CloseTimeoutDefault bounds Close and a pool's abort of its connection:
// after it the socket itself is closed. The library's Close waits for the
// broker's close-ok, and a node that is cut off from its cluster, or stuck,
// may answer nothing while its heartbeats keep the connection's read
// deadline alive: the wait would last until it recovers.
const CloseTimeoutDefault = 5 * time.Second

// Conn hands out a live AMQP connection to one node of a broker cluster,
// dialling a fresh one whenever the previous one is closed. The first dial
// starts at a node chosen at random (so that connections and daemons
// spread over the cluster); after a loss the next node is tried first;
// each dial tries every node once in turn, and a round in which none
// answers is followed by a wait with exponential backoff and jitter. It is
// safe for concurrent use: callers that find the connection dead wait for
// one redial.
type Conn struct {
	nodes  []brokerNode
	name   string
	logger *slog.Logger
	// OnReconnectFunc, when set, is called after each successful redial
	// (not the first dial): the pool consuming on the connection counts
	// its reconnects with it. Set before the connection is shared.
	OnReconnectFunc func()

	testSignals ConnTestSignals

	connected *prometheus.GaugeVec // nil: no metrics
	node      atomic.Pointer[string]
	// nodeMu orders the node and gauge updates of a connection coming up
	// with those of an older one going down.
	nodeMu sync.Mutex

	// lock is held (a token in it) by whoever dials or reads conn: a
	// channel, not a mutex, so that a caller waiting behind a redial that
	// lasts as long as the broker is down gives up at its own deadline.
	lock chan struct{}
	// sock is the socket under the current connection, for Abort and a
	// bounded Close; read without the lock, so that an abort does not wait
	// behind a caller blocked on the connection.
	sock atomic.Pointer[net.Conn]
	// done is closed by Close: a redial in progress gives up.
	done      chan struct{}
	closeOnce sync.Once

	conn   *amqp.Connection
	addr   string // node of conn
	next   int    // index into nodes of the next node to dial
	dialed bool
	closed bool
}

// brokerNode is one node's URL and the name logs and metrics give it:
// host:port, without credentials.
type brokerNode struct {
	url, addr string
}

// NewConn returns a Conn over the nodes at urls (one URL for a single
// broker); name is shown in the broker's management UI (connection_name),
// in logs and in the metrics' connection label. With m set, the gauge
// platformd_broker_connected{connection,node} is 1 for the node the
// connection is on and 0 for a node it left. An unparsable URL is kept and
// fails at dial time (config validation rejects them first).
func NewConn(urls []string, name string, m *metrics.Metrics, logger *slog.Logger) *Conn {
	c := &Conn{name: name, logger: logger, lock: make(chan struct{}, 1), done: make(chan struct{})}
	for _, u := range urls {
		c.nodes = append(c.nodes, brokerNode{url: u, addr: nodeAddr(u)})
	}
	if len(c.nodes) > 1 {
		c.next = rand.IntN(len(c.nodes))
	}
	if m != nil {
		c.connected = m.BrokerConnected
	}
	empty := ""
	c.node.Store(&empty)
	return c
}

// nodeAddr names a node by its URL's host:port.
func nodeAddr(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "invalid-url"
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
}

// Node returns the host:port of the node the connection is on, or "" while
// it is not connected. It never waits for a dial in progress.
func (c *Conn) Node() string { return *c.node.Load() }

// Channel opens a channel of the caller's own on the current connection,
// dialling one first as Get does. The caller closes it; an error to open it
// is wrapped as "open channel", Get's are returned as they are.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	conn, err := c.Get(ctx)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	return ch, nil
}

// Get returns the current connection, or dials a new one, retrying with
// backoff until ctx ends.
func (c *Conn) Get(ctx context.Context) (*amqp.Connection, error) {
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.release()
	if c.closed {
		return nil, fmt.Errorf("amqp %s: closed", c.name)
	}
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	var backoff startstop.Backoff
	for {
		conn, err := c.dialRoundLocked(ctx)
		if err == nil {
			return conn, nil
		}
		wait := backoff.Next()
		c.logger.WarnContext(ctx, "workers: broker dial failed on every node", slog.String("connection", c.name),
			slog.Int("nodes", len(c.nodes)), slog.Any("error", err), slog.Duration("backoff", wait))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.done:
			return nil, fmt.Errorf("amqp %s: closed", c.name)
		case <-time.After(wait):
		}
	}
}

// acquire takes c.lock, or gives up when ctx ends first.
func (c *Conn) acquire(ctx context.Context) error {
	select {
	case c.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("amqp %s: waiting for a redial in progress: %w", c.name, ctx.Err())
	}
}

func (c *Conn) release() { <-c.lock }

// dialRoundLocked tries every node once, starting at c.next, and keeps
// the first connection made. After a success c.next points past the node
// connected to, so that the next dial (after this connection's loss)
// starts at another node. Its error holds every node's.
func (c *Conn) dialRoundLocked(ctx context.Context) (*amqp.Connection, error) {
	var errs []error
	for range c.nodes {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n := c.nodes[c.next]
		c.next = (c.next + 1) % len(c.nodes)
		conn, sock, err := c.dial(ctx, n)
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.addr, err))
			if len(c.nodes) > 1 {
				c.logger.WarnContext(ctx, "workers: broker node unreachable, trying the next", slog.String("connection", c.name),
					slog.String("node", n.addr), slog.Any("error", err))
			}
			continue
		}
		prev := c.addr
		c.conn, c.addr = conn, n.addr
		c.sock.Store(&sock)
		c.watch(conn, n.addr)
		if c.dialed {
			if c.OnReconnectFunc != nil {
				c.OnReconnectFunc()
			}
			c.testSignals.Reconnected.Signal(n.addr)
			c.logger.InfoContext(ctx, "workers: broker reconnected", slog.String("connection", c.name),
				slog.String("node", n.addr), slog.String("previous_node", prev))
		} else {
			c.logger.InfoContext(ctx, "workers: broker connected", slog.String("connection", c.name), slog.String("node", n.addr))
		}
		c.dialed = true
		return conn, nil
	}
	if len(errs) == 0 {
		errs = append(errs, errors.New("no broker node configured"))
	}
	return nil, errors.Join(errs...)
}

// dial connects to node n. The dial gives up when ctx ends, even in the
// middle of the AMQP handshake (a node that accepts connections but does
// not answer would otherwise hold a stopping pool for the whole handshake
// timeout).
func (c *Conn) dial(ctx context.Context, n brokerNode) (*amqp.Connection, net.Conn, error) {
	var stop func() bool
	var sock net.Conn
	conn, err := amqp.DialConfig(n.url, amqp.Config{
		Heartbeat:  HeartbeatDefault,
		Properties: amqp.Table{"connection_name": c.name},
		Dial: func(network, addr string) (net.Conn, error) {
			nc, err := dialBuffered(ctx, network, addr)
			if err == nil {
				sock = nc
				// A deadline in the past fails the handshake's reads and
				// writes at once.
				stop = context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
			}
			return nc, err
		},
	})
	if stop != nil && !stop() && err == nil {
		// ctx ended as the handshake completed: the deadline may have hit
		// the new connection.
		closeBounded(conn, sock)
		return nil, nil, ctx.Err()
	}
	if err != nil && ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	return conn, sock, err
}

// closeBounded closes conn, and its socket sock if the broker has not
// answered within CloseTimeoutDefault (see there).
func closeBounded(conn *amqp.Connection, sock net.Conn) {
	t := time.AfterFunc(CloseTimeoutDefault, func() { _ = sock.Close() })
	defer t.Stop()
	_ = conn.Close()
}

// Abort closes the current connection's socket at once, without the
// AMQP close handshake: every call blocked on the connection (a consumer's
// cancel, a channel's close, waiting for a broker that answers nothing)
// returns with an error, and the broker requeues what was unacked. The
// next Get dials again, unless Close was called. A pool aborts its
// connection when its soft stop times out.
func (c *Conn) Abort() {
	if p := c.sock.Load(); p != nil {
		_ = (*p).Close()
	}
}

// watch follows conn until it closes, so that Node and the gauge say at
// once that the connection is gone (not only at the next Get). The
// goroutine ends when the library closes the channel, which it does for
// every close, Close included.
func (c *Conn) watch(conn *amqp.Connection, addr string) {
	// A pointer of this connection's own: a late close of an older
	// connection must not clear a newer one's node, nor zero its gauge
	// when both are on the same node.
	mine := &addr
	c.nodeMu.Lock()
	c.node.Store(mine)
	if c.connected != nil {
		c.connected.WithLabelValues(c.name, addr).Set(1)
	}
	c.nodeMu.Unlock()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		e, ok := <-closed
		for ok {
			_, ok = <-closed
		}
		c.nodeMu.Lock()
		empty := ""
		c.node.CompareAndSwap(mine, &empty)
		if c.connected != nil && c.Node() != addr {
			c.connected.WithLabelValues(c.name, addr).Set(0)
		}
		c.nodeMu.Unlock()
		c.testSignals.Lost.Signal(addr)
		if e != nil {
			c.logger.Warn("workers: broker connection lost", slog.String("connection", c.name),
				slog.String("node", addr), slog.Any("error", e))
		}
	}()
}

// Close closes the current connection (within CloseTimeoutDefault: then
// its socket); later Gets fail, and a redial in progress gives up after
// its current round.
func (c *Conn) Close() {
	c.closeOnce.Do(func() { close(c.done) })
	c.lock <- struct{}{}
	defer c.release()
	c.closed = true
	if c.conn != nil {
		closeBounded(c.conn, *c.sock.Load()) // stored with c.conn
		c.conn = nil
	}
}

// readBufferSize is the read buffer under the library's own 4 KiB one.
const readBufferSize = 64 << 10

// dialBuffered dials as the library does by default, but gives up on a
// TCP connect after DialConnectTimeoutDefault (the library waits 30 s,
// which a failover to the next node should not), and reads through a
// readBufferSize buffer. amqp091-go reads frames through a 4 KiB
// bufio.Reader: under load a read system call every few deliveries, 9% of
// the daemon's CPU in the bench profile. A buffered read returns what has
// arrived without waiting for more, so it adds no latency.
func dialBuffered(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: DialConnectTimeoutDefault}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	// The library clears the deadline once the handshake is done.
	if err := conn.SetDeadline(time.Now().Add(DialHandshakeTimeoutDefault)); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &bufferedConn{Conn: conn, r: bufio.NewReaderSize(conn, readBufferSize)}, nil
}

// bufferedConn is a net.Conn whose reads go through a buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read reads from the buffer, filling it with one read of the connection
// when it is empty.
func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
