package dedup_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// v7At returns a random UUID v7 of instant t.
func v7At(t time.Time) uuid.UUID {
	u := dedup.FloorUUID(t)
	var r [10]byte
	_, _ = rand.Read(r[:])
	copy(u[6:], r[:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

func day(t time.Time) time.Time { return t.UTC().Truncate(24 * time.Hour) }

// partitioned converts the bundle's (empty) table to partitions for a
// horizon of 48h and returns the database's now.
func (b *testBundle) partitioned(t *testing.T) time.Time {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, dedup.EnsureLayout(ctx, b.db, dedup.LayoutPartitioned, 48*time.Hour, 3))
	var now time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT now()`).Scan(&now))
	return now
}

func (b *testBundle) insertIDs(t *testing.T, ids ...uuid.UUID) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `INSERT INTO processed_event SELECT unnest($1::uuid[]), now()`, ids)
	require.NoError(t, err)
}

func TestHorizonInForce(t *testing.T) {
	t.Parallel()
	require.Equal(t, 30*time.Hour, dedup.HorizonInForce(dedup.LayoutPlain, 30*time.Hour))
	require.Equal(t, 48*time.Hour, dedup.HorizonInForce(dedup.LayoutPartitioned, 30*time.Hour))
	require.Equal(t, 48*time.Hour, dedup.HorizonInForce(dedup.LayoutPartitioned, 48*time.Hour))
	require.Equal(t, 72*time.Hour, dedup.HorizonInForce(dedup.LayoutPartitioned, 48*time.Hour+time.Microsecond))
	at := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	id := v7At(at)
	require.True(t, dedup.IsV7(id))
	require.Equal(t, at, dedup.V7Time(id).UTC())
	require.False(t, dedup.IsV7(uuid.New()))
	require.Equal(t, at.Add(time.Hour), dedup.PurgeableAt(dedup.LayoutPlain, id, at, time.Hour))
	// Partitioned: the end of its day plus the horizon in force.
	require.Equal(t, time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC), dedup.PurgeableAt(dedup.LayoutPartitioned, id, at, 30*time.Hour))
	l, err := dedup.ParseLayout("partitioned")
	require.NoError(t, err)
	require.Equal(t, "partitioned", l.String())
	_, err = dedup.ParseLayout("daily")
	require.Error(t, err)
}

// EnsureLayout partitions an empty table, with partitions from the
// horizon in force back to the days ahead; again, it creates nothing.
func TestEnsureLayoutCreatesPartitionsAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	l, err := dedup.DetectLayout(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, dedup.LayoutPlain, l)
	now := b.partitioned(t)
	l, err = dedup.DetectLayout(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, dedup.LayoutPartitioned, l)

	parts, err := dedup.ListPartitions(ctx, b.db)
	require.NoError(t, err)
	first, last := day(now.Add(-48*time.Hour)), day(now.Add(3*24*time.Hour))
	require.Len(t, parts, int(last.Sub(first)/(24*time.Hour))+1)
	for i, p := range parts {
		require.Equal(t, first.Add(time.Duration(i)*24*time.Hour), p.From, "partition %d", i)
		require.Equal(t, p.From.Add(24*time.Hour), p.To)
		require.Equal(t, "processed_event_p"+p.From.Format("20060102"), p.Name)
		require.False(t, p.DetachPending)
	}
	created, err := dedup.EnsurePartitions(ctx, b.db, now.Add(-48*time.Hour), now.Add(3*24*time.Hour))
	require.NoError(t, err)
	require.Empty(t, created)
	require.NoError(t, dedup.EnsureLayout(ctx, b.db, dedup.LayoutPartitioned, 48*time.Hour, 3))
	// The processed_at index is gone with the plain table; the primary
	// key stays.
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM pg_indexes WHERE tablename = 'processed_event' AND indexdef LIKE '%processed_at%'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM pg_indexes WHERE tablename = 'processed_event'`))

	// A table holding rows is not converted behind the operator's back.
	b.insertIDs(t, v7At(now))
	err = dedup.EnsureLayout(ctx, b.db, dedup.LayoutPlain, 48*time.Hour, 3)
	require.ErrorIs(t, err, dedup.ErrLayoutMismatch)
}

