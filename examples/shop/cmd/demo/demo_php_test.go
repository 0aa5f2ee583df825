package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The whole demo with billing in PHP (-billing-php): the shop plus a
// billing service whose handler is examples/billing-php/handler.php
// served by php -S and called by the shop's daemon as a remote handler,
// through the simulated relay crash, the broker redelivery after a SIGKILL and the
// replay: the same exactly-once report, and one invoice per order. It
// skips without php unless CI is set.
func TestDemoWithBillingPHP(t *testing.T) {
	if _, err := exec.LookPath("php"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("php is not installed, and CI must run the PHP demo: scripts/services.sh installs Debian's php-cli")
		}
		t.Skip("php is not installed (scripts/services.sh installs Debian's php-cli)")
	}
	t.Setenv("PLATFORMD_AMQP_URL", newVhost(t, "demo-php"))
	t.Setenv("PLATFORMD_ORDER_DB", newDatabase(t, "demo_php_order"))
	t.Setenv("PLATFORMD_STOCK_DB", newDatabase(t, "demo_php_stock"))
	t.Setenv("PLATFORMD_SHIPPING_DB", newDatabase(t, "demo_php_shipping"))
	t.Setenv("PLATFORMD_BILLING_DB", newDatabase(t, "demo_php_billing"))
	t.Setenv("PLATFORMD_ADMIN_LISTEN", freeAddr(t))
	t.Setenv("PLATFORMD_METRICS_LISTEN", freeAddr(t))
	t.Setenv("BILLING_HANDLER_URL", "http://"+freeAddr(t)+"/handle")

	o := options{orders: 300, relayCrashes: 1, replayShare: 0.05, kills: 1, timeout: 3 * time.Minute, seed: 11,
		billingPHP: true, resultsDir: t.TempDir()}
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), o, &out), out.String())
	report := out.String()
	t.Log(report)
	require.Regexp(t, `exactly once:\s+OK`, report)
	require.Regexp(t, `invoices \(billing, PHP\):\s+300 \(expected 300\)`, report)
	require.Contains(t, report, "billing processed_event rows 300")
}
