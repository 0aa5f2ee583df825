package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The whole demo, for real, on the shop declared with SQL handlers only
// (examples/shop-sql/platformd.yaml) and run by the shop's daemon, built
// without any build tag: a simulated relay crash (published outbox rows
// written back, so the relay republishes them), a broker
// redelivery after a connection loss and SIGKILL, a replay, the outbox
// chain through stock's SQL announcement to shipping's parcels, and the
// same exactly-once report as the Go shop's. It runs in a vhost, databases
// and ports of its own.
func TestDemoWithSQLHandlers(t *testing.T) {
	t.Setenv("PLATFORMD_AMQP_URL", newVhost(t, "demo-sql"))
	t.Setenv("PLATFORMD_ORDER_DB", newDatabase(t, "demo_sql_order"))
	t.Setenv("PLATFORMD_STOCK_DB", newDatabase(t, "demo_sql_stock"))
	t.Setenv("PLATFORMD_SHIPPING_DB", newDatabase(t, "demo_sql_shipping"))
	t.Setenv("PLATFORMD_ADMIN_LISTEN", freeAddr(t))
	t.Setenv("PLATFORMD_METRICS_LISTEN", freeAddr(t))

	root, err := findRoot()
	require.NoError(t, err)
	o := options{orders: 300, relayCrashes: 1, replayShare: 0.05, kills: 1, timeout: 3 * time.Minute, seed: 7,
		config: filepath.Join(root, "examples", "shop-sql", "platformd.yaml"), resultsDir: t.TempDir()}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out), out.String())
	report := out.String()
	t.Log(report)
	require.Regexp(t, `exactly once:\s+OK`, report)
	m := regexp.MustCompile(`duplicates skipped:\s+\d+\s+\(relay republish (\d+), broker redelivery (\d+), replay (\d+)\)`).FindStringSubmatch(report)
	require.NotNil(t, m, report)
	for i, what := range []string{"relay republish", "broker redelivery", "replay"} {
		n, _ := strconv.Atoi(m[i+1])
		require.Positive(t, n, "%s duplicates provoked and skipped", what)
	}
	require.Regexp(t, `parcels prepared:\s+300 \(expected 300\)`, report)
	require.Regexp(t, `processed_event rows:\s+stock 300, shipping \d+`, report)
}
