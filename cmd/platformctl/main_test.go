package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
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
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	adminToken = "adm-0c9f1e2d3b4a5f6e7d8c9b0a1f2e3d4c"
	readToken  = "rd-5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"
)

// testBundle is an admin server on loopback, with the fake backend.
type testBundle struct {
	backend *admintest.Backend
	addr    string
}

// setup starts an admin server with the fake backend; cfg may be nil.
func setup(t *testing.T, cfg *admin.ServerConfig) *testBundle {
	t.Helper()
	if cfg == nil {
		cfg = &admin.ServerConfig{}
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Tokens = []admin.Token{
		{Name: "ops", Role: admin.RoleAdmin, Value: adminToken},
		{Name: "dashboards", Role: admin.RoleRead, Value: readToken},
	}
	backend := admintest.New()
	server, err := admin.NewServer(*cfg, backend, nil)
	require.NoError(t, err)
	require.NoError(t, server.Start(t.Context()))
	t.Cleanup(server.Stop)
	return &testBundle{backend: backend, addr: server.Addr().String()}
}

// result is the outcome of one platformctl run.
type result struct {
	code           int
	stdout, stderr string
}

// run runs platformctl in-process against b's server with env as the
// environment; --addr is added unless env sets PLATFORMD_ADDR.
func (b *testBundle) run(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	if _, ok := env[envAddr]; !ok {
		args = append([]string{"--addr", b.addr}, args...)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// asAdmin and asReader are environments holding a token.
var (
	asAdmin  = map[string]string{envToken: adminToken}
	asReader = map[string]string{envToken: readToken}
)

// tableRows splits table output into rows of fields.
func tableRows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestServicesTable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "services")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr)
	require.Equal(t, [][]string{
		{"NAME", "HORIZON", "MIN_HORIZON", "LAST_PURGE", "BEYOND_HORIZON", "OUTBOX_PENDING", "OUTBOX_OLDEST"},
		{"shipping", "336h0m0s", "24h0m0s", "never", "fail", "0", "-"},
		{"stock", "336h0m0s", "24h0m0s", "2026-01-02T02:04:05Z", "fail", "3", "2.5s"},
	}, tableRows(r.stdout))
}

