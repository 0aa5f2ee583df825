package admin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

func TestPanicRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.backend.SetHook("PausePool", func(context.Context) error {
		panic("kaboom: backend invariant broken")
	})

	_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: "r"})
	st := requireCode(t, err, codes.Internal)
	require.Equal(t, "internal error", st.Message())
	require.NotContains(t, st.Message(), "kaboom")
	require.Empty(t, st.Details())

	// The server still serves.
	_, err = b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
	require.NoError(t, err)

	logs := b.logs.String()
	require.Contains(t, logs, "admin: panic in handler")
	require.Contains(t, logs, "kaboom: backend invariant broken")
	require.Contains(t, logs, "goroutine", "the stack is logged")
	require.Contains(t, logs, "/platform.admin.v1.AdminService/PausePool")
	require.NotContains(t, logs, adminTokenValue)
	require.NotContains(t, logs, readTokenValue)
}

func TestUnknownErrorLogged(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	b.backend.SetHook("GetHorizon", func(context.Context) error { return errors.New("connection refused to db-7") })

	_, err := b.client.GetHorizon(asReader(t), &adminv1.GetHorizonRequest{Service: "stock"})
	st := requireCode(t, err, codes.Internal)
	require.Equal(t, "internal error", st.Message())
	require.Contains(t, b.logs.String(), "connection refused to db-7")
}

func TestLogging(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events"})
	require.NoError(t, err)
	_, err = b.client.ListServices(withToken(t, "a-wrong-token-value"), &adminv1.ListServicesRequest{})
	requireCode(t, err, codes.Unauthenticated)

	logs := b.logs.String()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	var pause, unauth string
	for _, l := range lines {
		switch {
		case strings.Contains(l, "grpc.method=PausePool"):
			pause = l
		case strings.Contains(l, "grpc.method=ListServices"):
			unauth = l
		}
	}
	require.Contains(t, pause, "admin: finished call")
	require.Contains(t, pause, "grpc.code=OK")
	require.Contains(t, pause, "actor=ops")
	require.Contains(t, pause, "grpc.time_ms=")
	require.Contains(t, unauth, "grpc.code=Unauthenticated")
	require.NotContains(t, unauth, "actor=")
	require.NotContains(t, logs, adminTokenValue)
	require.NotContains(t, logs, "a-wrong-token-value")
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	health := grpc_health_v1.NewHealthClient(b.conn)

	for _, service := range []string{"", "platform.admin.v1.AdminService"} {
		resp, err := health.Check(t.Context(), &grpc_health_v1.HealthCheckRequest{Service: service})
		require.NoError(t, err)
		require.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, resp.GetStatus(), service)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	watch, err := health.Watch(ctx, &grpc_health_v1.HealthCheckRequest{Service: "platform.admin.v1.AdminService"})
	require.NoError(t, err)
	resp, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, resp.GetStatus())

	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		b.server.Stop()
	}()
	resp, err = watch.Recv()
	require.NoError(t, err)
	require.Equal(t, grpc_health_v1.HealthCheckResponse_NOT_SERVING, resp.GetStatus(), "NOT_SERVING before the server goes away")
	cancel() // end the watch so that GracefulStop need not wait for it
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return")
	}
}

func TestReflection(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	services, err := listReflectionServices(t, b.conn)
	require.NoError(t, err, "reflection needs no token")
	require.Contains(t, services, "platform.admin.v1.AdminService")
	require.Contains(t, services, "grpc.health.v1.Health")

	require.Contains(t, listReflectionServicesV1Alpha(t, b.conn), "platform.admin.v1.AdminService")
}

// listReflectionServicesV1Alpha lists the services through the deprecated
// reflection v1alpha API, which older grpcurl versions still use.
//
//nolint:staticcheck // v1alpha is deprecated, and served on purpose.
func listReflectionServicesV1Alpha(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	stream, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
	require.NoError(t, err)
	require.NoError(t, stream.Send(&reflectionv1alpha.ServerReflectionRequest{
		MessageRequest: &reflectionv1alpha.ServerReflectionRequest_ListServices{},
	}))
	resp, err := stream.Recv()
	require.NoError(t, err)
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	require.NoError(t, stream.CloseSend())
	return names
}

// listReflectionServices lists the services through reflection v1, without
// a token.
func listReflectionServices(t *testing.T, conn *grpc.ClientConn) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflectionv1.ServerReflectionRequest{
		MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{},
	}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// io.EOF from Send: the server has already ended the stream (a
	// refused token is answered before any message is read); its status
	// is what Recv returns (grpc.ClientStream.SendMsg's doc).
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, stream.CloseSend()
}

func TestOversizedRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{
		Pool: "stock-events", Reason: strings.Repeat("x", admin.MaxRecvMsgSize+1),
	})
	requireCode(t, err, codes.ResourceExhausted)
	require.Empty(t, b.backend.Calls())

	_, err = b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
	require.NoError(t, err, "the connection still serves")
}

func TestTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	cfg := &admin.ServerConfig{
		Tokens: defaultTokens(),
		TLS:    admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey},
	}

	t.Run("TLSClient", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{cfg: cfg, clientOpts: []grpc.DialOption{pki.clientTLS(t, false)}})
		_, err := b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
		require.NoError(t, err)
	})

	t.Run("PlaintextClientRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{cfg: cfg})
		ctx, cancel := context.WithTimeout(asReader(t), 5*time.Second)
		defer cancel()
		_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
		requireCode(t, err, codes.Unavailable)
		require.Empty(t, b.backend.Calls())
	})
}

func TestMTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	cfg := &admin.ServerConfig{
		Tokens: defaultTokens(),
		TLS:    admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile},
	}

	t.Run("ClientCert", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{cfg: cfg, clientOpts: []grpc.DialOption{pki.clientTLS(t, true)}})
		_, err := b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
		require.NoError(t, err)
	})

	t.Run("NoClientCertRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{cfg: cfg, clientOpts: []grpc.DialOption{pki.clientTLS(t, false)}})
		ctx, cancel := context.WithTimeout(asReader(t), 5*time.Second)
		defer cancel()
		_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
		requireCode(t, err, codes.Unavailable)
		require.Empty(t, b.backend.Calls())
	})

	t.Run("OtherCAClientCertRefused", func(t *testing.T) {
		t.Parallel()
		other := newTestPKI(t)
		// Trust the server's CA but present a certificate of another CA.
		cfgClient := &testPKI{caPool: pki.caPool, clientCert: other.clientCert, clientKey: other.clientKey}
		b := setup(t, setupOpts{cfg: cfg, clientOpts: []grpc.DialOption{cfgClient.clientTLS(t, true)}})
		ctx, cancel := context.WithTimeout(asReader(t), 5*time.Second)
		defer cancel()
		_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
		requireCode(t, err, codes.Unavailable)
	})
}

func TestNewServerErrors(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	backend := admintest.New()

	for name, cfg := range map[string]admin.ServerConfig{
		"EmptyTokenName":   {Tokens: []admin.Token{{Role: admin.RoleAdmin, Value: "v"}}},
		"DuplicateName":    {Tokens: []admin.Token{{Name: "a", Role: admin.RoleAdmin, Value: "v1"}, {Name: "a", Role: admin.RoleRead, Value: "v2"}}},
		"DuplicateValue":   {Tokens: []admin.Token{{Name: "a", Role: admin.RoleAdmin, Value: "v"}, {Name: "b", Role: admin.RoleRead, Value: "v"}}},
		"BadRole":          {Tokens: []admin.Token{{Name: "a", Role: "root", Value: "v"}}},
		"EmptyValue":       {Tokens: []admin.Token{{Name: "a", Role: admin.RoleRead}}},
		"SpaceInValue":     {Tokens: []admin.Token{{Name: "a", Role: admin.RoleRead, Value: "a b"}}},
		"CertWithoutKey":   {TLS: admin.TLSConfig{CertFile: pki.serverCert}},
		"CAWithoutCert":    {TLS: admin.TLSConfig{ClientCAFile: pki.caFile}},
		"MissingCertFile":  {TLS: admin.TLSConfig{CertFile: pki.serverCert + ".missing", KeyFile: pki.serverKey}},
		"CAFileNotPEM":     {TLS: admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.serverKey}},
		"MissingClientCA":  {TLS: admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile + ".missing"}},
		"KeyOfAnotherCert": {TLS: admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.clientKey}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := admin.NewServer(cfg, backend, nil)
			require.Error(t, err)
		})
	}

	_, err := admin.NewServer(admin.ServerConfig{}, nil, nil)
	require.Error(t, err)
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("StopBeforeStartAndTwice", func(t *testing.T) {
		t.Parallel()
		server, err := admin.NewServer(admin.ServerConfig{Listen: "127.0.0.1:0"}, admintest.New(), nil)
		require.NoError(t, err)
		require.Nil(t, server.Addr())
		server.Stop()
		server.Stop()
		require.Error(t, server.Start(t.Context()), "no start after Stop")
	})

	t.Run("StartTwice", func(t *testing.T) {
		t.Parallel()
		server, err := admin.NewServer(admin.ServerConfig{Listen: "127.0.0.1:0"}, admintest.New(), nil)
		require.NoError(t, err)
		require.NoError(t, server.Start(t.Context()))
		defer server.Stop()
		require.Error(t, server.Start(t.Context()))
		require.NotNil(t, server.Addr())
	})

	t.Run("StartListenError", func(t *testing.T) {
		t.Parallel()
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer lis.Close()
		server, err := admin.NewServer(admin.ServerConfig{Listen: lis.Addr().String()}, admintest.New(), nil)
		require.NoError(t, err)
		defer server.Stop()
		require.Error(t, server.Start(t.Context()))
	})

	t.Run("Serve", func(t *testing.T) {
		t.Parallel()
		server, err := admin.NewServer(admin.ServerConfig{Tokens: defaultTokens()}, admintest.New(), nil)
		require.NoError(t, err)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		served := make(chan error, 1)
		go func() { served <- server.Serve(lis) }()

		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		_, err = adminv1.NewAdminServiceClient(conn).ListServices(asReader(t), &adminv1.ListServicesRequest{})
		require.NoError(t, err)
		require.Equal(t, lis.Addr().String(), server.Addr().String())

		server.Stop()
		require.NoError(t, <-served)
	})

	t.Run("StopCutsOffSlowCalls", func(t *testing.T) {
		t.Parallel()
		backend := admintest.New()
		entered := make(chan struct{})
		backend.SetHook("RunPurge", func(ctx context.Context) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		})
		server, err := admin.NewServer(admin.ServerConfig{
			Listen: "127.0.0.1:0", Tokens: defaultTokens(), StopTimeout: 100 * time.Millisecond,
		}, backend, nil)
		require.NoError(t, err)
		require.NoError(t, server.Start(t.Context()))
		conn, err := grpc.NewClient(server.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()

		callErr := make(chan error, 1)
		go func() {
			_, err := adminv1.NewAdminServiceClient(conn).RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{Service: "stock"})
			callErr <- err
		}()
		<-entered
		start := time.Now()
		server.Stop()
		require.Less(t, time.Since(start), 5*time.Second)
		require.Error(t, <-callErr)
	})
}
