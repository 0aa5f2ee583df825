package faultproxy

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers each line with the same line, and counts the lines it
// received.
type echoServer struct {
	ln    net.Listener
	mu    sync.Mutex
	lines int
	wg    sync.WaitGroup
}

func newEchoServer(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					s.mu.Lock()
					s.lines++
					s.mu.Unlock()
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *echoServer) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lines
}

func newProxy(t *testing.T, target string, opts Options) *Proxy {
	t.Helper()
	p, err := New(target, opts)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, bufio.NewReader(c)
}

// readLine reads one line within d, or reports that none came.
func readLine(c net.Conn, r *bufio.Reader, d time.Duration) (string, bool) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	line, err := r.ReadString('\n')
	return line, err == nil
}

// A black hole holds bytes both ways without closing anything, and Heal
// delivers what waited.
func TestBlackholeHoldsThenHeals(t *testing.T) {
	srv := newEchoServer(t)
	p := newProxy(t, srv.ln.Addr().String(), Options{})
	c, r := dial(t, p)
	_, err := io.WriteString(c, "one\n")
	require.NoError(t, err)
	line, ok := readLine(c, r, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, "one\n", line)

	p.Blackhole()
	_, err = io.WriteString(c, "two\n")
	require.NoError(t, err)
	_, ok = readLine(c, r, 200*time.Millisecond)
	require.False(t, ok, "an answer through the black hole")
	require.Equal(t, 1, srv.received(), "the server got a line through the black hole")

	p.Heal()
	line, ok = readLine(c, r, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, "two\n", line)
}

// Freeze holds what the client sends while the server's side flows.
func TestFreezeHoldsTheClientsSideOnly(t *testing.T) {
	srv := newEchoServer(t)
	p := newProxy(t, srv.ln.Addr().String(), Options{})
	c, r := dial(t, p)
	_, err := io.WriteString(c, "one\n")
	require.NoError(t, err)
	// Freeze while the answer may still be on its way: it arrives anyway.
	require.Eventually(t, func() bool { return srv.received() == 1 }, 5*time.Second, time.Millisecond)
	p.Freeze()
	line, ok := readLine(c, r, 5*time.Second)
	require.True(t, ok, "the server's side is held too")
	require.Equal(t, "one\n", line)
	_, err = io.WriteString(c, "two\n")
	require.NoError(t, err)
	_, ok = readLine(c, r, 200*time.Millisecond)
	require.False(t, ok)
	require.Equal(t, 1, srv.received())
	p.Heal()
	line, ok = readLine(c, r, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, "two\n", line)
}

// Cut closes the connections but accepts new ones; Off refuses them until
// On, on the same address.
func TestCutOffOn(t *testing.T) {
	srv := newEchoServer(t)
	p := newProxy(t, srv.ln.Addr().String(), Options{})
	c, r := dial(t, p)
	_, err := io.WriteString(c, "one\n")
	require.NoError(t, err)
	_, ok := readLine(c, r, 5*time.Second)
	require.True(t, ok)
	require.Len(t, p.UpstreamPorts(), 1)

	p.Cut()
	_, err = r.ReadString('\n')
	require.ErrorIs(t, err, io.EOF)
	c2, r2 := dial(t, p)
	_, err = io.WriteString(c2, "two\n")
	require.NoError(t, err)
	_, ok = readLine(c2, r2, 5*time.Second)
	require.True(t, ok)

	p.Off()
	_, err = r2.ReadString('\n')
	require.ErrorIs(t, err, io.EOF)
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	require.Error(t, err, "a connection while off")

	require.NoError(t, p.On())
	c3, r3 := dial(t, p)
	_, err = io.WriteString(c3, "three\n")
	require.NoError(t, err)
	line, ok := readLine(c3, r3, 5*time.Second)
	require.True(t, ok)
	require.Equal(t, "three\n", line)
}

// Hooks see each direction's bytes (the chaos suite's commit cut uses
// KeepServerOpen too).
func TestHooks(t *testing.T) {
	srv := newEchoServer(t)
	var mu sync.Mutex
	var toServer, toClient []string
	p := newProxy(t, srv.ln.Addr().String(), Options{NewConn: func(Conn) Hooks {
		return Hooks{
			ToServer: func(b []byte) { mu.Lock(); toServer = append(toServer, string(b)); mu.Unlock() },
			ToClient: func(b []byte) { mu.Lock(); toClient = append(toClient, string(b)); mu.Unlock() },
		}
	}})
	c, r := dial(t, p)
	_, err := io.WriteString(c, "ping\n")
	require.NoError(t, err)
	_, ok := readLine(c, r, 5*time.Second)
	require.True(t, ok)
	// ToServer runs after the chunk was forwarded: the echo can reach the
	// client before the hook has run.
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(toServer) > 0 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"ping\n"}, toServer)
	require.Equal(t, []string{"ping\n"}, toClient)
}
