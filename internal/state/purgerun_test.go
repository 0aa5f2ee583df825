package state_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/state"
)

func TestPurgeRunLifecycle(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()

	id, err := state.StartPurgeRun(ctx, db, "stock", state.TriggerSchedule, false, "host-a:1")
	require.NoError(t, err)
	runs, err := state.ListPurgeRuns(ctx, db, "stock", 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, id, runs[0].ID)
	require.True(t, runs[0].FinishedAt.IsZero(), "running")
	require.Equal(t, "host-a:1", runs[0].Daemon)

	var cutoff time.Time
	require.NoError(t, db.QueryRow(ctx, `SELECT now() - interval '1 hour'`).Scan(&cutoff))
	run, err := state.FinishPurgeRun(ctx, db, id, cutoff, 42, nil)
	require.NoError(t, err)
	require.Equal(t, id, run.ID)
	require.Equal(t, "stock", run.Service)
	require.Equal(t, state.TriggerSchedule, run.Trigger)
	require.False(t, run.DryRun)
	require.True(t, run.Cutoff.Equal(cutoff))
	require.EqualValues(t, 42, run.Deleted)
	require.Empty(t, run.Error)
	require.False(t, run.FinishedAt.Before(run.StartedAt))

	_, err = state.FinishPurgeRun(ctx, db, id, cutoff, 1, nil)
	require.ErrorIs(t, err, state.ErrPurgeRunNotFound)
	_, err = state.FinishPurgeRun(ctx, db, id+1000, cutoff, 1, nil)
	require.ErrorIs(t, err, state.ErrPurgeRunNotFound)

	_, err = state.StartPurgeRun(ctx, db, "stock", "cron", false, "")
	require.Error(t, err)
}

func TestPurgeRunFailed(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	id, err := state.StartPurgeRun(ctx, db, "stock", state.TriggerAdmin, false, "d")
	require.NoError(t, err)
	run, err := state.FinishPurgeRun(ctx, db, id, time.Time{}, 7, errors.New("boom"))
	require.NoError(t, err)
	require.Equal(t, "boom", run.Error)
	require.True(t, run.Cutoff.IsZero())
	require.EqualValues(t, 7, run.Deleted)
	require.Equal(t, state.TriggerAdmin, run.Trigger)
}

func TestListPurgeRunsAndLastPurge(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()

	_, ok, err := state.LastPurge(ctx, db, "stock")
	require.NoError(t, err)
	require.False(t, ok)

	finish := func(service, trigger string, dry bool, runErr error) int64 {
		id, err := state.StartPurgeRun(ctx, db, service, trigger, dry, "d")
		require.NoError(t, err)
		_, err = state.FinishPurgeRun(ctx, db, id, time.Now(), 1, runErr)
		require.NoError(t, err)
		return id
	}
	ok1 := finish("stock", state.TriggerSchedule, false, nil)
	finish("stock", state.TriggerAdmin, true, nil)                    // dry run
	finish("stock", state.TriggerSchedule, false, errors.New("boom")) // failed
	finish("shipping", state.TriggerSchedule, false, nil)             // other service
	running, err := state.StartPurgeRun(ctx, db, "stock", state.TriggerSchedule, false, "d")
	require.NoError(t, err)

	last, ok, err := state.LastPurge(ctx, db, "stock")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ok1, last.ID)

	runs, err := state.ListPurgeRuns(ctx, db, "stock", 10)
	require.NoError(t, err)
	require.Len(t, runs, 4)
	require.Equal(t, running, runs[0].ID, "newest first")
	for i := 1; i < len(runs); i++ {
		require.False(t, runs[i].StartedAt.After(runs[i-1].StartedAt))
		require.Equal(t, "stock", runs[i].Service)
	}
	require.Equal(t, ok1, runs[3].ID)

	runs, err = state.ListPurgeRuns(ctx, db, "stock", 2)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	runs, err = state.ListPurgeRuns(ctx, db, "stock", 0)
	require.NoError(t, err)
	require.Len(t, runs, 4)
	runs, err = state.ListPurgeRuns(ctx, db, "billing", 10)
	require.NoError(t, err)
	require.Empty(t, runs)

	ok2 := finish("stock", state.TriggerAdmin, false, nil)
	last, ok, err = state.LastPurge(ctx, db, "stock")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ok2, last.ID)
}

// The history keeps the newest finished runs of each service; runs still
// going and other services' runs stay.
func TestPrunePurgeRuns(t *testing.T) {
	t.Parallel()
	db := newStateDB(t)
	ctx := context.Background()
	var ids []int64
	for range 5 {
		id, err := state.StartPurgeRun(ctx, db, "stock", state.TriggerSchedule, false, "d")
		require.NoError(t, err)
		_, err = state.FinishPurgeRun(ctx, db, id, time.Time{}, 1, nil)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	running, err := state.StartPurgeRun(ctx, db, "stock", state.TriggerSchedule, false, "d")
	require.NoError(t, err)
	other, err := state.StartPurgeRun(ctx, db, "shipping", state.TriggerSchedule, false, "d")
	require.NoError(t, err)
	_, err = state.FinishPurgeRun(ctx, db, other, time.Time{}, 1, nil)
	require.NoError(t, err)

	n, err := state.PrunePurgeRuns(ctx, db, "stock", 2)
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
	runs, err := state.ListPurgeRuns(ctx, db, "stock", 10)
	require.NoError(t, err)
	var got []int64
	for _, r := range runs {
		got = append(got, r.ID)
	}
	require.Equal(t, []int64{running, ids[4], ids[3]}, got)
	runs, err = state.ListPurgeRuns(ctx, db, "shipping", 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)

	n, err = state.PrunePurgeRuns(ctx, db, "stock", 2)
	require.NoError(t, err)
	require.Zero(t, n, "nothing beyond the newest two")
	n, err = state.PrunePurgeRuns(ctx, db, "nobody", 0)
	require.NoError(t, err)
	require.Zero(t, n)
}
