package tenants

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/broker"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// BrokerCostEnv names how many pools TestBrokerCostPerPool declares (of
// each queue type); unset, the test is skipped. Quorum queues are Raft
// groups: hundreds of them strain a small shared node, so keep N modest
// on a broker others use (docs/tenants.md extrapolates).
const BrokerCostEnv = "PLATFORMD_BROKER_COST"

// BrokerCostTypesEnv names the queue types TestBrokerCostPerPool declares,
// comma-separated (default "classic,quorum"): "classic" alone measures a
// hundred pools without putting 600 Raft groups on a node others use.
const BrokerCostTypesEnv = "PLATFORMD_BROKER_COST_TYPES"

// TestBrokerCostPerPool declares N pools' topology (a queue each, and the
// sample's four retry delays, whose delay queues every pool shares;
// failures are rows, not a queue) as classic then as quorum queues,
// and reports the declare time and the broker's memory growth per pool
// (rabbitmqctl status, node-wide: noisy on a shared node), then deletes
// them.
func TestBrokerCostPerPool(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(BrokerCostEnv))
	if n <= 0 {
		t.Skip("set " + BrokerCostEnv + "=N to measure what N pools cost the broker")
	}
	delays := []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute}
	deleteCreatedDelays(t, delays)
	types := strings.Split(cmp.Or(os.Getenv(BrokerCostTypesEnv), "classic,quorum"), ",")
	for _, typ := range types {
		require.Contains(t, []string{"classic", "quorum"}, typ, BrokerCostTypesEnv)
		conn, err := amqp.Dial(amqpURL)
		require.NoError(t, err)
		ch, err := conn.Channel()
		require.NoError(t, err)
		suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
		before := brokerMemory(t)
		start := time.Now()
		var queues []string
		for i := range n {
			topo := broker.Topology{Exchange: "tenants.cost." + suffix, Queue: fmt.Sprintf("tenants.cost.%s.%s.%03d", typ, suffix, i),
				QueueType: typ, Bindings: []string{"tenants.cost.v1"}, RetryDelays: delays}
			require.NoError(t, topo.Declare(ch))
			// The delay queues are shared by every pool of the vhost: the
			// first pool declares them, the others find them.
			require.NoError(t, topo.DeclareDelays(t.Context(), dialer{}, slog.New(slog.DiscardHandler)))
			queues = append(queues, topo.Queue)
		}
		took := time.Since(start)
		after := brokerMemory(t)
		// No failure queue: failures are rows of the service database.
		probe, err := conn.Channel() // a failed passive declare closes its channel
		require.NoError(t, err)
		_, err = probe.QueueDeclarePassive(broker.FailedQueue(queues[0]), true, false, false, false, nil)
		var amqpErr *amqp.Error
		require.ErrorAs(t, err, &amqpErr, "%s is declared", broker.FailedQueue(queues[0]))
		require.Equal(t, amqp.NotFound, amqpErr.Code)
		t.Logf("%d %s pools: %d queues declared in %s (%s per pool); broker memory %+.1f MiB (%.2f MiB per pool)",
			n, typ, len(queues), took.Round(time.Millisecond), (took / time.Duration(n)).Round(time.Microsecond),
			float64(after-before)/(1<<20), float64(after-before)/(1<<20)/float64(n))
		lo, mean, hi := queueMemory(t, queues)
		t.Logf("  memory of one %s queue's processes (rabbitmqctl list_queues memory): mean %.0f KiB, min %.0f, max %.0f",
			typ, mean/1024, lo/1024, hi/1024)
		start = time.Now()
		for _, q := range queues {
			_, err := ch.QueueDelete(q, false, false, false)
			require.NoError(t, err)
		}
		require.NoError(t, ch.ExchangeDelete("tenants.cost."+suffix, false, false))
		t.Logf("  deleted in %s", time.Since(start).Round(time.Millisecond))
		require.NoError(t, conn.Close())
	}
}

// deleteCreatedDelays deletes, when the test ends, the shared delay queues
// of delays that do not exist now: those the test creates.
func deleteCreatedDelays(t *testing.T, delays []time.Duration) {
	t.Helper()
	var created []string
	for _, d := range delays {
		ch, err := dialer{}.Channel(t.Context())
		require.NoError(t, err)
		if _, err := ch.QueueDeclarePassive(broker.DelayQueue(d), true, false, false, false, nil); err != nil {
			created = append(created, broker.DelayQueue(d))
		}
		_ = ch.Close()
	}
	t.Cleanup(func() {
		ch, err := dialer{}.Channel(context.Background())
		require.NoError(t, err)
		defer func() { _ = ch.Close() }()
		for _, name := range created {
			_, err := ch.QueueDelete(name, false, false, false)
			require.NoError(t, err)
			require.NoError(t, ch.ExchangeDelete(name, false, false))
		}
	})
}

// queueMemory is the least, mean and most memory of the named queues'
// processes, in bytes, from rabbitmqctl list_queues (for a quorum queue,
// its Raft member's process; the log's ETS tables and the WAL are
// node-wide and show only in the node's total).
func queueMemory(t *testing.T, queues []string) (lo, mean, hi float64) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_queues", "-p", "/", "--quiet", "--no-table-headers", "name", "memory").Output()
	require.NoError(t, err)
	want := make(map[string]bool, len(queues))
	for _, q := range queues {
		want[q] = true
	}
	var sum float64
	n := 0
	lo = math.MaxFloat64
	for line := range strings.SplitSeq(string(out), "\n") {
		fs := strings.Fields(line)
		if len(fs) != 2 || !want[fs[0]] {
			continue
		}
		v, err := strconv.ParseFloat(fs[1], 64)
		require.NoError(t, err)
		sum += v
		n++
		lo, hi = min(lo, v), max(hi, v)
	}
	require.Positive(t, n, "no queue of the test listed")
	return lo, sum / float64(n), hi
}

// dialer opens each channel on a connection of its own to the test broker
// (a broker.ChannelOpener), closed with the channel.
type dialer struct{}

func (dialer) Channel(context.Context) (*amqp.Channel, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	go func() {
		for range closed { // closed when the channel is, after its error if any
		}
		_ = conn.Close()
	}()
	return ch, nil
}

// brokerMemory is the broker node's total memory (Erlang's view), from
// rabbitmqctl status.
func brokerMemory(t *testing.T) int64 {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "status", "--formatter=json").Output()
	if err != nil {
		t.Skipf("rabbitmqctl status: %v", err)
	}
	var st struct {
		Memory struct {
			Total struct {
				Erlang int64 `json:"erlang"`
			} `json:"total"`
		} `json:"memory"`
	}
	require.NoError(t, json.Unmarshal(out, &st))
	return st.Memory.Total.Erlang
}
