package admin_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testlog"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

// Token values of the default test configuration. They must never appear
// in logs.
const (
	adminTokenValue = "adm-7f3c9e1d2b4a6f8e0c1d3b5a7f9e1c3d"
	readTokenValue  = "rd-2e4c6a8f0b1d3e5c7a9f1b3d5e7c9a1f"
)

// defaultTokens are an admin token "ops" and a read token "dashboards".
func defaultTokens() []admin.Token {
	return []admin.Token{
		{Name: "ops", Role: admin.RoleAdmin, Value: adminTokenValue},
		{Name: "dashboards", Role: admin.RoleRead, Value: readTokenValue},
	}
}

// testBundle is a running admin server on loopback and a client of it.
type testBundle struct {
	backend *admintest.Backend
	server  *admin.Server
	conn    *grpc.ClientConn
	client  adminv1.AdminServiceClient
	logs    *testlog.Buffer
}

// setupOpts changes setup's defaults.
type setupOpts struct {
	cfg        *admin.ServerConfig // default: defaultTokens, plaintext
	clientOpts []grpc.DialOption   // default: insecure
}

// setup starts a server with the real interceptors on 127.0.0.1:0 and dials
// it. Both are stopped in t.Cleanup.
func setup(t *testing.T, opts setupOpts) *testBundle {
	t.Helper()
	cfg := admin.ServerConfig{Tokens: defaultTokens()}
	if opts.cfg != nil {
		cfg = *opts.cfg
	}
	cfg.Listen = "127.0.0.1:0"
	logs := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	backend := admintest.New()
	server, err := admin.NewServer(cfg, backend, logger)
	require.NoError(t, err)
	require.NoError(t, server.Start(t.Context()))
	t.Cleanup(server.Stop)

	dialOpts := opts.clientOpts
	if dialOpts == nil {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(server.Addr().String(), dialOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &testBundle{
		backend: backend,
		server:  server,
		conn:    conn,
		client:  adminv1.NewAdminServiceClient(conn),
		logs:    logs,
	}
}

// withToken returns a context for a call authenticated with token.
func withToken(t *testing.T, token string) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// asAdmin returns a context for a call with the admin token.
func asAdmin(t *testing.T) context.Context { t.Helper(); return withToken(t, adminTokenValue) }

// asReader returns a context for a call with the read token.
func asReader(t *testing.T) context.Context { t.Helper(); return withToken(t, readTokenValue) }

// requireCode checks that err is a status error with code.
func requireCode(t *testing.T, err error, code codes.Code) *status.Status {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	require.Equal(t, code, st.Code(), "message: %s", st.Message())
	return st
}

// testPKI is a CA with a server and a client certificate, as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
	caPool                                               *x509.CertPool
}

// newTestPKI writes a fresh CA, a server certificate for 127.0.0.1 and
// localhost, and a client certificate into t.TempDir().
func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "platformd test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		certFile = filepath.Join(dir, cn+".crt")
		keyFile = filepath.Join(dir, cn+".key")
		require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
		require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
		return certFile, keyFile
	}

	p := &testPKI{caFile: filepath.Join(dir, "ca.crt"), caPool: x509.NewCertPool()}
	p.caPool.AddCert(caCert)
	require.NoError(t, os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	p.serverCert, p.serverKey = issue(2, "server", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)}, []string{"localhost"})
	p.clientCert, p.clientKey = issue(3, "client", x509.ExtKeyUsageClientAuth, nil, nil)
	return p
}

// clientTLS returns client transport credentials trusting the test CA,
// presenting the client certificate if withCert.
func (p *testPKI) clientTLS(t *testing.T, withCert bool) grpc.DialOption {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.caPool, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
		require.NoError(t, err)
		cfg.Certificates = []tls.Certificate{cert}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}
