package tenants

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/testdb"
)

// quorumDelays are the retry delays of TestManyTenantsOnQuorum's pools.
var quorumDelays = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}

// TestManyTenantsOnQuorum is TestManyTenants on quorum queues (the
// default queue type) with three retry delays, in a vhost of its own: N
// services (PLATFORMD_TENANTS) cost the broker N queues and one delay
// queue per delay, N+3 queues (Raft groups) in all, where one delay queue
// per pool and delay made 4N. It checks that count, a fan-out (an event
// published twice) applied once in every tenant, and an event that fails
// until its third retry applied once in every tenant at attempt 3: each
// retry, through each shared delay queue, came back to its own tenant's
// queue. It reports how long the daemon took to come up, the fan-out and
// the retries, and deletes the vhost (every queue in it) at the end.
//
// It needs a database connection per service and ten more (its
// database_budget), so the server's max_connections, less 30 for other
// clients, bounds N (69 on a server of 100): run it alone, through make
// tenants-quorum.
func TestManyTenantsOnQuorum(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(TenantsEnv))
	if n <= 0 {
		t.Skip("set " + TenantsEnv + "=N (make tenants-quorum) to host N services on quorum queues in one daemon")
	}
	vhost := "tenants-quorum-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	rabbitmqctl(t, "add_vhost", vhost)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", vhost) })
	rabbitmqctl(t, "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
	// A control session per service and ten to share: the proof is the
	// broker's, and a server others use keeps the rest of its connections.
	budget := min(tenantsBudget(t, n), n+10)
	f := startFleet(t, fleetConfig{n: n, budget: budget, quorum: true, delays: quorumDelays, vhost: vhost})

	queues := vhostQueues(t, vhost)
	t.Logf("%d services on quorum queues, retry delays %v: %d queues in the vhost", n, quorumDelays, len(queues))
	require.LessOrEqual(t, len(queues), n+len(quorumDelays), "a queue per pool and one per delay: %v", queues)

	fanout, retried := uuid.New(), uuid.New()
	f.failUntil[retried] = len(quorumDelays)
	start := time.Now()
	f.publish([]uuid.UUID{fanout}, 2, nil)
	f.publish([]uuid.UUID{retried}, 1, nil)
	refused := f.settle([]uuid.UUID{fanout, retried}, 3*time.Minute)
	took := time.Since(start)
	applied, twice, lost := f.assertExactlyOnce(f.check([]uuid.UUID{fanout, retried}))
	t.Logf("%d services: a fan-out (published twice) and an event retried through every delay (%s of delays) applied once each in every service after %s: %d applied, %d twice, %d lost (the checker refused %d times)",
		n, sum(quorumDelays), took.Round(time.Millisecond), applied, twice, lost, refused)

	// Each tenant applied the retried event at its last attempt, after
	// each delay: its retries came back to its own queue.
	ctx := context.Background()
	for i, name := range f.names {
		c, err := pgx.Connect(ctx, testdb.WithDatabase(testdb.AdminURL(), name))
		require.NoError(t, err)
		var attempt int
		err = c.QueryRow(ctx, `SELECT attempt FROM applied_attempt WHERE event_id = $1`, retried).Scan(&attempt)
		_ = c.Close(ctx)
		require.NoError(t, err, "service %d", i)
		require.Equal(t, len(quorumDelays), attempt, "service %d applied the retried event at its last attempt", i)
	}
	queues = vhostQueues(t, vhost)
	require.Len(t, queues, n+len(quorumDelays), "every delay used, each queue declared once: %v", queues)
	for _, d := range quorumDelays {
		require.Contains(t, queues, "platformd.retry."+d.String())
	}
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}

// vhostQueues lists the queues of vhost (rabbitmqctl: no management plugin
// needed).
func vhostQueues(t *testing.T, vhost string) []string {
	t.Helper()
	return strings.Fields(rabbitmqctl(t, "list_queues", "-p", vhost, "--quiet", "--no-table-headers", "name"))
}

func rabbitmqctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
	return string(out)
}
