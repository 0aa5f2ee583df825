package broker

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/broker/brokertest"
	"github.com/platformd/platformd/internal/metrics"
)

// The read buffer under the library's returns what has arrived at once:
// a frame is not held back waiting for the buffer to fill, and bytes that
// arrived together are served from the buffer without another read.
func TestDialBufferedReadsWhatHasArrived(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	conn, err := dialBuffered(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	require.IsType(t, &bufferedConn{}, conn)
	server := <-accepted
	defer func() { _ = server.Close() }()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))

	_, err = server.Write([]byte("frame-one|frame-two"))
	require.NoError(t, err)
	buf := make([]byte, 4096)
	n, err := io.ReadAtLeast(conn, buf, len("frame-one|frame-two"))
	require.NoError(t, err)
	require.Equal(t, "frame-one|frame-two", string(buf[:n]))

	// A short frame alone is delivered, not held for company.
	_, err = server.Write([]byte("hb"))
	require.NoError(t, err)
	n, err = conn.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "hb", string(buf[:n]))

	// Writes pass straight through.
	_, err = conn.Write([]byte("ack"))
	require.NoError(t, err)
	require.NoError(t, server.SetReadDeadline(time.Now().Add(10*time.Second)))
	got := make([]byte, 3)
	_, err = io.ReadFull(server, got)
	require.NoError(t, err)
	require.Equal(t, "ack", string(got))
}

func connectedGauge(t *testing.T, m *metrics.Metrics, conn, node string) float64 {
	t.Helper()
	g, err := m.BrokerConnected.GetMetricWithLabelValues(conn, node)
	require.NoError(t, err)
	var out dto.Metric
	require.NoError(t, g.Write(&out))
	return out.GetGauge().GetValue()
}

// Connections start at a node chosen at random, so that the connections
// of several daemons spread over a cluster.
func TestConnStartsAtRandomNode(t *testing.T) {
	t.Parallel()
	urls := []string{"amqp://guest:guest@10.0.0.1:5672/", "amqp://guest:guest@10.0.0.2:5672/", "amqp://guest:guest@10.0.0.3:5672/"}
	seen := map[int]int{}
	for range 90 {
		seen[NewConn(urls, "t", nil, slog.New(slog.DiscardHandler)).next]++
	}
	require.Len(t, seen, 3, "start nodes over 90 connections: %v", seen)
	for i, n := range seen {
		require.Greater(t, n, 5, "node %d chosen %d times of 90", i, n)
	}
	c := NewConn(urls[:1], "t", nil, slog.New(slog.DiscardHandler))
	require.Equal(t, 0, c.next)
	require.Equal(t, "10.0.0.1:5672", c.nodes[0].addr)
	require.Empty(t, c.Node(), "not connected yet")
}

