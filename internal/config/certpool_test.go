package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The admin server, the remote handlers and the validator read CA files
// through LoadCertPool: one reading, one set of messages.
func TestLoadCertPool(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)

	pool, err := LoadCertPool(cert)
	require.NoError(t, err)
	require.NotNil(t, pool)

	_, err = LoadCertPool(filepath.Join(dir, "missing.pem"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "cannot read")

	_, err = LoadCertPool(key) // a PEM file, but a key: no certificate
	require.EqualError(t, err, `no PEM certificate found in "`+key+`"`)
}
