package failure

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/state"
)

// CreateRetry validates, counts a dry run without storing it, refuses
// resolved ids and empty selections, and freezes the selection in
// arrival order with the canary first.
func TestCreateRetry(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()

	_, err := s.CreateRetry(ctx, RetryRequest{Canary: -1}, "op")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "canary")
	for _, rate := range []int{-1, RetryRateMax + 1} {
		_, err = s.CreateRetry(ctx, RetryRequest{Rate: rate}, "op")
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "rate")
	}
	_, err = s.CreateRetry(ctx, RetryRequest{}, "op")
	require.ErrorIs(t, err, ErrPrecondition)
	require.ErrorContains(t, err, "matches no failure to retry")

	var ids []uuid.UUID
	for range 5 {
		ids = append(ids, insert(t, db, row{Pool: "o"}))
	}
	parked := insert(t, db, row{Pool: "o", State: StateParked, Reason: ReasonParked})
	resolved := insert(t, db, row{Pool: "o", State: StateResolved})
	insert(t, db, row{Pool: "other"})

	_, err = s.CreateRetry(ctx, RetryRequest{Filter: Filter{IDs: []uuid.UUID{ids[0], resolved}}}, "op")
	require.ErrorIs(t, err, ErrPrecondition)
	require.ErrorContains(t, err, resolved.String()+" is resolved")

	dry, err := s.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "o"}, DryRun: true}, "op")
	require.NoError(t, err)
	require.Empty(t, dry.State)
	require.Equal(t, int64(6), dry.Selected)
	list, err := s.ListRetries(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, list)

	r, err := s.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "o"}, Canary: 2, OverrideBeyondHorizon: true}, "alice")
	require.NoError(t, err)
	require.Equal(t, RetryCanary, r.State)
	require.Equal(t, int64(6), r.Selected)
	require.Equal(t, RetryRateDefault, r.Rate)
	require.Equal(t, 2, r.Canary)
	require.True(t, r.OverrideBeyondHorizon)
	require.Equal(t, Filter{Pool: "o"}, r.Filter)
	require.Equal(t, "alice", r.CreatedBy)

	rows, err := db.Query(ctx, `SELECT seq, failure_id, canary FROM platform.failure_retry_item WHERE retry_id = $1 ORDER BY seq`, r.ID)
	require.NoError(t, err)
	var got []uuid.UUID
	var canary []bool
	for rows.Next() {
		var seq int64
		var id uuid.UUID
		var c bool
		require.NoError(t, rows.Scan(&seq, &id, &c))
		require.Equal(t, int64(len(got)+1), seq)
		got = append(got, id)
		canary = append(canary, c)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, append(append([]uuid.UUID{}, ids...), parked), got)
	require.Equal(t, []bool{true, true, false, false, false, false}, canary)

	r2, err := s.CreateRetry(ctx, RetryRequest{Filter: Filter{IDs: []uuid.UUID{ids[0]}}, Rate: 50}, "bob")
	require.NoError(t, err)
	require.Equal(t, RetryRunning, r2.State)
	list, err = s.ListRetries(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{r2.ID, r.ID}, []uuid.UUID{list[0].ID, list[1].ID})

	a := auditOf(t, db, state.AuditFailureRetry)
	require.Len(t, a, 2)
	require.Equal(t, r.ID.String(), a[1].Detail["retry"])
	require.Equal(t, json.Number("6"), a[1].Detail["selected"])
	require.Equal(t, "o", a[1].Target)
	require.Equal(t, map[string]any{"pool": "o"}, a[1].Detail["filter"])

	_, err = s.GetRetry(ctx, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)
}

// GetRetry counts the selection's rows resolved since the retry was made
// and those that failed again after their copy was sent.
func TestGetRetryCounts(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	var ids []uuid.UUID
	for range 4 {
		ids = append(ids, insert(t, db, row{}))
	}
	r, err := s.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}}, "op")
	require.NoError(t, err)
	// Sent: all four. Then 0 resolved, 1 failed again, 2 retrying in a
	// delay after failing again, 3 still on its way.
	_, err = db.Exec(ctx, `UPDATE platform.failure_retry_item SET sent_at = now() - interval '1 minute' WHERE retry_id = $1`, r.ID)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET state = 'resolved', resolved_at = now() WHERE id = $1`, ids[0])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET state = 'failed', failed_at = now() WHERE id = $1`, ids[1])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET state = 'retrying', failed_at = now() WHERE id = $1`, ids[2])
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET state = 'retrying', failed_at = now() - interval '2 minutes' WHERE id = $1`, ids[3])
	require.NoError(t, err)
	got, err := s.GetRetry(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Resolved)
	require.Equal(t, int64(2), got.FailedAgain)
}

func TestCancelRetry(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	insert(t, db, row{})
	r, err := s.CreateRetry(ctx, RetryRequest{Filter: Filter{Pool: "p"}}, "op")
	require.NoError(t, err)
	c, err := s.CancelRetry(ctx, r.ID, "bob")
	require.NoError(t, err)
	require.Equal(t, RetryCancelled, c.State)
	require.Equal(t, "bob", c.CancelledBy)
	require.False(t, c.FinishedAt.IsZero())
	_, err = s.CancelRetry(ctx, r.ID, "bob")
	require.ErrorIs(t, err, ErrPrecondition)
	require.ErrorContains(t, err, "is cancelled")
	_, err = s.CancelRetry(ctx, uuid.New(), "bob")
	require.ErrorIs(t, err, ErrNotFound)
	a := auditOf(t, db, state.AuditFailureRetryCancel)
	require.Len(t, a, 1)
	require.Equal(t, r.ID.String(), a[0].Detail["retry"])
}

// A hundred thousand failures are frozen into a retry in one statement,
// fast (set PLATFORMD_BIG=1 for the full size under -short).
func TestCreateRetryHundredThousand(t *testing.T) {
	t.Parallel()
	n := 100_000
	if testing.Short() && os.Getenv("PLATFORMD_BIG") == "" {
		n = 10_000
	}
	db := database(t)
	s := NewStore(db)
	seed(t, db, "big", n, 5)
	t0 := time.Now()
	r, err := s.CreateRetry(context.Background(), RetryRequest{Filter: Filter{Pool: "big"}, Canary: 10}, "op")
	took := time.Since(t0)
	require.NoError(t, err)
	require.Equal(t, int64(n), r.Selected)
	t.Logf("CreateRetry of %d failures: %s", n, took)
	require.Less(t, took, 10*time.Second)
	var canaries int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM platform.failure_retry_item WHERE retry_id = $1 AND canary`, r.ID).Scan(&canaries))
	require.Equal(t, 10, canaries)
}
