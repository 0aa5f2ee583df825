package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/state"
)

// Two daemons' accumulators of one pool flush into the same day's row: the
// counts and buckets add, the max keeps the greater, and a quantile read
// back is within a bucket (9%) of the truth.
func TestDuplicateAgesFlushAddsAcrossDaemons(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	now := time.Now()
	a, b := state.NewDuplicateAges("stock"), state.NewDuplicateAges("stock")
	var ages []state.DuplicateAge
	for range 998 {
		ages = append(ages, state.DuplicateAge{Source: "redelivery", At: now, Age: 30 * time.Second})
	}
	require.True(t, a.Add(ages))
	require.True(t, b.Add([]state.DuplicateAge{
		{Source: "redelivery", At: now, Age: 2 * time.Hour},
		{Source: "replay", At: now, Age: 72 * time.Hour},
	}))
	// Before the flush, only Pending sees them.
	pending := a.Pending(now.Add(-24 * time.Hour))
	require.Equal(t, int64(998), pending["redelivery"].Count)
	require.NoError(t, a.Flush(ctx, db))
	require.NoError(t, b.Flush(ctx, db))
	require.NoError(t, a.Flush(ctx, db)) // nothing new: no change
	require.Empty(t, a.Pending(now.Add(-24*time.Hour)))

	got, err := state.ReadDuplicateAges(ctx, db, now.Add(-24*time.Hour), nil)
	require.NoError(t, err)
	red := got["redelivery"]
	require.Equal(t, int64(999), red.Count)
	require.Equal(t, 2*time.Hour, red.MaxAge)
	require.InEpsilon(t, 30, red.Quantile(0.99).Seconds(), 0.09)
	require.Equal(t, 2*time.Hour, red.Quantile(0.9995)) // the rank of the oldest: capped at the max
	require.Equal(t, int64(1), got["replay"].Count)
	require.Equal(t, 72*time.Hour, got["replay"].MaxAge)

	src, age, ok := state.OldestDuplicate(got)
	require.True(t, ok)
	require.Equal(t, "replay", src)
	require.Equal(t, 72*time.Hour, age)

	var rows int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM platform.duplicate_age WHERE pool = 'stock'`).Scan(&rows))
	require.Equal(t, 2, rows) // one per day and source
	none, err := state.ReadDuplicateAges(ctx, db, now.Add(-24*time.Hour), []string{"other"})
	require.NoError(t, err)
	require.Empty(t, none)
}