func TestServicesJSON(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "services", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)

	var doc struct {
		Services []map[string]any `json:"services"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), "one JSON document")
	require.Len(t, doc.Services, 2)
	stock := doc.Services[1]
	require.Equal(t, "stock", stock["name"])
	require.Equal(t, "1209600s", stock["horizon"])
	require.Equal(t, "86400s", stock["minHorizon"], "camelCase names")
	require.Equal(t, "2026-01-02T02:04:05Z", stock["lastPurge"])
	require.Equal(t, "3", stock["outboxPending"], "int64 as a JSON string")
	require.Equal(t, "2.500s", stock["outboxOldest"])

	var resp adminv1.ListServicesResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Len(t, resp.GetServices(), 2)
}

func TestPools(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "pools", "--service", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"NAME", "SERVICE", "QUEUE", "STATE", "NODE", "CONCURRENCY", "RATE", "DAEMONS", "IN_FLIGHT", "PROCESSED", "DUPLICATES", "RETRIED", "FAILED", "PAUSED_REASON"},
		{"stock-events", "stock", "stock.events", "running", "10.0.0.2:5672", "4", "200/s", "2", "3", "1200", "12", "5", "1", "-"},
	}, tableRows(r.stdout))

	r = b.run(t, asReader, "pools", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ListPoolsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Len(t, resp.GetPools(), 2)
	require.Contains(t, r.stdout, `"POOL_STATE_PAUSED"`)
	require.Contains(t, r.stdout, `"pausedReason"`)
	require.Contains(t, r.stdout, `"brokerNode": "10.0.0.2:5672"`)
	require.Contains(t, r.stdout, `"rateLimit": 200`)
	require.Contains(t, r.stdout, `"rateShare": 100`)
}

// platformctl delays shows the shared delay queues' depths, a dash where
// a depth is unknown, and the response as JSON with -o json.
func TestDelays(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "delays")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"NAME", "DELAY", "MESSAGES", "POOLS", "ERROR"},
		{"platformd.retry.1s", "1s", "4", "shipping-events,stock-events", "-"},
		{"platformd.retry.10s", "10s", "2", "stock-events", "-"},
		{"platformd.retry.1m0s", "1m0s", "-", "stock-events", "queue", "not", "declared", "yet"},
	}, tableRows(r.stdout))

	r = b.run(t, asReader, "delays", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ListDelayQueuesResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Len(t, resp.GetDelayQueues(), 3)
	require.Contains(t, r.stdout, `"delayQueues"`)
}

func TestPoolPauseResume(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "pool", "pause", "stock-events", "--reason", "db maintenance")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Len(t, rows, 2)
	require.Equal(t, []string{"stock-events", "stock", "stock.events", "paused"}, rows[1][:4])
	require.Contains(t, r.stdout, "db maintenance")
	require.Equal(t, []admintest.Call{{Method: "PausePool", Pool: "stock-events", Reason: "db maintenance", Actor: "ops"}}, b.backend.Calls())

	r = b.run(t, asAdmin, "pool", "resume", "stock-events", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ResumePoolResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, adminv1.PoolState_POOL_STATE_RUNNING, resp.GetPool().GetState())
}

func TestLookup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "lookup", admintest.StockEventID.String())
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"SERVICE", "PROCESSED", "PROCESSED_AT", "PURGEABLE_AT"},
		{"shipping", "false", "-", "-"},
		{"stock", "true", "2026-01-02T01:04:05Z", "2026-01-16T01:04:05Z"},
	}, tableRows(r.stdout))

	r = b.run(t, asReader, "lookup", admintest.StockEventID.String(), "--service", "stock", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var doc struct {
		Results []struct {
			Service     string `json:"service"`
			Processed   bool   `json:"processed"`
			ProcessedAt string `json:"processedAt"`
			PurgeableAt string `json:"purgeableAt"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc))
	require.Len(t, doc.Results, 1)
	require.True(t, doc.Results[0].Processed)
	require.Equal(t, "2026-01-16T01:04:05Z", doc.Results[0].PurgeableAt)

	r = b.run(t, asReader, "lookup", "{"+admintest.StockEventID.String()+"}")
	require.Equal(t, 4, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "platformctl: InvalidArgument: "), r.stderr)
	require.Empty(t, r.stdout)
}

func TestHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "horizon", "get", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"SERVICE", "HORIZON", "MIN_HORIZON", "UPDATED_AT", "UPDATED_BY"},
		{"stock", "336h0m0s", "24h0m0s", "-", "-"},
	}, tableRows(r.stdout))

	r = b.run(t, asAdmin, "horizon", "set", "stock", "48h")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, []string{"stock", "48h0m0s", "24h0m0s", "2026-01-02T03:04:05Z", "ops"}, tableRows(r.stdout)[1])

	r = b.run(t, asAdmin, "horizon", "set", "stock", "1h")
	require.Equal(t, 4, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "platformctl: FailedPrecondition: "), r.stderr)

	r = b.run(t, asAdmin, "horizon", "set", "stock", "1h", "--force", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.SetHorizonResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, time.Hour, resp.GetHorizon().GetHorizon().AsDuration())

	r = b.run(t, asAdmin, "horizon", "set", "stock", "14d")
	require.Equal(t, 4, r.code)
	require.Contains(t, r.stderr, "platformctl: InvalidArgument: horizon \"14d\"")

	r = b.run(t, asAdmin, "horizon", "set", "stock", "--", "-1h")
	require.Equal(t, 4, r.code, "negative horizon refused by the server: %s", r.stderr)
	require.True(t, strings.HasPrefix(r.stderr, "platformctl: InvalidArgument: horizon must be positive"), r.stderr)
}

func TestPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "purge", "run", "stock", "--dry-run", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var run adminv1.RunPurgeResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &run))
	require.True(t, run.GetRun().GetDryRun())
	require.Equal(t, int64(1), run.GetRun().GetDeleted())
	require.Contains(t, r.stdout, `"dryRun": true`)

	r = b.run(t, asReader, "purge", "list", "stock", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"SERVICE", "TRIGGER", "DRY_RUN", "CUTOFF", "DELETED", "STARTED_AT", "FINISHED_AT", "ERROR"},
		{"stock", "admin", "true", "2025-12-19T03:04:05Z", "1", "2026-01-02T03:04:05Z", "2026-01-02T03:04:06Z", "-"},
	}, tableRows(r.stdout))
	require.Equal(t, 1, b.backend.CallsTo("ListPurgeRuns")[0].Limit)

	r = b.run(t, asReader, "purge", "list", "stock", "--limit", "-1")
	require.Equal(t, 4, r.code, r.stderr)
}

func TestFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := admintest.FailedEventID.String()

	r := b.run(t, asReader, "failed", "list", "stock-events")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Equal(t, []string{"EVENT_ID", "EVENT_NAME", "REASON", "ATTEMPT", "FAILED_AT", "ERROR"}, rows[0])
	require.Equal(t, []string{id, "order.order.placed.v1", "permanent", "1", "2026-01-02T02:34:05Z", "stock.reserve:", "unknown", "product"}, rows[1])

	r = b.run(t, asAdmin, "failed", "retry", "stock-events", id, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.RetryFailedMessagesResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, int32(1), resp.GetRetried())

	r = b.run(t, asAdmin, "failed", "retry", "stock-events", "--all")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{{"RETRIED"}, {"0"}}, tableRows(r.stdout))
	require.True(t, b.backend.CallsTo("RetryFailedMessages")[1].All)

	for _, args := range [][]string{
		{"failed", "retry", "stock-events"},
		{"failed", "retry", "stock-events", id, "--all"},
		{"failed", "retry"},
	} {
		r = b.run(t, asAdmin, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}
	require.Len(t, b.backend.CallsTo("RetryFailedMessages"), 2)
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	for name, tc := range map[string]struct {
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		"NotFoundService": {asReader, []string{"pools", "--service", "billing"}, 3, "platformctl: NotFound: "},
		"NotFoundPool":    {asAdmin, []string{"pool", "pause", "nope"}, 3, "platformctl: NotFound: "},
		"NoToken":         {nil, []string{"services"}, 5, "platformctl: Unauthenticated: "},
		"WrongToken":      {map[string]string{envToken: "wrong"}, []string{"services"}, 5, "platformctl: Unauthenticated: "},
		"ReadTokenPause":  {asReader, []string{"pool", "pause", "stock-events"}, 5, "platformctl: PermissionDenied: "},
		"UnknownCommand":  {asReader, []string{"bogus"}, 2, "platformctl: unknown command"},
		"UnknownFlag":     {asReader, []string{"services", "--bogus"}, 2, "platformctl: unknown flag: --bogus"},
		"MissingArg":      {asReader, []string{"lookup"}, 2, "platformctl: accepts 1 arg(s), received 0"},
		"ExtraArg":        {asReader, []string{"services", "x"}, 2, "platformctl: unknown command"},
		"BadOutput":       {asReader, []string{"services", "-o", "yaml"}, 2, "platformctl: -o \"yaml\""},
		"BadLimit":        {asReader, []string{"purge", "list", "stock", "--limit", "ten"}, 2, "platformctl: invalid argument"},
		"BareGroup":       {asReader, []string{"pool"}, 2, "platformctl: platformctl pool needs a subcommand"},
		"BareRoot":        {asReader, nil, 2, "platformctl: platformctl needs a subcommand"},
		"UnknownSub":      {asReader, []string{"pool", "bogus"}, 2, "platformctl: unknown command"},
		"CertWithoutKey":  {asReader, []string{"services", "--cert-file", "x"}, 2, "platformctl: --cert-file and --key-file"},
		"MissingCAFile":   {asReader, []string{"services", "--ca-file", filepath.Join(t.TempDir(), "nope.pem")}, 1, "platformctl: error reading --ca-file"},
	} {
		t.Run(name, func(t *testing.T) {
			r := b.run(t, tc.env, tc.args...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, tc.stderr), "stderr: %s", r.stderr)
			require.Empty(t, r.stdout)
		})
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())

	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"services", "--addr", addr, "--timeout", "2s"}, func(string) string { return "" }, &stdout, &stderr)
	require.Equal(t, 6, code, stderr.String())
	require.True(t, strings.HasPrefix(stderr.String(), "platformctl: Unavailable: "), stderr.String())
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// Address and token from the environment.
	r := b.run(t, map[string]string{envAddr: b.addr, envToken: readToken}, "services")
	require.Equal(t, 0, r.code, r.stderr)

	// --token wins over the environment.
	r = b.run(t, map[string]string{envToken: readToken}, "--token", adminToken, "pool", "pause", "stock-events")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "ops", b.backend.CallsTo("PausePool")[0].Actor)

	// --addr wins over the environment.
	r = b.run(t, map[string]string{envAddr: "127.0.0.1:1", envToken: readToken}, "--addr", b.addr, "services")
	require.Equal(t, 0, r.code, r.stderr)
}

