package listener

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("StartListensAndStopStops", func(t *testing.T) {
		t.Parallel()
		l := New("test", "127.0.0.1:0")
		require.Nil(t, l.Addr())
		stopped := make(chan struct{})
		require.NoError(t, l.Start(context.Background(), func(lis net.Listener) func() {
			return func() { _ = lis.Close(); close(stopped) }
		}))
		require.NotNil(t, l.Addr())
		require.EqualError(t, l.Start(context.Background(), nil), "test: server already started")
		l.Stop()
		<-stopped
		require.EqualError(t, l.Start(context.Background(), nil), "test: server stopped")
	})

	t.Run("ListenErrorNamesServerAndAddress", func(t *testing.T) {
		t.Parallel()
		l := New("test", "127.0.0.1:-1")
		err := l.Start(context.Background(), nil)
		require.ErrorContains(t, err, "test: error listening on 127.0.0.1:-1: ")
		l.Stop()
	})

	t.Run("ServeTakesTheCallersListener", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		l := New("test", "")
		require.NoError(t, l.Serve(lis, func(lis net.Listener) func() { return func() { _ = lis.Close() } }))
		require.Equal(t, lis.Addr(), l.Addr())
		l.Stop()
		require.EqualError(t, l.Serve(lis, nil), "test: server stopped")
	})
}
