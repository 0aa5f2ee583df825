package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCatalog is a HandlerCatalog: handler name -> event names.
type testCatalog map[string][]string

func (c testCatalog) HandlerEvents(name string) ([]string, bool) {
	ev, ok := c[name]
	return ev, ok
}

var catalog = testCatalog{
	"stock.reserve":         {"order.order.placed.v1"},
	"stock.release":         {"order.order.cancelled.v1", "order.order.expired.v1"},
	"shipping.track_status": {"order.order.status_changed.v1"},
}

// env is a fake environment for parse.
type env map[string]string

func (e env) lookup(name string) (string, bool) {
	v, ok := e[name]
	return v, ok
}

// parseWith parses data with a fake environment.
func parseWith(t *testing.T, data string, e env) (*Config, error) {
	t.Helper()
	return parse("test.yaml", []byte(data), catalog, parseOptions{lookup: e.lookup})
}

// requireProblems asserts that err is an *Error and returns its problems.
func requireProblems(t *testing.T, err error) []Problem {
	t.Helper()
	require.Error(t, err)
	var cerr *Error
	require.ErrorAs(t, err, &cerr)
	return cerr.Problems
}

// paths returns the paths of ps.
func paths(ps []Problem) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Path
	}
	return out
}

// edit applies old->new replacements to base, each old occurring once.
func edit(t *testing.T, base string, pairs ...string) string {
	t.Helper()
	require.Zero(t, len(pairs)%2, "edit needs old/new pairs")
	for i := 0; i < len(pairs); i += 2 {
		require.Equal(t, 1, strings.Count(base, pairs[i]), "edit: %q must occur once", pairs[i])
		base = strings.Replace(base, pairs[i], pairs[i+1], 1)
	}
	return base
}

// writeFile writes data to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

// writeCert writes a self-signed certificate and its key into dir and
// returns their paths.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "platformd-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile = writeFile(t, dir, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	keyFile = writeFile(t, dir, "key.pem", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile
}