func TestHelp(t *testing.T) {
	t.Parallel()

	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"--help"}, func(string) string { return "" }, &stdout, &stderr)
	require.Equal(t, 0, code)
	require.Contains(t, stdout.String(), "Exit codes:")
	for _, want := range []string{"3  NotFound", "4  InvalidArgument or FailedPrecondition", "5  Unauthenticated or PermissionDenied", "6  Unavailable or DeadlineExceeded"} {
		require.Contains(t, stdout.String(), want)
	}

	// Every command has an example, shown by its --help.
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Name() == "help" {
			return
		}
		require.NotEmpty(t, cmd.Example, cmd.CommandPath())
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	root := newRootCmd(&app{getenv: func(string) string { return "" }})
	walk(root)

	stdout.Reset()
	code = run(t.Context(), []string{"failed", "retry", "--help"}, func(string) string { return "" }, &stdout, &stderr)
	require.Equal(t, 0, code)
	require.Contains(t, stdout.String(), "Examples:\n  platformctl failed retry stock-events 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d\n")
}

func TestTLS(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	b := setup(t, &admin.ServerConfig{TLS: admin.TLSConfig{CertFile: pki.serverCert, KeyFile: pki.serverKey, ClientCAFile: pki.caFile}})

	r := b.run(t, asReader, "services", "--ca-file", pki.caFile, "--cert-file", pki.clientCert, "--key-file", pki.clientKey)
	require.Equal(t, 0, r.code, r.stderr)

	r = b.run(t, asReader, "services", "--ca-file", pki.caFile, "--cert-file", pki.clientCert, "--key-file", pki.clientKey, "--server-name", "localhost")
	require.Equal(t, 0, r.code, r.stderr)

	r = b.run(t, asReader, "services", "--ca-file", pki.caFile, "--timeout", "3s")
	require.Equal(t, 6, r.code, "no client certificate: %s", r.stderr)

	r = b.run(t, asReader, "services", "--timeout", "3s")
	require.Equal(t, 6, r.code, "plaintext: %s", r.stderr)
}

// testPKI is a CA with server and client certificates, as PEM files.
type testPKI struct {
	caFile, serverCert, serverKey, clientCert, clientKey string
}

