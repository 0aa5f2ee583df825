package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/scheduler"
)

// The "archive:<service>" job keeps the outbox archive to its period: a
// day of archived rows older than it is dropped whole; today's stays, and
// the days ahead are created.
func TestArchiveJobDropsPastDays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var today time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&today))
	old := today.Add(-5 * 24 * time.Hour)
	name := "platform.outbox_archive_p" + old.UTC().Format("20060102")
	_, err := b.db.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE platform.outbox_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name))
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, fmt.Sprintf(`ALTER TABLE platform.outbox_archive ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
		name, old.Format(time.RFC3339), old.Add(24*time.Hour).Format(time.RFC3339)))
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'x', $1, '{}', $1, $1 FROM generate_series(1, 10)`, old.Add(time.Hour))
	require.NoError(t, err)

	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{{
		Name: "stock", DB: b.db, DefaultHorizon: 336 * time.Hour, MinHorizon: 24 * time.Hour, Every: -1,
		Archive: 72 * time.Hour, ArchiveEvery: time.Hour,
	}}, RowEstimateEvery: -1})
	s.TestSignals().ArchiveFinished.Init(t)
	require.NoError(t, s.Start(ctx))
	require.NoError(t, s.TestSignals().ArchiveFinished.WaitOrTimeout(), "the job's first run, at Start")
	partitions := func() int {
		var n int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'platform.outbox_archive'::regclass AND c.relname LIKE 'outbox_archive_p%'`).Scan(&n))
		return n
	}
	var gone bool
	require.NoError(t, b.db.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, name).Scan(&gone))
	require.True(t, gone, "the old day dropped at the job's first run")
	require.Equal(t, 3, partitions(), "today and two days ahead created")
	var n int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM platform.outbox_archive`).Scan(&n))
	require.Zero(t, n)
}
