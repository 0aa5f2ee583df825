package daemon

import (
	"context"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/console"
)

// startConsole starts the web console when the config turns it on
// (console.listen): the admin API's tokens and TLS files, the same Backend.
// It returns the server to stop, nil when the console is off.
func (d *Daemon) startConsole(ctx context.Context) (*console.Server, error) {
	c := d.cfg.Console
	if !c.Enabled() {
		return nil, nil
	}
	cfg := console.Config{
		Listen: c.Listen, SessionTTL: c.SessionTTL, SampleEvery: c.SampleEvery,
		TLS: admin.TLSConfig{
			CertFile: d.cfg.Admin.TLS.CertFile, KeyFile: d.cfg.Admin.TLS.KeyFile, ClientCAFile: d.cfg.Admin.TLS.ClientCAFile,
		},
	}
	for _, t := range d.cfg.Admin.Tokens {
		cfg.Tokens = append(cfg.Tokens, admin.Token{Name: t.Name, Role: t.Role, Value: t.Token})
	}
	srv, err := console.NewServer(cfg, &backend{d: d}, d.log)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, err
	}
	return srv, nil
}