// newTestPKI writes a CA, a server certificate for 127.0.0.1 and localhost
// and a client certificate into t.TempDir().
func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
		return path
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	issue := func(serial int64, name string, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		keyDER, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", keyDER)
	}
	p := &testPKI{caFile: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = issue(2, "server", x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue(3, "client", x509.ExtKeyUsageClientAuth)
	return p
}

func TestReload(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "reload")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "services added")
	require.Contains(t, r.stdout, "billing")
	require.Contains(t, r.stdout, "shipping-events, stock-events")

	r = b.run(t, asReader, "reload")
	require.Equal(t, 5, r.code, "a read token may not reload")

	b.backend.SetHook("ReloadConfig", func(context.Context) error {
		return &admin.ConfigError{Problems: []admin.ConfigProblem{
			{Path: "services[2].sql_handlers[0].sql[0]", Message: "unknown parameter @paylod"},
			{Path: "services[2].pools[0].queue", Message: "must not be empty"},
		}}
	})
	r = b.run(t, asAdmin, "reload")
	require.Equal(t, 4, r.code)
	require.Contains(t, r.stderr, "platformctl: InvalidArgument: invalid configuration")
	require.Contains(t, r.stderr, "services[2].sql_handlers[0].sql[0]: unknown parameter @paylod")
	require.Contains(t, r.stderr, "services[2].pools[0].queue: must not be empty")

	b.backend.SetHook("ReloadConfig", func(context.Context) error {
		return fmt.Errorf("admin.listen: %w (127.0.0.1:7070 -> 127.0.0.1:7080)", admin.ErrNeedsRestart)
	})
	r = b.run(t, asAdmin, "reload")
	require.Equal(t, 4, r.code)
	require.Contains(t, r.stderr, "FailedPrecondition: admin.listen: needs a restart")
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "replay", "start", "stock", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z",
		"--event-name", "order.#", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"ID", "SERVICE", "STATE", "MATCHED", "PUBLISHED", "TARGET_POOL", "RATE", "CREATED_AT", "FINISHED_AT", "ERROR"},
		{"-", "stock", "dry_run", "10", "0", "-", "500", "-", "-", "-"},
		{},
		{"POOL", "SERVICE", "WOULD_APPLY", "ALREADY_PROCESSED", "BEYOND_HORIZON", "PUBLISHED"},
		{"shipping-events", "shipping", "0", "4", "6", "0"},
		{"stock-events", "stock", "7", "3", "0", "0"},
	}, tableRows(r.stdout))
	call := b.backend.CallsTo("ReplayEvents")[0]
	require.True(t, call.DryRun)

	r = b.run(t, asAdmin, "replay", "start", "stock", "--event-id", admintest.StockEventID.String(), "--target-pool", "stock-events", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ReplayEventsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, adminv1.ReplayState_REPLAY_STATE_RUNNING, resp.GetReplay().GetState())
	id := resp.GetReplay().GetId()
	require.Equal(t, []uuid.UUID{admintest.StockEventID}, b.backend.CallsTo("ReplayEvents")[1].IDs)

	r = b.run(t, asReader, "replay", "get", "stock", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "running", tableRows(r.stdout)[1][2])

	r = b.run(t, asReader, "replay", "list", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Len(t, rows, 3)
	require.Equal(t, id, rows[1][0])
	require.Equal(t, admintest.ReplayID.String(), rows[2][0])

	r = b.run(t, asReader, "replay", "cancel", "stock", id)
	require.Equal(t, 5, r.code, r.stderr) // PermissionDenied
	r = b.run(t, asAdmin, "replay", "cancel", "stock", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "cancelled", tableRows(r.stdout)[1][2])

	r = b.run(t, asAdmin, "replay", "start", "stock", "--from", "yesterday")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, "--from")
	r = b.run(t, asAdmin, "replay", "start", "stock", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, "from")
}
