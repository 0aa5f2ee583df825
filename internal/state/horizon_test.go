package state_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/state"
)

type auditRow struct {
	Old    *time.Duration
	New    time.Duration
	Forced bool
	By     string
}

func audits(t *testing.T, db *pgxpool.Pool, service string) []auditRow {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT old_horizon, new_horizon, forced, changed_by
		FROM platform.horizon_audit WHERE service = $1 ORDER BY id`, service)
	require.NoError(t, err)
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var a auditRow
		require.NoError(t, rows.Scan(&a.Old, &a.New, &a.Forced, &a.By))
		out = append(out, a)
	}
	require.NoError(t, rows.Err())
	return out
}

func ptr[T any](v T) *T { return &v }

func TestGetHorizonDefault(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	h, err := state.GetHorizon(context.Background(), db, "stock", 336*time.Hour, 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, state.Horizon{
		Service: "stock", Horizon: 336 * time.Hour, MinHorizon: 24 * time.Hour,
		UpdatedBy: state.HorizonUpdatedByConfig,
	}, h)
}

func TestSetHorizon(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	var dbNow time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))

	set, err := state.SetHorizon(ctx, db, "stock", 48*time.Hour, 24*time.Hour, false, "ops")
	require.NoError(t, err)
	require.Equal(t, 48*time.Hour, set.Horizon)
	require.True(t, set.Stored)
	require.False(t, set.Forced)
	require.Equal(t, "ops", set.UpdatedBy)
	require.Equal(t, 24*time.Hour, set.MinHorizon)
	require.WithinDuration(t, dbNow, set.UpdatedAt, 5*time.Second)

	// The stored horizon wins over the default; other services keep theirs.
	got, err := state.GetHorizon(ctx, db, "stock", 336*time.Hour, 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, set.Horizon, got.Horizon)
	require.True(t, got.UpdatedAt.Equal(set.UpdatedAt))
	got.UpdatedAt = set.UpdatedAt
	require.Equal(t, set, got)
	other, err := state.GetHorizon(ctx, db, "shipping", 336*time.Hour, 24*time.Hour)
	require.NoError(t, err)
	require.False(t, other.Stored)

	_, err = state.SetHorizon(ctx, db, "stock", 72*time.Hour, 24*time.Hour, true, "ops2")
	require.NoError(t, err)
	require.Equal(t, []auditRow{
		{Old: nil, New: 48 * time.Hour, By: "ops"},
		{Old: ptr(48 * time.Hour), New: 72 * time.Hour, By: "ops2"}, // force without need is not Forced
	}, audits(t, db, "stock"))
}

// Intervals round-trip exactly at microsecond precision; finer parts are
// truncated before storing, so what is returned is what is stored.
func TestSetHorizonPrecision(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	for _, h := range []time.Duration{
		336*time.Hour + time.Microsecond,
		90*24*time.Hour + 59*time.Minute + 59*time.Second + 999_999*time.Microsecond,
		10 * 365 * 24 * time.Hour,
		time.Microsecond,
	} {
		set, err := state.SetHorizon(ctx, db, "stock", h+500*time.Nanosecond, 0, false, "ops")
		require.NoError(t, err)
		require.Equal(t, h, set.Horizon)
		got, err := state.GetHorizon(ctx, db, "stock", time.Hour, 0)
		require.NoError(t, err)
		require.Equal(t, h, got.Horizon)
		var us int64
		require.NoError(t, db.QueryRow(ctx, `SELECT (extract(epoch FROM horizon) * 1000000)::bigint
			FROM platform.service_horizon WHERE service = 'stock'`).Scan(&us))
		require.Equal(t, h.Microseconds(), us)
	}
}

func TestSetHorizonBelowMin(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()

	_, err := state.SetHorizon(ctx, db, "stock", 12*time.Hour, 24*time.Hour, false, "ops")
	require.ErrorIs(t, err, state.ErrBelowMinHorizon)
	got, err := state.GetHorizon(ctx, db, "stock", 336*time.Hour, 24*time.Hour)
	require.NoError(t, err)
	require.False(t, got.Stored)
	require.Empty(t, audits(t, db, "stock"))

	set, err := state.SetHorizon(ctx, db, "stock", 12*time.Hour, 24*time.Hour, true, "ops")
	require.NoError(t, err)
	require.True(t, set.Forced)
	require.Equal(t, 12*time.Hour, set.Horizon)
	got, err = state.GetHorizon(ctx, db, "stock", 336*time.Hour, 24*time.Hour)
	require.NoError(t, err)
	require.True(t, got.Forced)
	require.True(t, got.Stored)
	require.Equal(t, []auditRow{{New: 12 * time.Hour, Forced: true, By: "ops"}}, audits(t, db, "stock"))

	// Back above the minimum: no longer forced.
	set, err = state.SetHorizon(ctx, db, "stock", 24*time.Hour, 24*time.Hour, false, "ops")
	require.NoError(t, err)
	require.False(t, set.Forced)
}

func TestSetHorizonInvalid(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	for _, h := range []time.Duration{0, -time.Hour, 999 * time.Nanosecond} {
		_, err := state.SetHorizon(context.Background(), db, "stock", h, 0, true, "ops")
		require.ErrorIs(t, err, state.ErrInvalidHorizon, h)
	}
	require.Empty(t, audits(t, db, "stock"))
}

func TestSetHorizonNotifies(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := db.Acquire(ctx)
	require.NoError(t, err)
	conn := pc.Hijack() // a LISTENing session does not go back to the pool
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, "LISTEN "+state.ChannelHorizon)
	require.NoError(t, err)

	_, err = state.SetHorizon(ctx, db, "stock", 48*time.Hour, time.Hour, false, "ops")
	require.NoError(t, err)
	n, err := conn.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, state.ChannelHorizon, n.Channel)
	require.Equal(t, "stock", n.Payload)

	// A refused change announces nothing.
	_, err = state.SetHorizon(ctx, db, "stock", time.Minute, time.Hour, false, "ops")
	require.ErrorIs(t, err, state.ErrBelowMinHorizon)
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = conn.WaitForNotification(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// Concurrent setters are serialized: the audit trail is a chain where each
// row's old horizon is the previous row's new one.
func TestSetHorizonConcurrent(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := state.SetHorizon(context.Background(), db, "stock", time.Duration(i+1)*time.Hour, 0, false, "ops")
			require.NoError(t, err)
		})
	}
	wg.Wait()
	rows := audits(t, db, "stock")
	require.Len(t, rows, 8)
	require.Nil(t, rows[0].Old)
	for i := 1; i < len(rows); i++ {
		require.NotNil(t, rows[i].Old)
		require.Equal(t, rows[i-1].New, *rows[i].Old)
	}
	got, err := state.GetHorizon(context.Background(), db, "stock", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, rows[7].New, got.Horizon)
}