// The database refuses ids outside every partition, and ids that are not
// v7; each becomes that event's failure with its reason, the rest of the
// batch commits.
func TestPartitionedRefusesOutOfRangeIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.partitioned(t)
	routes, err := dedup.RoutesFor(b.reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	p := dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes})

	fresh, dup := orderEvent(t, 1), orderEvent(t, 1)
	b.insertIDs(t, dup.ID)
	v4, old, future := orderEvent(t, 1), orderEvent(t, 1), orderEvent(t, 1)
	v4.ID = uuid.New()
	old.ID = v7At(now.Add(-10 * 24 * time.Hour))
	future.ID = v7At(now.Add(30 * 24 * time.Hour))
	res, err := p.Process(ctx, []consumer.Event{v4, fresh, old, dup, future})
	require.NoError(t, err, "a refusal is the event's outcome, not an unknown batch outcome")
	require.Len(t, res, 5)

	require.Equal(t, dedup.OutcomeFailed, res[0].Outcome)
	require.True(t, res[0].Permanent)
	require.False(t, res[0].BeyondHorizon)
	require.ErrorIs(t, res[0].Err, dedup.ErrRefused)
	require.Contains(t, res[0].Err.Error(), "UUID version 4")

	require.Equal(t, dedup.OutcomeProcessed, res[1].Outcome)
	require.Equal(t, 1, b.reservations(t, fresh))

	require.Equal(t, dedup.OutcomeFailed, res[2].Outcome)
	require.True(t, res[2].BeyondHorizon)
	require.True(t, res[2].Permanent)
	require.ErrorIs(t, res[2].Err, dedup.ErrRefused)
	require.Contains(t, res[2].Err.Error(), "older than the oldest partition")

	require.Equal(t, dedup.OutcomeDuplicate, res[3].Outcome)
	require.Equal(t, 0, b.reservations(t, dup))

	require.Equal(t, dedup.OutcomeFailed, res[4].Outcome)
	require.False(t, res[4].Permanent, "a partition not created yet may be: retry")
	require.False(t, res[4].BeyondHorizon)
	require.Contains(t, res[4].Err.Error(), "no partition of processed_event yet")

	for _, ev := range []consumer.Event{v4, old, future} {
		require.Equal(t, 0, b.reservations(t, ev))
		require.Equal(t, 0, b.processedRows(t, ev.ID))
	}
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM processed_event`))

	// Alone in its batch, a refused id takes the same path.
	res, err = p.Process(ctx, []consumer.Event{old})
	require.NoError(t, err)
	require.True(t, res[0].BeyondHorizon)
}

// A burst of refused ids in one batch is settled on the batch's own
// connection: on a pool of one connection the replay never waits for a
// second one to read the partitions.
func TestPartitionedRefusalsNeedNoSecondConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.partitioned(t)
	one, err := dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(one.Close)
	routes, err := dedup.RoutesFor(b.reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	p := dedup.NewProcessor(one, dedup.ProcessorConfig{Routes: routes})

	var evs []consumer.Event
	for i := range 20 {
		ev := orderEvent(t, 1)
		switch i % 4 {
		case 0:
			ev.ID = v7At(now.Add(-10 * 24 * time.Hour)) // older than every partition
		case 1:
			ev.ID = v7At(now.Add(30 * 24 * time.Hour)) // no partition yet
		}
		evs = append(evs, ev)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := p.Process(pctx, evs)
	require.NoError(t, err, "the replay waited for a second connection")
	for i, r := range res {
		switch i % 4 {
		case 0:
			require.True(t, r.BeyondHorizon, "event %d", i)
			require.Contains(t, r.Err.Error(), "older than the oldest partition")
		case 1:
			require.Contains(t, r.Err.Error(), "no partition of processed_event yet")
		default:
			require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d", i)
		}
	}
}

// The purge drops the partitions wholly older than the horizon in force
// (rounded up to whole days), counts their rows, finalizes a detach left
// pending and drops a partition left detached; a dry run drops nothing.
func TestPurgePartitionsDropsExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.partitioned(t)
	_, err := dedup.EnsurePartitions(ctx, b.db, now.Add(-6*24*time.Hour), now)
	require.NoError(t, err)
	// Rows of each day from 6 days ago to now: 10 per day.
	perDay := map[time.Time]int{}
	for d := 0; d <= 6; d++ {
		at := now.Add(-time.Duration(d) * 24 * time.Hour)
		for range 10 {
			b.insertIDs(t, v7At(at))
		}
		perDay[day(at)] += 10
	}
	cutoff := now.Add(-48 * time.Hour)
	wantGone := 0
	for d, n := range perDay {
		if !d.Add(24 * time.Hour).After(cutoff) {
			wantGone += n
		}
	}
	require.Positive(t, wantGone)

	// A detach interrupted in its second phase (an old snapshot held it
	// past its statement timeout) leaves the oldest partition pending.
	parts, err := dedup.ListPartitions(ctx, b.db)
	require.NoError(t, err)
	oldest := parts[0]
	holder, err := b.db.Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, `SET TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	require.Equal(t, 1, mustCount(t, holder, `SELECT 1 FROM processed_event LIMIT 1`))
	conn, err := b.db.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET statement_timeout = 300`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `ALTER TABLE processed_event DETACH PARTITION `+pgx.Identifier{oldest.Name}.Sanitize()+` CONCURRENTLY`)
	require.Error(t, err)
	_, _ = conn.Exec(ctx, `RESET statement_timeout`)
	conn.Release()
	require.NoError(t, holder.Rollback(ctx))
	parts, err = dedup.ListPartitions(ctx, b.db)
	require.NoError(t, err)
	require.True(t, parts[0].DetachPending, "the detach was left pending")
	// And the next one was detached by hand without being dropped.
	_, err = b.db.Exec(ctx, `ALTER TABLE processed_event DETACH PARTITION `+pgx.Identifier{parts[1].Name}.Sanitize())
	require.NoError(t, err)

	dry, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: 30 * time.Hour, DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, wantGone, dry.Deleted)
	require.Equal(t, 48*time.Hour, dry.HorizonInForce)
	require.Equal(t, 50, b.count(t, `SELECT count(*) FROM processed_event`), "the pending and the detached partitions are not visible")

	var chunks []int64
	res, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: 30 * time.Hour, Ahead: 5,
		OnChunkFunc: func(n int64, _ time.Duration) { chunks = append(chunks, n) }})
	require.NoError(t, err)
	require.EqualValues(t, wantGone, res.Deleted)
	require.Equal(t, 48*time.Hour, res.HorizonInForce)
	require.WithinDuration(t, cutoff, res.Cutoff, 5*time.Minute)
	require.Equal(t, res.Chunks, len(chunks)+1, "the leftover detached table is dropped without a chunk callback")
	require.Equal(t, 70-wantGone, b.count(t, `SELECT count(*) FROM processed_event`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM processed_event WHERE event_id < $1`, dedup.FloorUUID(day(cutoff))))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM pg_class WHERE relname IN ($1, $2)`, oldest.Name, parts[1].Name))
	parts, err = dedup.ListPartitions(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, day(cutoff), parts[0].From, "the partition holding the cutoff stays")
	require.Equal(t, day(now.Add(5*24*time.Hour)), parts[len(parts)-1].From, "the run created the days ahead")

	again, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: 30 * time.Hour})
	require.NoError(t, err)
	require.Zero(t, again.Deleted)
}

func mustCount(t *testing.T, q query.Querier, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, q.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// The conversion keeps every row the purge would keep, both ways, and
// refuses to partition while non-v7 ids are inside the horizon.
func TestConvertLayoutBothWays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var now time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT now()`).Scan(&now))
	// The last group is older than the horizon (unless now is within a
	// minute of midnight UTC) yet in the day that holds its edge: the
	// partitions round the horizon up to that day and keep it. A fixed
	// age of 50h fell before that day when now was before 02:00 UTC.
	edge := day(now.Add(-48 * time.Hour)).Add(time.Minute)
	var kept []uuid.UUID
	for _, at := range []time.Time{now, now.Add(-time.Hour), now.Add(-30 * time.Hour), edge} {
		for range 25 {
			kept = append(kept, v7At(at))
		}
	}
	b.insertIDs(t, kept...)
	expiredV7 := []uuid.UUID{v7At(now.Add(-5 * 24 * time.Hour)), v7At(now.Add(-4 * 24 * time.Hour))}
	b.insertIDs(t, expiredV7...)
	_, err := b.db.Exec(ctx, `INSERT INTO processed_event VALUES ($1, now() - interval '3 days'), ($2, now() - interval '50 hours')`, uuid.New(), uuid.New())
	require.NoError(t, err)
	inside := uuid.New()
	_, err = b.db.Exec(ctx, `INSERT INTO processed_event VALUES ($1, now() - interval '1 hour')`, inside)
	require.NoError(t, err)

	// A v4 id processed an hour ago: refused, nothing changed.
	_, err = dedup.ConvertLayout(ctx, b.db, dedup.LayoutPartitioned, dedup.ConvertParams{Horizon: 48 * time.Hour})
	require.ErrorIs(t, err, dedup.ErrNonV7Rows)
	l, err := dedup.DetectLayout(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, dedup.LayoutPlain, l)
	require.Equal(t, 105, b.count(t, `SELECT count(*) FROM processed_event`))
	_, err = b.db.Exec(ctx, `UPDATE processed_event SET processed_at = now() - interval '49 hours' WHERE event_id = $1`, inside)
	require.NoError(t, err)

	res, err := dedup.ConvertLayout(ctx, b.db, dedup.LayoutPartitioned, dedup.ConvertParams{Horizon: 48 * time.Hour, Ahead: 2})
	require.NoError(t, err)
	require.Equal(t, dedup.ConvertResult{From: dedup.LayoutPlain, To: dedup.LayoutPartitioned, Copied: 100, Expired: 5,
		Partitions: int(day(now.Add(2*24*time.Hour)).Sub(day(now.Add(-48*time.Hour)))/(24*time.Hour)) + 1}, res)
	l, err = dedup.DetectLayout(ctx, b.db)
	require.NoError(t, err)
	require.Equal(t, dedup.LayoutPartitioned, l)
	for _, id := range kept {
		at, err := dedup.Lookup(ctx, b.db, id)
		require.NoError(t, err)
		require.False(t, at.IsZero())
	}

	// The dedup step works on the new table: a kept id is a duplicate.
	routes, err := dedup.RoutesFor(b.reg, []string{shop.HandlerStockReserve})
	require.NoError(t, err)
	p := dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes})
	dup, fresh := orderEvent(t, 1), orderEvent(t, 1)
	dup.ID = kept[0]
	out, err := p.Process(ctx, []consumer.Event{dup, fresh})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeDuplicate, out[0].Outcome)
	require.Equal(t, dedup.OutcomeProcessed, out[1].Outcome)

	// And back: every row, processed_at kept, the contract's index back.
	var before []time.Time
	rows, err := b.db.Query(ctx, `SELECT processed_at FROM processed_event ORDER BY event_id`)
	require.NoError(t, err)
	before, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	res, err = dedup.ConvertLayout(ctx, b.db, dedup.LayoutPlain, dedup.ConvertParams{})
	require.NoError(t, err)
	require.Equal(t, dedup.ConvertResult{From: dedup.LayoutPartitioned, To: dedup.LayoutPlain, Copied: 101}, res)
	rows, err = b.db.Query(ctx, `SELECT processed_at FROM processed_event ORDER BY event_id`)
	require.NoError(t, err)
	after, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	require.NoError(t, err)
	require.Equal(t, before, after)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM pg_indexes WHERE tablename = 'processed_event' AND indexname = 'processed_event_processed_at_idx'`))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM pg_class WHERE relname LIKE 'processed\_event\_%' AND relname <> 'processed_event_pkey' AND relname <> 'processed_event_processed_at_idx'`))
	out, err = p.Process(ctx, []consumer.Event{fresh, orderEvent(t, 1)})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeDuplicate, out[0].Outcome)
	require.Equal(t, dedup.OutcomeProcessed, out[1].Outcome)

	// Converting to the layout it has does nothing.
	res, err = dedup.ConvertLayout(ctx, b.db, dedup.LayoutPlain, dedup.ConvertParams{})
	require.NoError(t, err)
	require.Equal(t, dedup.ConvertResult{From: dedup.LayoutPlain, To: dedup.LayoutPlain}, res)
}

// A horizon lowered, purged, then raised again: the days the purge dropped
// are not made again, so a copy of an event applied in one of them stays
// refused by the table instead of being taken as new.
func TestRaisedHorizonDoesNotRecreateDroppedDays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, dedup.EnsureLayout(ctx, b.db, dedup.LayoutPartitioned, 96*time.Hour, 3))
	var now time.Time
	require.NoError(t, b.db.QueryRow(ctx, `SELECT now()`).Scan(&now))
	x := v7At(now.Add(-72 * time.Hour))
	b.insertIDs(t, x)
	insertAgain := func() error {
		_, err := b.db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())`, x)
		return err
	}
	_, err := dedup.Purge(ctx, b.db, dedup.PurgeParams{Horizon: 24 * time.Hour})
	require.NoError(t, err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, insertAgain(), &pgErr)
	require.Equal(t, "23514", pgErr.Code, "x's day is gone: no partition takes it")

	require.NoError(t, dedup.EnsureLayout(ctx, b.db, dedup.LayoutPartitioned, 96*time.Hour, 3))
	require.ErrorAs(t, insertAgain(), &pgErr, "x's day was not made again")
	require.Equal(t, "23514", pgErr.Code)
}
