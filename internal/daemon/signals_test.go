package daemon

import (
	"context"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// A SIGHUP reload runs in Run's loop, out of the caller's sight: the
// daemon's test signals say when it was applied (and its pool started) or
// refused, and when the services went down at shutdown, with no poll.
func TestSIGHUPReloadSignals(t *testing.T) {
	t.Parallel()
	e := newReloadEnv(t, testdb.New(t, "reload_sighup"))
	e.write(t, "", "")
	cfg, full, cat := loadShop(t, e.path)
	sigs := e.signals(t)
	sigs.ReloadApplied.Init(t)
	sigs.ReloadFailed.Init(t)
	sigs.PoolStarted.Init(t)
	sigs.ServiceDown.Init(t)
	hup := make(chan os.Signal, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, full, Options{ConfigPath: e.path, Catalog: cat, Reload: hup, testSignals: sigs},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	require.Equal(t, "stock", sigs.ServiceUp.WaitOrTimeout())
	require.Equal(t, "stock-events", sigs.PoolStarted.WaitOrTimeout())

	e.write(t, e.statusPool(), "")
	hup <- syscall.SIGHUP
	res := sigs.ReloadApplied.WaitOrTimeout()
	require.Equal(t, []string{"stock-status"}, res.PoolsAdded)
	require.Equal(t, "stock-status", sigs.PoolStarted.WaitOrTimeout())

	e.write(t, e.statusPool()+e.poolYAML("bad", "bad", shop.EventOrderPlaced, "nope.handler", ""), "") // no such handler
	hup <- syscall.SIGHUP
	var cfgErr *admin.ConfigError
	require.ErrorAs(t, sigs.ReloadFailed.WaitOrTimeout(), &cfgErr, "refused as invalid")
	sigs.ReloadApplied.RequireEmpty()

	cancel()
	require.NoError(t, <-done)
	require.Equal(t, "stock", sigs.ServiceDown.WaitOrTimeout())
}
