package admin

import "crypto/tls"

// Load returns the TLS configuration the admin server would serve with:
// nil for plaintext (no files set), TLS 1.2 or later with CertFile and
// KeyFile, client certificates required with ClientCAFile. Other servers
// that share the admin TLS settings (the console) call it so that every
// endpoint enforces the same rules.
func (c TLSConfig) Load() (*tls.Config, error) { return loadTLS(c) }
