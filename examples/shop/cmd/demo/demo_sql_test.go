package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/testdb"
)

// The whole demo, for real, on the shop declared with SQL handlers only
// (examples/shop-sql/platformd.yaml) and run by the shop's daemon: a relay
// killed between confirm and delete (its republishes), a broker
// redelivery after a connection loss and SIGKILL, a replay, the outbox
// chain through stock's SQL announcement to shipping's parcels, and the
// same exactly-once report as the Go shop's. It runs in a vhost, databases
// and ports of its own.
func TestDemoWithSQLHandlers(t *testing.T) {
	vhost := "demo-sql-" + uuid.NewString()[:8]
	for _, args := range [][]string{{"add_vhost", vhost}, {"set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"}} {
		out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
		require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
	}
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", vhost).Run() })
	amqpURL := "amqp://guest:guest@127.0.0.1:5672/" + vhost
	if u := strings.TrimSpace(testAMQPURL()); u != "" {
		amqpURL = strings.TrimSuffix(u, "/") + "/" + vhost
	}
	t.Setenv("PLATFORMD_AMQP_URL", amqpURL)
	t.Setenv("PLATFORMD_ORDER_DB", testdb.New(t, "demo_sql_order"))
	t.Setenv("PLATFORMD_STOCK_DB", testdb.New(t, "demo_sql_stock"))
	t.Setenv("PLATFORMD_SHIPPING_DB", testdb.New(t, "demo_sql_shipping"))
	t.Setenv("PLATFORMD_ADMIN_LISTEN", freeAddr(t))
	t.Setenv("PLATFORMD_METRICS_LISTEN", freeAddr(t))

	root, err := findRoot()
	require.NoError(t, err)
	o := options{orders: 300, relayKills: 1, replayShare: 0.05, kills: 1, timeout: 3 * time.Minute, seed: 7,
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

func testAMQPURL() string {
	return os.Getenv("TEST_AMQP_URL")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
