package outbox

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// archived counts the archive's rows by event id.
func (b *bundle) archived() map[uuid.UUID]int {
	b.t.Helper()
	rows, err := b.check.Query(context.Background(), `SELECT event_id FROM platform.outbox_archive`)
	require.NoError(b.t, err)
	defer rows.Close()
	out := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		require.NoError(b.t, rows.Scan(&id))
		out[id]++
	}
	require.NoError(b.t, rows.Err())
	return out
}

// TestRelayArchivesPublishedRows: with Archive on, every confirmed row
// moves to the archive with its columns and a published_at; without it,
// nothing is archived.
func TestRelayArchivesPublishedRows(t *testing.T) {
	t.Parallel()
	for _, archive := range []bool{true, false} {
		t.Run(map[bool]string{true: "On", false: "Off"}[archive], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			deliveries := b.consume()
			var id uuid.UUID
			require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.archive', '{"a": 1}', '{"h": "v"}')`).Scan(&id))
			b.relay(func(c *Config) { c.Archive = archive })
			receive(t, deliveries, 1, 10*time.Second)
			waitFor(t, 10*time.Second, "the row to leave the outbox", func() bool { return b.pending() == 0 })
			if !archive {
				require.Empty(t, b.archived())
				return
			}
			var name, payload, headers string
			var published, created time.Time
			require.NoError(t, b.check.QueryRow(ctx, `SELECT event_name, payload::text, headers::text, created_at, published_at
				FROM platform.outbox_archive WHERE event_id = $1`, id).Scan(&name, &payload, &headers, &created, &published))
			require.Equal(t, "test.archive", name)
			require.JSONEq(t, `{"a": 1}`, payload)
			require.JSONEq(t, `{"h": "v"}`, headers)
			require.False(t, published.Before(created))
		})
	}
}

// TestArchiveCrashBetweenConfirmAndDelete: a relay session that dies
// between the confirm and the delete leaves its rows in the outbox (none
// archived); they are published again and archived once. At every moment
// each row is in the outbox or in the archive.
func TestArchiveCrashBetweenConfirmAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	deliveries := b.consume()
	const n = 50
	for range n {
		_, err := b.check.Exec(ctx, `SELECT platform.publish('test.crash', '{}')`)
		require.NoError(t, err)
	}
	var neither atomic.Int64
	cr := &crash{b: b, t: t, each: func(ids []uuid.UUID) {
		// Every row is in exactly one table at each confirm.
		var inNeither int64
		if err := b.check.QueryRow(ctx, `SELECT count(*) FROM unnest($1::uuid[]) u(id)
			WHERE NOT EXISTS (SELECT 1 FROM platform.outbox o WHERE o.event_id = u.id)
			AND NOT EXISTS (SELECT 1 FROM platform.outbox_archive a WHERE a.event_id = u.id)`, ids).Scan(&inNeither); err != nil {
			t.Error(err)
		}
		neither.Add(inNeither)
	}}
	b.relay(func(c *Config) {
		c.BatchSize = 20
		c.Archive = true
		c.Test.AfterConfirmFunc = cr.afterConfirm
	})
	got := receive(t, deliveries, n, 30*time.Second)
	waitFor(t, 10*time.Second, "every row to be archived", func() bool { return b.pending() == 0 && len(b.archived()) == n })
	inFlight := cr.inFlight()
	require.Len(t, inFlight, 20)
	for _, id := range inFlight {
		require.Len(t, got[id.String()], 2, "a confirmed row not deleted is published again")
	}
	for id, c := range b.archived() {
		require.Equal(t, 1, c, "archived once: %s", id)
	}
	require.Zero(t, neither.Load(), "a row was in neither table")
}

