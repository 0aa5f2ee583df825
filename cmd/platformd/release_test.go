package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The release binary holds no demo: the example shop's handler names are
// not in its bytes (as `strings` would show them), nor the shop's package,
// and `check` refuses a config naming the shop's handlers as unknown. The
// shop's daemon, built the same way, holds them all and accepts the same
// config, so that each check can fail.
func TestReleaseBinaryHasNoShop(t *testing.T) {
	t.Parallel()
	marks := []string{"stock.reserve", "shipping.track_status", "github.com/platformd/platformd/examples/shop"}
	for bin, shop := range map[string]bool{binary: false, shopBinary: true} {
		data, err := os.ReadFile(bin)
		require.NoError(t, err)
		for _, m := range marks {
			require.Equal(t, shop, strings.Contains(string(data), m), "%s holds %q", bin, m)
		}
	}

	path := filepath.Join(t.TempDir(), "shop.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`broker: {url: "amqp://guest:guest@127.0.0.1:1/", exchange: events}
services:
  - name: stock
    database: postgres://postgres@127.0.0.1:1/stock
    pools:
      - name: stock-events
        queue: stock.events
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
  - name: shipping
    database: postgres://postgres@127.0.0.1:1/shipping
    pools:
      - name: shipping-events
        queue: shipping.events
        bindings: [order.order.status_changed.v1]
        handlers: [shipping.track_status]
`), 0o600))
	out, code := exitCodeOf(t, binary, "check", "-config", path)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `services[0].pools[0].handlers[0]: unknown handler "stock.reserve"`)
	require.Contains(t, out, `services[1].pools[0].handlers[0]: unknown handler "shipping.track_status"`)
	out, code = exitCodeOf(t, shopBinary, "check", "-config", path)
	require.Zero(t, code, out)
}

// The product's packages (internal/..., the public daemon and consumer,
// the commands) import nothing of examples/: an example depends on the
// product, never the reverse. (Tests may import the shop: `go list
// -deps` without -test leaves them out.)
func TestProductImportsNoExample(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "list", "-deps", "./internal/...", "./daemon/...", "./consumer/...", "./cmd/...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/platformd/platformd/internal/daemon", "the listing covers the product")
	for _, p := range deps {
		require.NotContains(t, p, "github.com/platformd/platformd/examples/", "a product package depends on %s", p)
	}
}
