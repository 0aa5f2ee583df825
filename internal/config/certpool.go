package config

import (
	"crypto/x509"
	"fmt"
	"os"
)

// LoadCertPool reads the PEM certificates of the file at path into a new
// pool: the admin API's client CAs (admin.tls.client_ca_file), a remote
// handler's server CAs (tls.ca_file). The validator checks the same files
// with it, so a daemon that passed `check` reads them the same way. A file
// with no PEM certificate is an error naming it.
func LoadCertPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("no PEM certificate found in %q", path)
	}
	return pool, nil
}
