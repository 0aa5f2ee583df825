package scheduler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/scheduler"
)

// A scheduled or admin run on a partitioned processed_event drops the
// expired partitions, against the horizon rounded up to whole days, logs
// that horizon, counts the rows and keeps the partitions ahead; the row
// estimate sums the partitions.
func TestRunNowPartitioned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, dedup.EnsureLayout(ctx, b.db, dedup.LayoutPartitioned, 30*time.Hour, 2))
	now := b.dbNow(t)
	_, err := dedup.EnsurePartitions(ctx, b.db, now.Add(-5*24*time.Hour), now)
	require.NoError(t, err)
	// 100 rows four days old (wholly expired at 48h), 20 of today.
	_, err = b.db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
		SELECT encode(set_byte(overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send((extract(epoch FROM t) * 1000)::int8) FROM 3) FROM 1 FOR 6),
			6, (get_byte(uuid_send(gen_random_uuid()), 6) & 15) | 112), 'hex')::uuid, t
		FROM (SELECT $1::timestamptz AS t FROM generate_series(1, 100) UNION ALL SELECT now() FROM generate_series(1, 20)) s`,
		now.Add(-4*24*time.Hour))
	require.NoError(t, err)

	m := metrics.New()
	logs := &logRecorder{}
	sc := service(b.db, 30*time.Hour)
	sc.Ahead = 4
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}, Metrics: m, Logger: slog.New(logs), RowEstimateEvery: time.Hour})
	dry, err := s.RunNow(ctx, "stock", true, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 100, dry.Deleted)
	require.Equal(t, 120, b.rows(t))

	run, err := s.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 100, run.Deleted)
	require.Equal(t, 20, b.rows(t))
	require.WithinDuration(t, run.StartedAt.Add(-48*time.Hour), run.Cutoff, 2*time.Second, "30h rounded up to 48h")
	done := logs.find("scheduler: purge done")
	require.Len(t, done, 2)
	require.Equal(t, "48h0m0s", done[1].Attrs["horizon"])
	require.InDelta(t, 100, testutil.ToFloat64(m.PurgeRowsDeleted.WithLabelValues("stock")), 0)
	parts, err := dedup.ListPartitions(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, now.UTC().Truncate(24*time.Hour).Add(4*24*time.Hour), parts[len(parts)-1].From)

	_, err = b.db.Exec(ctx, `ANALYZE processed_event`)
	require.NoError(t, err)
	n, err := dedup.EstimateRows(ctx, b.db)
	require.NoError(t, err)
	require.EqualValues(t, 20, n)
}
