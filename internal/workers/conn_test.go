package workers

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	conn, err := dialBuffered("tcp", ln.Addr().String())
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
