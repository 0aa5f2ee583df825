package chaos

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// pki is a throw-away CA with a server certificate for 127.0.0.1, a client
// certificate, and a client certificate from another (unknown) CA.
type pki struct {
	caFile, certFile, keyFile string
	roots                     *x509.CertPool
	client, rogue             tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(1)
	issue := func(tmpl *x509.Certificate, key *ecdsa.PrivateKey, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) *x509.Certificate {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = time.Now().Add(-time.Hour)
		tmpl.NotAfter = time.Now().Add(24 * time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := func(name string) (*x509.Certificate, *ecdsa.PrivateKey) {
		k := newKey()
		return issue(&x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, k, nil, nil), k
	}
	writePEM := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	leaf := func(name string, usage x509.ExtKeyUsage, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
		k := newKey()
		tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: name}, KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if usage == x509.ExtKeyUsageServerAuth {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost"}
		}
		return issue(tmpl, k, parent, parentKey), k
	}
	caCert, caKey := ca("chaos test CA")
	rogueCA, rogueKey := ca("unknown CA")
	srv, srvKey := leaf("platformd", x509.ExtKeyUsageServerAuth, caCert, caKey)
	cli, cliKey := leaf("chaos-client", x509.ExtKeyUsageClientAuth, caCert, caKey)
	rog, rogKey := leaf("rogue-client", x509.ExtKeyUsageClientAuth, rogueCA, rogueKey)
	p := &pki{
		caFile:   writePEM("ca.pem", "CERTIFICATE", caCert.Raw),
		certFile: writePEM("server.pem", "CERTIFICATE", srv.Raw),
		keyFile:  writePEM("server.key", "PRIVATE KEY", keyDER(srvKey)),
		roots:    x509.NewCertPool(),
	}
	p.roots.AddCert(caCert)
	p.client = tls.Certificate{Certificate: [][]byte{cli.Raw}, PrivateKey: cliKey, Leaf: cli}
	p.rogue = tls.Certificate{Certificate: [][]byte{rog.Raw}, PrivateKey: rogKey, Leaf: rog}
	return p
}

func (p *pki) creds(cert *tls.Certificate) credentials.TransportCredentials {
	cfg := &tls.Config{RootCAs: p.roots, MinVersion: tls.VersionTLS12, ServerName: "127.0.0.1"}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return credentials.NewTLS(cfg)
}

// expectCode checks a reply's code and that it carries no secret or stack.
func expectCode(t *testing.T, what string, err error, want codes.Code, secrets []string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != want {
		t.Errorf("%s: got %v %q, want %v", what, st.Code(), st.Message(), want)
	}
	text := fmt.Sprint(st.Proto())
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s: the reply carries a secret", what)
		}
	}
	if stackRE.MatchString(text) || strings.Contains(strings.ToLower(text), "panic") {
		t.Errorf("%s: the reply carries a stack or panic: %s", what, text)
	}
}

func callCtx(auth string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	if auth != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	return ctx, cancel
}

