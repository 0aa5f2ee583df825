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
// example shop's daemon (examples/shop/cmd/shopd: this test is about the
// example, so it reads examples/), built the same way, holds them all and
// accepts the same config, so that each check can fail. Nor does the
// release binary hold the tests' fixture shop.
func TestReleaseBinaryHasNoShop(t *testing.T) {
	t.Parallel()
	exampleShop := filepath.Join(t.TempDir(), "shopd")
	built, err := exec.Command("go", "build", "-race", "-o", exampleShop, "../../examples/shop/cmd/shopd").CombinedOutput()
	require.NoError(t, err, "%s", built)
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NotContains(t, string(data), "github.com/platformd/platformd/internal/fixture", "the release binary holds the tests' shop")

	marks := []string{"stock.reserve", "shipping.track_status", "github.com/platformd/platformd/examples/shop"}
	for bin, shop := range map[string]bool{binary: false, exampleShop: true} {
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
	out, code = exitCodeOf(t, exampleShop, "check", "-config", path)
	require.Zero(t, code, out)
}
