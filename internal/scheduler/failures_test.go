package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/scheduler"
)

// The "failures:<service>" job deletes resolved and discarded failures
// past their retention, keeps the open ones and the recent closed ones,
// and sets platformd_failed_events from what is left.
func TestFailuresJobKeepsTheStoreToItsRetention(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// 3 failed now; 2 resolved and 1 discarded long ago; 1 resolved now.
	_, err := b.db.Exec(ctx, `INSERT INTO platform.failed_event (id, pool, failure_key, event_id, body, reason, state, updated_at)
		SELECT gen_random_uuid(), 'stock-events', 'k' || i, gen_random_uuid(), '\x7b7d', r, s, u
		FROM (VALUES (1, 'permanent', 'failed', now()), (2, 'permanent', 'failed', now()), (3, 'decode', 'failed', now()),
		             (4, 'permanent', 'resolved', now() - interval '40 days'), (5, 'permanent', 'resolved', now() - interval '40 days'),
		             (6, 'decode', 'discarded', now() - interval '31 days'), (7, 'permanent', 'resolved', now())) v(i, r, s, u)`)
	require.NoError(t, err)
	m := metrics.New()
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{{
		Name: "stock", DB: b.db, DefaultHorizon: 336 * time.Hour, MinHorizon: 24 * time.Hour, Every: -1,
		FailureRetention: 720 * time.Hour, FailuresEvery: time.Hour,
	}}, RowEstimateEvery: -1, Metrics: m})
	s.TestSignals().FailuresFinished.Init(t)
	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.TestSignals().FailuresFinished.WaitOrTimeout(), "the job's first run, at Start")
	var left int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM platform.failed_event`).Scan(&left))
	require.Equal(t, 4, left, "the three closed rows past 30 days deleted, the rest kept")
	gauge := func(reason, state string) float64 {
		return testutil.ToFloat64(m.Failures.FailedEvents.WithLabelValues("stock", "stock-events", reason, state))
	}
	require.InDelta(t, 2, gauge("permanent", "failed"), 0)
	require.InDelta(t, 1, gauge("decode", "failed"), 0)
	require.InDelta(t, 1, gauge("permanent", "resolved"), 0)
}
