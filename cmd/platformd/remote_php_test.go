package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// requirePHP skips the test without php, unless CI is set: CI must run
// it (scripts/services.sh installs Debian's php-cli).
func requirePHP(t *testing.T) string {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("php is not installed, and CI must run the PHP example: scripts/services.sh installs Debian's php-cli")
		}
		t.Skip("php is not installed (scripts/services.sh installs Debian's php-cli)")
	}
	return php
}

// startHandler serves the example's handler in lang: php (handler.php
// with php -S) or python (examples/billing-python), its log in logPath,
// and returns its URL.
func startHandler(t *testing.T, lang, logPath string) string {
	t.Helper()
	addr := freePort(t)
	var cmd *exec.Cmd
	switch lang {
	case "php":
		handler, err := filepath.Abs(filepath.Join("..", "..", "examples", "billing-php", "handler.php"))
		require.NoError(t, err)
		cmd = exec.Command(requirePHP(t), "-S", addr, handler)
	default:
		python, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("python3 is not installed")
		}
		handler, err := filepath.Abs(filepath.Join("..", "..", "examples", "billing-python", "handler.py"))
		require.NoError(t, err)
		cmd = exec.Command(python, handler, addr)
	}
	cmd.Env = append(os.Environ(), "PHP_CLI_SERVER_WORKERS=4", "BILLING_LOG="+logPath)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	// Its own process group: PHP_CLI_SERVER_WORKERS forks workers, which
	// the kill must reach too (they hold the output pipe open).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "the %s handler did not start", lang)
	return "http://" + addr + "/handle"
}

// ask is one line of the PHP handler's log.
type ask struct {
	attempt int
	at      time.Time
}

func readAsks(t *testing.T, path string) map[string][]ask {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string][]ask{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "log line %q", line)
		a, err := strconv.Atoi(f[1])
		require.NoError(t, err)
		sec, err := strconv.ParseFloat(f[2], 64)
		require.NoError(t, err)
		out[f[0]] = append(out[f[0]], ask{attempt: a, at: time.Unix(0, int64(sec*1e9))})
	}
	return out
}

// The PHP example for real: the release binary runs examples/billing-php's
// own platformd.yaml against php -S serving handler.php; a duplicated
// workload, the daemon SIGKILLed in the middle and started again: one
// invoice per order, and the handler's own log shows that an event was
// asked about again only when its first ask came before the kill (its
// batch died uncommitted), never after its effects committed.
//
// The Python handler (examples/billing-python) runs the same test with the
// same platformd.yaml.
func TestBillingPHPExample(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"php", "python"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			testBillingExample(t, lang)
		})
	}
}

