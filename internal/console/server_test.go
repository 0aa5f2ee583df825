package console_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/console"
)

func newServer(t *testing.T) *console.Server {
	t.Helper()
	s, err := console.NewServer(console.Config{
		Listen: "127.0.0.1:0",
		Tokens: []admin.Token{{Name: "ops", Role: admin.RoleAdmin, Value: adminToken}},
	}, admintest.New(), nil)
	require.NoError(t, err)
	return s
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	s := newServer(t)
	s.Stop() // before Start
	s.Stop()
	require.ErrorContains(t, s.Start(ctx), "console: server stopped")

	s = newServer(t)
	require.Nil(t, s.Addr())
	require.NoError(t, s.Start(ctx))
	require.ErrorContains(t, s.Start(ctx), "already started")
	resp, err := http.Get("http://" + s.Addr().String() + "/login") //nolint:noctx // test
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `name="token"`)
	s.Stop()
	s.Stop()
	_, err = http.Get("http://" + s.Addr().String() + "/login") //nolint:noctx // test
	require.Error(t, err, "stopped: nothing listens")
}

func TestServerConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := console.NewServer(console.Config{}, admintest.New(), nil)
	require.ErrorContains(t, err, "no listen address")
	_, err = console.NewServer(console.Config{Listen: "127.0.0.1:0", TLS: admin.TLSConfig{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}}, admintest.New(), nil)
	require.ErrorContains(t, err, "tls")
	_, err = console.NewServer(console.Config{Listen: "127.0.0.1:0", Tokens: []admin.Token{{Name: "x", Role: "root", Value: "v"}}}, admintest.New(), nil)
	require.ErrorContains(t, err, "role")
	_, err = console.NewServer(console.Config{Listen: "127.0.0.1:0"}, nil, nil)
	require.ErrorContains(t, err, "nil backend")
}
