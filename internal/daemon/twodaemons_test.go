package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// Two daemons on the same service database: one relay is active between
// them, never two; when the active one's daemon stops, the other takes
// over within the lease's TTL.
func TestTwoDaemonsOneRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, "two_daemons")
	suffix := fmt.Sprint(time.Now().UnixNano())
	path := filepath.Join(t.TempDir(), "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/", exchange: two.%s}
services:
  - name: stock
    database: %q
    pools:
      - name: stock-events
        queue: two.stock.%s
        queue_type: classic
        bindings: [%s]
        handlers: [%s]
`, suffix, dsn, suffix, shop.EventOrderPlaced, shop.HandlerStockReserve)), 0o600))
	cfg, full, _ := loadShop(t, path)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	var ds [2]*Daemon
	for i := range ds {
		var err error
		ds[i], err = start(ctx, cfg, full, Options{}, map[string]bool{"stock": true}, logger)
		require.NoError(t, err)
		t.Cleanup(ds[i].Stop)
	}
	active := func() (n int, which int) {
		for i, d := range ds {
			for _, s := range d.serviceList() {
				if r := s.outboxRelay(); r != nil && r.Active() {
					n++
					which = i
				}
			}
		}
		return n, which
	}
	require.Eventually(t, func() bool { n, _ := active(); return n == 1 }, 20*time.Second, 20*time.Millisecond)
	// Never two, for a while.
	require.Never(t, func() bool { n, _ := active(); return n > 1 }, time.Second, 10*time.Millisecond)
	_, which := active()
	ds[which].Stop()
	other := ds[1-which]
	start := time.Now()
	require.Eventually(t, func() bool {
		for _, s := range other.serviceList() {
			if r := s.outboxRelay(); r != nil && r.Active() {
				return true
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the other daemon's relay takes over")
	t.Logf("takeover after %s", time.Since(start).Round(time.Millisecond))
}