// TestAdminSecurity checks the admin API of the real daemon: tokens and
// roles, request limits, UUID and duration validation, TLS and mTLS. A
// handler panic answered with Internal and no detail is covered by
// internal/admin's unit tests (it needs a handler that panics).
func TestAdminSecurity(t *testing.T) {
	t.Parallel() // a world of its own: see doc.go
	e := newEnv(t)
	pk := newPKI(t)
	one := []string{svcStock}
	plain := e.newDaemon(daemonOpts{name: "plain", dbAddr: pgAddr(t), services: one})
	withTLS := e.newDaemon(daemonOpts{name: "tls", dbAddr: pgAddr(t), services: one,
		tls: &tlsFiles{cert: pk.certFile, key: pk.keyFile}, creds: pk.creds(nil)})
	withMTLS := e.newDaemon(daemonOpts{name: "mtls", dbAddr: pgAddr(t), services: one,
		tls: &tlsFiles{cert: pk.certFile, key: pk.keyFile, clientCA: pk.caFile}, creds: pk.creds(&pk.client)})
	plain.migrate()
	plain.start()
	withTLS.start()
	withMTLS.start()

	wrong := "wrong-" + randomHex(16)
	e.addSecret(wrong)
	secrets := append(e.secretList(), wrong)
	admin, read := "Bearer "+e.adminToken, "Bearer "+e.readToken
	cli := plain.adminClient()
	goodID := uuid.Must(uuid.NewV7()).String()

	t.Run("tokens", func(t *testing.T) {
		for _, c := range []struct {
			what, auth string
			want       codes.Code
		}{
			{"no token", "", codes.Unauthenticated},
			{"wrong token", "Bearer " + wrong, codes.Unauthenticated},
			{"admin token with another scheme", "Basic " + e.adminToken, codes.Unauthenticated},
			{"admin token with a suffix", "Bearer " + e.adminToken + "x", codes.Unauthenticated},
			{"admin token prefix", "Bearer " + e.adminToken[:len(e.adminToken)-1], codes.Unauthenticated},
			{"empty bearer", "Bearer ", codes.Unauthenticated},
			{"read token", read, codes.OK},
			{"admin token", admin, codes.OK},
		} {
			ctx, cancel := callCtx(c.auth)
			_, err := cli.ListServices(ctx, &adminv1.ListServicesRequest{})
			cancel()
			expectCode(t, "ListServices with "+c.what, err, c.want, secrets)
			ctx, cancel = callCtx(c.auth)
			_, err = cli.ListPools(ctx, &adminv1.ListPoolsRequest{})
			cancel()
			expectCode(t, "ListPools with "+c.what, err, c.want, secrets)
		}
		// A read token may look, not change.
		reads := map[string]func(ctx context.Context) error{
			"LookupEvent": func(ctx context.Context) error {
				_, err := cli.LookupEvent(ctx, &adminv1.LookupEventRequest{EventId: goodID})
				return err
			},
			"GetHorizon": func(ctx context.Context) error {
				_, err := cli.GetHorizon(ctx, &adminv1.GetHorizonRequest{Service: svcStock})
				return err
			},
			"ListPurgeRuns": func(ctx context.Context) error {
				_, err := cli.ListPurgeRuns(ctx, &adminv1.ListPurgeRunsRequest{Service: svcStock})
				return err
			},
			"ListFailedMessages": func(ctx context.Context) error {
				_, err := cli.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: poolStock})
				return err
			},
		}
		for name, call := range reads {
			ctx, cancel := callCtx(read)
			expectCode(t, name+" with the read token", call(ctx), codes.OK, secrets)
			cancel()
			ctx, cancel = callCtx("")
			expectCode(t, name+" without token", call(ctx), codes.Unauthenticated, secrets)
			cancel()
		}
		writes := map[string]func(ctx context.Context) error{
			"PausePool": func(ctx context.Context) error {
				_, err := cli.PausePool(ctx, &adminv1.PausePoolRequest{Pool: poolStock, Reason: "read token"})
				return err
			},
			"ResumePool": func(ctx context.Context) error {
				_, err := cli.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: poolStock})
				return err
			},
			"SetHorizon": func(ctx context.Context) error {
				_, err := cli.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: svcStock, Horizon: durationpb.New(72 * time.Hour)})
				return err
			},
			"RunPurge": func(ctx context.Context) error {
				_, err := cli.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: svcStock})
				return err
			},
			"RetryFailedMessages": func(ctx context.Context) error {
				_, err := cli.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: poolStock, All: true})
				return err
			},
		}
		for name, call := range writes {
			ctx, cancel := callCtx(read)
			expectCode(t, name+" with the read token", call(ctx), codes.PermissionDenied, secrets)
			cancel()
			ctx, cancel = callCtx("Bearer " + wrong)
			expectCode(t, name+" with a wrong token", call(ctx), codes.Unauthenticated, secrets)
			cancel()
		}
		if p, err := plain.poolInfo(poolStock); err != nil || p.GetState() == adminv1.PoolState_POOL_STATE_PAUSED {
			t.Errorf("stock pool after refused calls: %v (%v), want not paused", p, err)
		}
	})

	t.Run("limits", func(t *testing.T) {
		ctx, cancel := callCtx(admin)
		defer cancel()
		_, err := cli.PausePool(ctx, &adminv1.PausePoolRequest{Pool: poolStock, Reason: strings.Repeat("r", 2<<20)})
		expectCode(t, "PausePool with a 2 MiB reason", err, codes.ResourceExhausted, secrets)
		_, err = cli.PausePool(ctx, &adminv1.PausePoolRequest{Pool: poolStock, Reason: strings.Repeat("r", 1025)})
		expectCode(t, "PausePool with a 1025-byte reason", err, codes.InvalidArgument, secrets)
		ids := make([]string, 10001)
		for i := range ids {
			ids[i] = goodID
		}
		_, err = cli.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: poolStock, EventIds: ids})
		expectCode(t, "RetryFailedMessages with 10001 ids", err, codes.InvalidArgument, secrets)
		_, err = cli.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: poolStock, EventIds: []string{goodID}, All: true})
		expectCode(t, "RetryFailedMessages with ids and all", err, codes.InvalidArgument, secrets)
		for _, limit := range []int32{-1, 10001} {
			_, err = cli.ListPurgeRuns(ctx, &adminv1.ListPurgeRunsRequest{Service: svcStock, Limit: limit})
			expectCode(t, fmt.Sprintf("ListPurgeRuns limit %d", limit), err, codes.InvalidArgument, secrets)
			_, err = cli.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: poolStock, Limit: limit})
			expectCode(t, fmt.Sprintf("ListFailedMessages limit %d", limit), err, codes.InvalidArgument, secrets)
		}
		_, err = cli.PausePool(ctx, &adminv1.PausePoolRequest{Pool: "no-such-pool"})
		expectCode(t, "PausePool of an unknown pool", err, codes.NotFound, secrets)
		_, err = cli.GetHorizon(ctx, &adminv1.GetHorizonRequest{Service: "no-such-service"})
		expectCode(t, "GetHorizon of an unknown service", err, codes.NotFound, secrets)
		_, err = cli.PausePool(ctx, &adminv1.PausePoolRequest{})
		expectCode(t, "PausePool without a pool", err, codes.InvalidArgument, secrets)
	})

	t.Run("uuids", func(t *testing.T) {
		u := uuid.New().String()
		for _, bad := range []string{
			"{" + u + "}", "urn:uuid:" + u, strings.ReplaceAll(u, "-", ""), uuid.Nil.String(), "", "not-a-uuid",
			u + " ", " " + u, u[:35], u + "0", strings.Replace(u, u[:1], "g", 1), u[:8] + "_" + u[9:],
		} {
			ctx, cancel := callCtx(read)
			_, err := cli.LookupEvent(ctx, &adminv1.LookupEventRequest{EventId: bad})
			cancel()
			expectCode(t, fmt.Sprintf("LookupEvent %q", bad), err, codes.InvalidArgument, secrets)
			ctx, cancel = callCtx(admin)
			_, err = cli.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: poolStock, EventIds: []string{goodID, bad}})
			cancel()
			expectCode(t, fmt.Sprintf("RetryFailedMessages %q", bad), err, codes.InvalidArgument, secrets)
		}
		ctx, cancel := callCtx(read)
		defer cancel()
		resp, err := cli.LookupEvent(ctx, &adminv1.LookupEventRequest{EventId: strings.ToUpper(u)})
		expectCode(t, "LookupEvent of an upper-case canonical UUID", err, codes.OK, secrets)
		for _, r := range resp.GetResults() {
			if r.GetProcessed() {
				t.Errorf("LookupEvent of a random id: processed in %s", r.GetService())
			}
		}
	})

	t.Run("durations", func(t *testing.T) {
		for _, c := range []struct {
			what string
			d    *durationpb.Duration
			want codes.Code
		}{
			{"no horizon", nil, codes.InvalidArgument},
			{"zero", &durationpb.Duration{}, codes.InvalidArgument},
			{"negative", &durationpb.Duration{Seconds: -3600}, codes.InvalidArgument},
			{"seconds and nanos of opposite signs", &durationpb.Duration{Seconds: 3600, Nanos: -1}, codes.InvalidArgument},
			{"nanos out of range", &durationpb.Duration{Seconds: 3600, Nanos: 1_000_000_000}, codes.InvalidArgument},
			{"beyond the protobuf range", &durationpb.Duration{Seconds: 315_576_000_001}, codes.InvalidArgument},
			{"beyond time.Duration", &durationpb.Duration{Seconds: 315_576_000_000}, codes.InvalidArgument},
			{"under min_horizon", durationpb.New(time.Hour), codes.FailedPrecondition},
		} {
			ctx, cancel := callCtx(admin)
			_, err := cli.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: svcStock, Horizon: c.d})
			cancel()
			expectCode(t, "SetHorizon "+c.what, err, c.want, secrets)
		}
		ctx, cancel := callCtx(admin)
		defer cancel()
		h, err := cli.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: svcStock, Horizon: durationpb.New(72 * time.Hour)})
		expectCode(t, "SetHorizon 72h", err, codes.OK, secrets)
		if err == nil && (h.GetHorizon().GetHorizon().AsDuration() != 72*time.Hour || h.GetHorizon().GetUpdatedBy() != "ops") {
			t.Errorf("SetHorizon 72h returned %v, want 72h updated by the token's name", h)
		}
		// The other daemons share the service database: they see it.
		g, err := withTLSClient(t, withTLS, pk, &pk.client).GetHorizon(ctx, &adminv1.GetHorizonRequest{Service: svcStock})
		expectCode(t, "GetHorizon through the TLS daemon", err, codes.OK, secrets)
		if err == nil && g.GetHorizon().GetHorizon().AsDuration() != 72*time.Hour {
			t.Errorf("GetHorizon on another daemon: %v, want 72h", g.GetHorizon().GetHorizon().AsDuration())
		}
	})

	t.Run("tls", func(t *testing.T) {
		ctx, cancel := callCtx(admin)
		defer cancel()
		// A plaintext client cannot talk to a TLS server.
		plaintext := func(d *daemon) adminv1.AdminServiceClient {
			return adminv1.NewAdminServiceClient(tlsClient(t, d.adminAddr, insecure.NewCredentials()))
		}
		_, err := plaintext(withTLS).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "plaintext client to the TLS daemon", err, codes.Unavailable, secrets)
		_, err = withTLSClient(t, withTLS, pk, nil).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "TLS client to the TLS daemon", err, codes.OK, secrets)
		nctx, ncancel := callCtx("")
		defer ncancel()
		_, err = withTLSClient(t, withTLS, pk, nil).ListServices(nctx, &adminv1.ListServicesRequest{})
		expectCode(t, "TLS client without token", err, codes.Unauthenticated, secrets)

		// mTLS: no certificate, or one from an unknown CA, is refused.
		_, err = plaintext(withMTLS).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "plaintext client to the mTLS daemon", err, codes.Unavailable, secrets)
		_, err = withTLSClient(t, withMTLS, pk, nil).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "TLS client without certificate to the mTLS daemon", err, codes.Unavailable, secrets)
		_, err = withTLSClient(t, withMTLS, pk, &pk.rogue).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "client certificate from an unknown CA", err, codes.Unavailable, secrets)
		_, err = withTLSClient(t, withMTLS, pk, &pk.client).ListServices(ctx, &adminv1.ListServicesRequest{})
		expectCode(t, "client certificate from the CA", err, codes.OK, secrets)
		_, err = withTLSClient(t, withMTLS, pk, &pk.client).ListServices(nctx, &adminv1.ListServicesRequest{})
		expectCode(t, "client certificate without token", err, codes.Unauthenticated, secrets)
	})

	// Still serving, and nobody crashed; then a graceful stop (exit 0).
	for _, d := range []struct {
		d    *daemon
		conn *grpc.ClientConn
	}{
		{plain, plain.client()},
		{withTLS, withTLS.client()},
		{withMTLS, withMTLS.client()},
	} {
		ctx, cancel := callCtx("")
		resp, err := grpc_health_v1.NewHealthClient(d.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{})
		cancel()
		if err != nil || resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
			t.Errorf("daemon %s after the abuse: health %v, %v", d.d.name, resp, err)
		}
		ctx, cancel = callCtx(admin)
		_, err = adminv1.NewAdminServiceClient(d.conn).ListServices(ctx, &adminv1.ListServicesRequest{})
		cancel()
		expectCode(t, "ListServices on "+d.d.name+" after the abuse", err, codes.OK, secrets)
	}
	for _, d := range []*daemon{plain, withTLS, withMTLS} {
		d.stop()
	}
}

// withTLSClient is an admin client over TLS to d, with an optional client
// certificate.
func withTLSClient(t *testing.T, d *daemon, pk *pki, cert *tls.Certificate) adminv1.AdminServiceClient {
	return adminv1.NewAdminServiceClient(tlsClient(t, d.adminAddr, pk.creds(cert)))
}