// TestPurgeArchive: partitions whose day ended before now() minus the
// period are dropped whole with their rows; today's and the days ahead
// stay; a second run is a no-op.
func TestPurgeArchive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := EnsureArchivePartitions(ctx, b.check, ArchiveAheadDefault)
	require.NoError(t, err)
	// Five past days, three rows each, published at noon of their day.
	var now time.Time
	require.NoError(t, b.check.QueryRow(ctx, `SELECT now()`).Scan(&now))
	today := now.UTC().Truncate(ArchiveWidth)
	for d := 1; d <= 5; d++ {
		day := today.Add(-time.Duration(d) * ArchiveWidth)
		name := "platform." + archivePartName(day)
		_, err := b.check.Exec(ctx, `CREATE TABLE `+name+` (LIKE platform.outbox_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`)
		require.NoError(t, err)
		_, err = b.check.Exec(ctx, `ALTER TABLE platform.outbox_archive ATTACH PARTITION `+name+` FOR VALUES FROM ($$`+
			day.Format(time.RFC3339)+`$$) TO ($$`+day.Add(ArchiveWidth).Format(time.RFC3339)+`$$)`)
		require.NoError(t, err)
		_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
			SELECT gen_random_uuid(), 'test.old', $1, '{}', $1, $1 FROM generate_series(1, 3)`, day.Add(12*time.Hour))
		require.NoError(t, err)
	}
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		VALUES (gen_random_uuid(), 'test.new', now(), '{}', now(), now())`)
	require.NoError(t, err)

	// A period of 2 days 1 hour: the days that ended at least that long
	// ago are the 3rd, 4th and 5th before today.
	res, err := PurgeArchive(ctx, b.check, 49*time.Hour)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{
		archivePartName(today.Add(-3 * ArchiveWidth)), archivePartName(today.Add(-4 * ArchiveWidth)), archivePartName(today.Add(-5 * ArchiveWidth)),
	}, res.Dropped)
	require.Equal(t, int64(9), res.Rows)
	// The 2nd day's rows, at noon, are past the cutoff too when it is past
	// 13:00 UTC now: the day's partition stays, its rows go.
	want := 1 + 3
	if !today.Add(-2 * ArchiveWidth).Add(12 * time.Hour).Before(res.Cutoff) {
		want += 3
	}
	var old, kept int
	require.NoError(t, b.check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at < $1), count(*) FROM platform.outbox_archive`,
		res.Cutoff).Scan(&old, &kept))
	require.Zero(t, old, "nothing older than the period stays")
	require.Equal(t, want, kept)

	res, err = PurgeArchive(ctx, b.check, 49*time.Hour)
	require.NoError(t, err)
	require.Empty(t, res.Dropped)
}

// TestPurgeArchiveStraddlingDay: the partition whose day holds the cutoff
// keeps only the rows published after it: those before go in bounded
// batches (several here), the others stay, and so do the partition and
// the days after. Without the trim, the rows published up to a day before
// the cutoff stayed until their whole day passed it.
func TestPurgeArchiveStraddlingDay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := EnsureArchivePartitions(ctx, b.check, ArchiveAheadDefault)
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, b.check.QueryRow(ctx, `SELECT now()`).Scan(&now))
	// The cutoff falls at noon three days ago (the period is measured so).
	day := now.UTC().Truncate(ArchiveWidth).Add(-3 * ArchiveWidth)
	noon := day.Add(12 * time.Hour)
	name := "platform." + archivePartName(day)
	_, err = b.check.Exec(ctx, `CREATE TABLE `+name+` (LIKE platform.outbox_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`)
	require.NoError(t, err)
	_, err = b.check.Exec(ctx, `ALTER TABLE platform.outbox_archive ATTACH PARTITION `+name+` FOR VALUES FROM ($$`+
		day.Format(time.RFC3339)+`$$) TO ($$`+day.Add(ArchiveWidth).Format(time.RFC3339)+`$$)`)
	require.NoError(t, err)
	// 50 rows in the morning up to a second before noon, 20 from a few
	// seconds after noon to the evening.
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'test.old', t, '{}', t, t
		FROM generate_series(1, 50) g, LATERAL (SELECT $1::timestamptz - g * interval '10 minutes' + interval '9 minutes 59 seconds') x(t)`, noon)
	require.NoError(t, err)
	_, err = b.check.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
		SELECT gen_random_uuid(), 'test.kept', t, '{}', t, t
		FROM generate_series(1, 20) g, LATERAL (SELECT $1::timestamptz + g * interval '10 minutes' - interval '9 minutes 55 seconds') x(t)`, noon)
	require.NoError(t, err)
	var period time.Duration
	require.NoError(t, b.check.QueryRow(ctx, `SELECT (extract(epoch FROM now() - $1::timestamptz) * 1e9)::bigint`, noon).Scan(&period))

	res, err := purgeArchive(ctx, b.check, period, 7)
	require.NoError(t, err)
	require.Empty(t, res.Dropped)
	require.Equal(t, day, res.Cutoff.UTC().Truncate(ArchiveWidth), "the cutoff is in the day")
	require.Equal(t, int64(50), res.Trimmed)
	var old, kept int
	require.NoError(t, b.check.QueryRow(ctx, `SELECT count(*) FILTER (WHERE event_name = 'test.old'), count(*) FILTER (WHERE event_name = 'test.kept')
		FROM `+name).Scan(&old, &kept))
	require.Zero(t, old, "rows published before the cutoff stay in its day's partition")
	require.Equal(t, 20, kept)

	res, err = purgeArchive(ctx, b.check, period, 7)
	require.NoError(t, err)
	require.Zero(t, res.Trimmed)
}

// TestArchiveDefaultPartition: a row of a day without its partition (a
// row written by hand, a clock far off) lands in the default partition;
// creating its day's partition moves it in; retention deletes those past
// the period.
func TestArchiveDefaultPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insert := func(age time.Duration) {
		_, err := b.check.Exec(ctx, `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, created_at, published_at)
			VALUES (gen_random_uuid(), 'test.x', now(), '{}', now(), now() - make_interval(secs => $1))`, age.Seconds())
		require.NoError(t, err)
	}
	inDefault := func() int {
		var n int
		require.NoError(t, b.check.QueryRow(ctx, `SELECT count(*) FROM platform.outbox_archive_default`).Scan(&n))
		return n
	}
	insert(40 * 24 * time.Hour) // long past
	insert(-5 * 24 * time.Hour) // five days ahead
	insert(0)                   // today, before any partition exists
	require.Equal(t, 3, inDefault())

	_, err := EnsureArchivePartitions(ctx, b.check, 6)
	require.NoError(t, err)
	require.Equal(t, 1, inDefault(), "today's and the future day's rows moved to their partitions")
	res, err := PurgeArchive(ctx, b.check, 30*24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Rows)
	require.Zero(t, inDefault())
	var n int
	require.NoError(t, b.check.QueryRow(ctx, `SELECT count(*) FROM platform.outbox_archive`).Scan(&n))
	require.Equal(t, 2, n)
}
