package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// The queue depth gauge follows the pool's queue as the broker counts it:
// N events published while the pool is paused read N, the drain after the
// resume reads 0, and a daemon that stops leaves no gauge behind.
func TestQueueDepthGaugeFollowsTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newLimitsEnv(t, "limits_depth")
	e.depthEvery = 50 * time.Millisecond
	d := e.startDaemons(t, 1, "")[0]
	poolOf(t, d)
	b := &backend{d: d}
	_, err := b.PausePool(ctx, "stock-events", "depth test", "ops")
	require.NoError(t, err)

	gauge := d.metrics.Limits.QueueReady.WithLabelValues("stock", "stock-events")
	const n = 50
	e.publish(t, n)
	require.Eventually(t, func() bool { return testutil.ToFloat64(gauge) == n }, 30*time.Second, 20*time.Millisecond,
		"the gauge reads the paused pool's backlog")
	require.Zero(t, e.processed(t))

	_, err = b.ResumePool(ctx, "stock-events", "ops")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return e.processed(t) == n && testutil.ToFloat64(gauge) == 0 }, 30*time.Second, 20*time.Millisecond,
		"the gauge reads the drained queue")

	d.Stop()
	require.Zero(t, testutil.CollectAndCount(d.metrics.Limits.QueueReady), "a stopped daemon shows no queue depth")
}