// A node that refuses is skipped; a lost connection moves to the next
// node, not back to the same one; Node and the gauge follow; when every
// node is down Get waits with backoff and connects to the first that
// comes back.
func TestConnFailsOverToTheNextNode(t *testing.T) {
	t.Parallel()
	target := brokertest.Target(t)
	a, b, c := brokertest.NewNode(t, target), brokertest.NewNode(t, target), brokertest.NewNode(t, target)
	a.Down()
	m := metrics.New()
	conn := NewConn([]string{a.URL(), b.URL(), c.URL()}, "test-failover", m, slog.New(slog.DiscardHandler))
	defer conn.Close()
	conn.next = 0 // deterministic: a first
	sig := conn.TestSignals()
	sig.Reconnected.Init(t)
	sig.Lost.Init(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c1, err := conn.Get(ctx)
	require.NoError(t, err)
	require.Equal(t, b.Addr(), conn.Node(), "a refuses: b")
	require.InDelta(t, 1.0, connectedGauge(t, m, "test-failover", b.Addr()), 0)
	again, err := conn.Get(ctx)
	require.NoError(t, err)
	require.Same(t, c1, again, "a live connection is handed out again")
	sig.Reconnected.RequireEmpty()

	b.Down()
	require.Equal(t, b.Addr(), sig.Lost.WaitOrTimeout())
	require.Empty(t, conn.Node(), "Node says at once that the connection is gone")
	require.InDelta(t, 0.0, connectedGauge(t, m, "test-failover", b.Addr()), 0)
	b.Up() // back already: the next node is still c
	c2, err := conn.Get(ctx)
	require.NoError(t, err)
	require.NotSame(t, c1, c2)
	require.Equal(t, c.Addr(), conn.Node(), "after b's loss: the next node, c")
	require.InDelta(t, 1.0, connectedGauge(t, m, "test-failover", c.Addr()), 0)
	require.Equal(t, c.Addr(), sig.Reconnected.WaitOrTimeout())
	sig.Reconnected.RequireEmpty()
	ch, err := c2.Channel()
	require.NoError(t, err, "a real broker behind the new node")
	require.NoError(t, ch.Close())

	// Every node down: Get waits (backoff) until one is back.
	c.Down()
	b.Down()
	require.Equal(t, c.Addr(), sig.Lost.WaitOrTimeout())
	require.Empty(t, conn.Node())
	go func() {
		time.Sleep(500 * time.Millisecond) //nolint:forbidigo // the scenario: a node back after half a second, which Get must wait for
		a.Up()
	}()
	start := time.Now()
	c3, err := conn.Get(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	require.Equal(t, a.Addr(), conn.Node())
	require.Equal(t, a.Addr(), sig.Reconnected.WaitOrTimeout())
	require.NoError(t, c3.Close())
	require.Equal(t, a.Addr(), sig.Lost.WaitOrTimeout())
	require.Empty(t, conn.Node())

	// Closed: Get fails and no longer dials.
	conn.Close()
	_, err = conn.Get(ctx)
	require.ErrorContains(t, err, "closed")
}

// A node that accepts connections and never answers (a VM frozen, a
// process stuck) does not hold a caller past its context: a stopping pool
// must not wait for the handshake timeout.
func TestConnDialHonoursContextMidHandshake(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var held sync.WaitGroup
	var mu sync.Mutex
	var accepted []net.Conn
	held.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	defer func() {
		_ = ln.Close()
		held.Wait()
		mu.Lock()
		for _, c := range accepted {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	conn := NewConn([]string{"amqp://guest:guest@" + ln.Addr().String() + "/"}, "test-silent", nil, slog.New(slog.DiscardHandler))
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = conn.Get(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 3*time.Second, "the dial waited for the handshake timeout")
	mu.Lock()
	n := len(accepted)
	mu.Unlock()
	require.Positive(t, n, "the node was reached")
}

// While every node is down, one caller redials for as long as its context
// lasts; another caller, behind it, gives up at its own deadline instead of
// waiting for the broker, and Close ends the redial.
func TestConnGetHonoursItsDeadlineBehindARedial(t *testing.T) {
	t.Parallel()
	target := brokertest.Target(t)
	a := brokertest.NewNode(t, target)
	a.Down()
	conn := NewConn([]string{a.URL()}, "test-behind", nil, slog.New(slog.DiscardHandler))
	long, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := conn.Get(long)
		first <- err
	}()
	// The first caller holds the lock once its first round failed.
	require.Eventually(t, func() bool { return len(conn.lock) == 1 }, 10*time.Second, time.Millisecond)

	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	start := time.Now()
	_, err := conn.Get(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "waiting for a redial in progress")
	require.Less(t, time.Since(start), 2*time.Second, "the second caller waited past its deadline")

	start = time.Now()
	conn.Close()
	select {
	case err := <-first:
		require.ErrorContains(t, err, "closed")
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the redial")
	}
	require.Less(t, time.Since(start), 10*time.Second)
}

// Close and Abort are bounded on a node that answers nothing but
// heartbeats: the library's Close would wait for a close-ok for as long as
// the heartbeats keep its read deadline alive.
func TestConnCloseAndAbortOnAStalledNode(t *testing.T) {
	t.Parallel()
	node := brokertest.NewNode(t, brokertest.Target(t))
	conn := NewConn([]string{node.URL()}, "test-stalled", metrics.New(), slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := conn.Get(ctx)
	require.NoError(t, err)
	ch, err := c.Channel()
	require.NoError(t, err)
	node.Stall()
	defer node.Unstall()

	// A channel close waits for its close-ok: Abort ends it.
	closed := make(chan error, 1)
	go func() { closed <- ch.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("channel close on a stalled node returned at once (%v): the stall does not hold it", err)
	case <-time.After(500 * time.Millisecond):
	}
	conn.Abort()
	select {
	case err := <-closed:
		t.Logf("channel close after Abort: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("channel close still blocked 5s after Abort")
	}
	require.Eventually(t, c.IsClosed, 5*time.Second, 10*time.Millisecond, "Abort ends the connection")

	// The next Get dials again (the stall lifted, or the handshake's
	// answers would be held too); then Close on a stalled node.
	node.Unstall()
	c2, err := conn.Get(ctx)
	require.NoError(t, err)
	require.NotSame(t, c, c2)
	node.Stall()
	start := time.Now()
	conn.Close()
	took := time.Since(start)
	require.GreaterOrEqual(t, took, CloseTimeoutDefault-time.Second, "Close waits for the close-ok first")
	require.Less(t, took, CloseTimeoutDefault+2*time.Second, "then closes the socket")
	require.True(t, c2.IsClosed())
}