func testBillingExample(t *testing.T, lang string) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "asks.log")
	url := startHandler(t, lang, logPath)
	suffix := uuid.NewString()[:8]
	exchange, queue := "e2e.events."+suffix, "e2e.billing."+suffix
	t.Cleanup(func() { deleteQueues(exchange, queue) })
	dsn := testdb.New(t, "e2e_billing_php")
	adminAddr, metricsAddr := freePort(t), freePort(t)
	cfg, err := filepath.Abs(filepath.Join("..", "..", "examples", "billing-php", "platformd.yaml"))
	require.NoError(t, err)
	env := append(os.Environ(), "PLATFORMD_ADMIN_LISTEN="+adminAddr, "PLATFORMD_METRICS_LISTEN="+metricsAddr,
		"PLATFORMD_AMQP_URL="+testenv.AMQPURL(), "PLATFORMD_EXCHANGE="+exchange, "PLATFORMD_BILLING_DB="+dsn,
		"PLATFORMD_BILLING_QUEUE="+queue, "BILLING_HANDLER_URL="+url, "PLATFORMD_ADMIN_TOKEN="+adminToken)

	out, err := runWithEnv(env, "check", "-config", cfg)
	require.NoError(t, err, out)
	start := func() *daemon {
		d := &daemon{cmd: exec.Command(binary, "run", "-config", cfg), stderr: &lockedWriter{buf: &bytes.Buffer{}}, done: make(chan error, 1)}
		d.cmd.Env = env
		d.cmd.Stderr = d.stderr
		require.NoError(t, d.cmd.Start())
		go func() { d.done <- d.cmd.Wait() }()
		t.Cleanup(func() {
			_ = d.cmd.Process.Kill()
			err := <-d.done
			d.done <- err
		})
		cli, ctx := adminClient(t, adminAddr, adminToken)
		require.Eventually(t, func() bool {
			r, err := cli.ListPools(ctx, &adminv1.ListPoolsRequest{})
			return err == nil && len(r.GetPools()) == 1 && r.GetPools()[0].GetState() == adminv1.PoolState_POOL_STATE_RUNNING
		}, 60*time.Second, 50*time.Millisecond, "daemon did not start: %s", d.stderr)
		return d
	}
	d := start()
	invoices := func() int { return count(t, dsn, `SELECT count(*) FROM invoice`) }

	// A duplicated workload, published while the daemon runs; killed once
	// it has applied a part of it.
	const orders = 600
	published := make(chan error, 1)
	go func() { published <- publishBilling(exchange, orders, 3) }()
	require.Eventually(t, func() bool { return invoices() >= 100 }, 60*time.Second, 20*time.Millisecond, "logs:\n%s", d.stderr)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	d.done <- <-d.done // waited for; left for its cleanup
	killedAt := time.Now()
	d = start()
	require.NoError(t, <-published)
	require.Eventually(t, func() bool { return invoices() == orders }, 90*time.Second, 50*time.Millisecond, "logs:\n%s", d.stderr)

	require.Equal(t, orders, count(t, dsn, `SELECT count(DISTINCT order_id) FROM invoice`), "one invoice per order")
	require.Equal(t, orders, count(t, dsn, `SELECT count(DISTINCT event_id) FROM invoice`))
	require.Equal(t, orders, count(t, dsn, `SELECT count(*) FROM processed_event`))
	require.Equal(t, orders, count(t, dsn, `SELECT count(*) FROM invoice WHERE quantity = 3.500 AND lines = 2`), "quantities summed as written")
	asks := readAsks(t, logPath)
	require.Len(t, asks, orders)
	again := 0
	for id, as := range asks {
		for i, a := range as {
			require.Zero(t, a.attempt, "event %s", id)
			if i > 0 {
				again++
				// Asked again: the earlier ask was before the kill (its
				// batch died with the daemon), this one after it.
				require.True(t, as[i-1].at.Before(killedAt), "event %s asked twice after the kill: %v", id, as)
				require.True(t, a.at.After(killedAt), "event %s asked twice before the kill: %v", id, as)
			}
		}
		require.LessOrEqual(t, len(as), 2, "event %s", id)
	}
	t.Logf("%d events, %d asked again after the kill (their batch died uncommitted)", orders, again)
}

// publishBilling sends n two-line orders to exchange, every dupEvery-th
// twice, with confirms.
func publishBilling(exchange string, n, dupEvery int) error {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	for i := range n {
		o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{
			{ProductID: uuid.New(), Quantity: "1.250"}, {ProductID: uuid.New(), Quantity: "2.250"}}}
		payload, _ := json.Marshal(o)
		body, err := envelope.Encode(envelope.Envelope{EventID: uuid.Must(uuid.NewV7()), EventName: shop.EventOrderPlaced, OccurredAt: time.Now().UTC(), Payload: payload})
		if err != nil {
			return err
		}
		for range 1 + min(1, i%dupEvery) {
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), exchange, shop.EventOrderPlaced, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body})
			if err != nil {
				return err
			}
			if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
				return err
			}
		}
	}
	return nil
}

// runWithEnv runs the binary with env and returns its combined output.
func runWithEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// deleteQueues removes a test's exchange and its queue's family.
func deleteQueues(exchange, queue string) {
	conn, err := amqp.Dial(testenv.AMQPURL())
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	for _, n := range []string{queue, queue + ".retry.1s", queue + ".retry.10s", queue + ".retry.1m", queue + ".retry.10m"} {
		_, _ = ch.QueueDelete(n, false, false, false)
	}
	_ = ch.ExchangeDelete(exchange, false, false)
}
