package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
)

func histogramCount(t *testing.T, h prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, h.(prometheus.Metric).Write(&m))
	return m.GetHistogram().GetSampleCount()
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := service(b.db, time.Hour)
	for name, tc := range map[string]struct {
		mutate func(*scheduler.Service)
		is     error
	}{
		"no name":            {mutate: func(sc *scheduler.Service) { sc.Name = "" }},
		"no database":        {mutate: func(sc *scheduler.Service) { sc.DB = nil }},
		"zero horizon":       {mutate: func(sc *scheduler.Service) { sc.DefaultHorizon = 0 }},
		"horizon under min":  {mutate: func(sc *scheduler.Service) { sc.MinHorizon = 2 * time.Hour }, is: state.ErrBelowMinHorizon},
		"negative batch":     {mutate: func(sc *scheduler.Service) { sc.BatchSize = -1 }},
		"negative chunk t/o": {mutate: func(sc *scheduler.Service) { sc.ChunkTimeout = -time.Second }},
	} {
		t.Run(name, func(t *testing.T) {
			sc := ok
			tc.mutate(&sc)
			_, err := scheduler.New(scheduler.Config{Services: []scheduler.Service{sc}})
			require.Error(t, err)
			if tc.is != nil {
				require.ErrorIs(t, err, tc.is)
			}
		})
	}
	_, err := scheduler.New(scheduler.Config{Services: []scheduler.Service{ok, ok}})
	require.ErrorContains(t, err, "duplicate")

	// Defaults: a service with only the required fields purges.
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{
		{Name: "stock", DB: b.db, DefaultHorizon: time.Hour},
	}})
	b.seed(t, 10, 2*time.Hour)
	run, err := s.RunNow(context.Background(), "stock", false, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 10, run.Deleted)
	require.NotEmpty(t, run.Daemon)
}

// Rows older than the horizon go, rows inside it stay, to the second, by
// the database clock; the run is recorded and measured.
func TestRunNowDeletesExpiredRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := metrics.New()
	logs := &logRecorder{}
	horizon := time.Hour
	sc := service(b.db, horizon)
	sc.BatchSize = 100
	sc.Pause = -1
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}, Metrics: m,
		Daemon: "daemon-a", Logger: slog.New(logs)})
	ctx := context.Background()

	// One statement seeds both sides of the horizon from the same now().
	_, err := b.db.Exec(ctx, `INSERT INTO processed_event (event_id, processed_at)
		SELECT gen_random_uuid(), now() - interval '1 hour 2 seconds' FROM generate_series(1, 250)
		UNION ALL
		SELECT gen_random_uuid(), now() - interval '59 minutes 58 seconds' FROM generate_series(1, 40)
		UNION ALL
		SELECT gen_random_uuid(), now() - interval '1 minute' FROM generate_series(1, 10)`)
	require.NoError(t, err)
	seededAt := b.dbNow(t)

	run, err := s.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.Less(t, run.StartedAt.Sub(seededAt), 2*time.Second, "the run must start within the 2s margin")
	require.EqualValues(t, 250, run.Deleted)
	require.Equal(t, 50, b.rows(t))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM processed_event WHERE processed_at < $1`, run.Cutoff))
	require.WithinDuration(t, run.StartedAt.Add(-horizon), run.Cutoff, 2*time.Second)

	require.Equal(t, state.TriggerAdmin, run.Trigger)
	require.False(t, run.DryRun)
	require.Empty(t, run.Error)
	require.Equal(t, "daemon-a", run.Daemon)
	require.False(t, run.FinishedAt.Before(run.StartedAt))
	last, ok, err := state.LastPurge(ctx, b.db, "stock")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, run.ID, last.ID)

	require.InDelta(t, 250, testutil.ToFloat64(m.PurgeRowsDeleted.WithLabelValues("stock")), 0)
	require.Positive(t, testutil.ToFloat64(m.PurgeLastSuccess.WithLabelValues("stock")))
	require.EqualValues(t, 3, histogramCount(t, m.PurgeChunkDuration.WithLabelValues("stock"))) // 100, 100, 50
	require.EqualValues(t, 1, histogramCount(t, m.PurgeDuration.WithLabelValues("stock")))

	done := logs.find("scheduler: purge done")
	require.Len(t, done, 1)
	require.Equal(t, slog.LevelInfo, done[0].Level)
	require.Equal(t, "250", done[0].Attrs["deleted"])
	require.Equal(t, "ops", done[0].Attrs["actor"])

	// Nothing left to delete: the run is logged at debug level only.
	run, err = s.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.Zero(t, run.Deleted)
	done = logs.find("scheduler: purge done")
	require.Len(t, done, 2)
	require.Equal(t, slog.LevelDebug, done[1].Level)
	require.Empty(t, logs.atLeast(slog.LevelWarn))
}

func TestRunNowDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := metrics.New()
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)}, Metrics: m})
	ctx := context.Background()
	b.seed(t, 120, 2*time.Hour)
	b.seed(t, 30, time.Minute)

	run, err := s.RunNow(ctx, "stock", true, "ops")
	require.NoError(t, err)
	require.True(t, run.DryRun)
	require.EqualValues(t, 120, run.Deleted)
	require.False(t, run.Cutoff.IsZero())
	require.False(t, run.FinishedAt.IsZero())
	require.Equal(t, 150, b.rows(t))

	runs, err := state.ListPurgeRuns(ctx, b.db, "stock", 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.True(t, runs[0].DryRun)
	require.Equal(t, state.TriggerAdmin, runs[0].Trigger)
	_, ok, err := state.LastPurge(ctx, b.db, "stock")
	require.NoError(t, err)
	require.False(t, ok, "a dry run is not a purge")
	require.Zero(t, testutil.ToFloat64(m.PurgeRowsDeleted.WithLabelValues("stock")))
	require.Zero(t, testutil.ToFloat64(m.PurgeLastSuccess.WithLabelValues("stock")))
}

// Each run prunes the history to the newest PurgeRunsKeep finished runs.
func TestRunsPruneTheHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)}, PurgeRunsKeep: 3})
	ctx := context.Background()
	var ids []int64
	for range 5 {
		run, err := s.RunNow(ctx, "stock", true, "ops")
		require.NoError(t, err)
		ids = append(ids, run.ID)
	}
	runs, err := state.ListPurgeRuns(ctx, b.db, "stock", 10)
	require.NoError(t, err)
	require.Len(t, runs, 3)
	require.Equal(t, ids[4], runs[0].ID)
	require.Equal(t, ids[2], runs[2].ID)
}

func TestRunNowErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)}})
	ctx := context.Background()
	b.seed(t, 20, 2*time.Hour)

	_, err := s.RunNow(ctx, "billing", false, "ops")
	require.ErrorIs(t, err, scheduler.ErrUnknownService)

	// Another daemon holds the purge lease.
	other, err := lease.New(lease.Config{Name: scheduler.PurgeLockName("stock"), Holder: "other", TTL: time.Minute, DB: b.db})
	require.NoError(t, err)
	ok, err := other.TryAcquire(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	_, err = s.RunNow(ctx, "stock", false, "ops")
	require.ErrorIs(t, err, scheduler.ErrPurgeInProgress)
	// The refusal names the holder and how long its lease lasts, so an
	// operator knows what to wait for.
	var held *scheduler.PurgeInProgressError
	require.ErrorAs(t, err, &held)
	require.Equal(t, "other", held.Holder)
	require.Greater(t, held.ExpiresIn, 50*time.Second)
	require.LessOrEqual(t, held.ExpiresIn, time.Minute)
	require.Contains(t, err.Error(), "held by other; free in ")
	_, err = s.RunNow(ctx, "stock", true, "ops")
	require.ErrorIs(t, err, scheduler.ErrPurgeInProgress)
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM platform.purge_run`), "a skipped run is not recorded")
	require.Equal(t, 20, b.rows(t))

	require.NoError(t, other.Release(ctx))
	run, err := s.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 20, run.Deleted)

	// The lease went with the run: released, and no session lock used.
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM platform.lease`))
	require.Equal(t, 0, b.advisoryLocks(t))
}

// An admin horizon change applies at the next run, scheduled or not,
// without restart; an unforced stored horizon under the configured minimum
// is raised to it, a forced one is honoured.
func TestHorizonChangeAppliesAtNextRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sc := service(b.db, 2*time.Hour)
	sc.MinHorizon = time.Hour
	sc.Every = 200 * time.Millisecond
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}})
	b.seed(t, 50, 3*time.Hour)
	b.seed(t, 40, 90*time.Minute)
	b.seed(t, 30, 45*time.Minute)
	b.seed(t, 20, 10*time.Minute)
	purged := &s.TestSignals().PurgeFinished
	purged.Init(t)
	require.NoError(t, s.Start(ctx))

	purged.WaitUntil("the 3h rows purged", func() bool { return b.rows(t) == 90 })

	_, err := state.SetHorizon(ctx, b.db, "stock", time.Hour, time.Hour, false, "ops")
	require.NoError(t, err)
	purged.WaitUntil("the new horizon applied", func() bool { return b.rows(t) == 50 })
	require.Positive(t, b.count(t, `SELECT count(*) FROM platform.purge_run WHERE trigger = 'schedule' AND error IS NULL`))
	s.Stop()

	// Stored when the minimum was lower, not forced: purged at the minimum.
	s2 := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b.db, 2*time.Hour)}})
	_, err = state.SetHorizon(ctx, b.db, "stock", 30*time.Minute, time.Minute, false, "ops")
	require.NoError(t, err)
	sc.Every = -1
	s3 := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}})
	run, err := s3.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.Zero(t, run.Deleted, "45m rows are inside the 1h minimum")
	// Under a service whose minimum allows it, the same horizon applies.
	run, err = s2.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 30, run.Deleted)

	// Forced under the minimum: honoured.
	b.seed(t, 15, 45*time.Minute)
	_, err = state.SetHorizon(ctx, b.db, "stock", 30*time.Minute, time.Hour, true, "ops")
	require.NoError(t, err)
	run, err = s3.RunNow(ctx, "stock", false, "ops")
	require.NoError(t, err)
	require.EqualValues(t, 15, run.Deleted)
	require.Equal(t, 20, b.rows(t))
}

// The first scheduled run comes one period after Start, not at Start.
func TestFirstRunAfterOnePeriod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := service(b.db, time.Hour)
	sc.Every = 700 * time.Millisecond
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}})
	b.seed(t, 10, 2*time.Hour)
	purged := &s.TestSignals().PurgeFinished
	purged.Init(t)
	start := time.Now()
	require.NoError(t, s.Start(context.Background()))
	require.ErrorIs(t, s.Start(context.Background()), startstop.ErrStarted, "a second Start is refused, and changes nothing")
	// The first run is the first signal: when it started says whether it
	// waited a period, with no window to sleep through.
	first := purged.WaitOrTimeout()
	require.NoError(t, first.Err)
	require.GreaterOrEqual(t, first.Started.Sub(start), sc.Every, "the first run started a period after Start")
	require.EqualValues(t, 10, first.Run.Deleted)
	require.Equal(t, 0, b.rows(t))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM platform.purge_run WHERE started_at <= $1`, first.Run.StartedAt),
		"no run before the first")
}

// Several daemons (separate pools, one database) scheduling the same
// service often: the lock lets one purge at a time, so the recorded runs
// never overlap, and all expired rows go. Each purge is made slow (small
// chunks, pauses) and rows keep expiring during the test, so that without
// the lock the runs would overlap.
func TestSchedulersDoNotOverlap(t *testing.T) {
	t.Parallel()
	for _, daemons := range []int{2, 3} {
		t.Run(fmt.Sprintf("daemons=%d", daemons), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			horizon := time.Hour
			b.seed(t, 100, horizon+5*time.Second)
			// These expire one after the other during the next 2 seconds.
			b.seedSpread(t, 600, horizon, horizon-2*time.Second)
			b.seed(t, 100, time.Minute)
			seededAt := b.dbNow(t)

			logs := &logRecorder{}
			scheds := make([]*scheduler.Scheduler, daemons)
			for i := range scheds {
				sc := service(b.pool(t, 4), horizon)
				sc.Every = 150 * time.Millisecond
				sc.BatchSize = 10
				sc.Pause = 10 * time.Millisecond
				scheds[i] = newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc},
					Daemon: fmt.Sprintf("daemon-%d", i), Logger: slog.New(logs)})
			}
			for _, s := range scheds {
				require.NoError(t, s.Start(ctx))
				time.Sleep(30 * time.Millisecond) //nolint:forbidigo // the scenario, not a wait: stagger the schedules a little
			}
			// Run until at least three purges have finished and another
			// daemon was turned away by the lock (a loaded machine makes
			// each purge slower: wait for the events, not a fixed time).
			require.Eventually(t, func() bool {
				return b.count(t, `SELECT count(*) FROM platform.purge_run WHERE NOT dry_run AND finished_at IS NOT NULL`) >= 3 &&
					len(logs.find("scheduler: purge skipped, another run holds the lock")) > 0
			}, 30*time.Second, 50*time.Millisecond)
			for _, s := range scheds {
				s.Stop()
			}

			var runs, daemonsSeen, skipped int
			require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*), count(DISTINCT daemon) FROM platform.purge_run
				WHERE NOT dry_run`).Scan(&runs, &daemonsSeen))
			skipped = len(logs.find("scheduler: purge skipped, another run holds the lock"))
			t.Logf("%d runs by %d daemons, %d skipped for the lock", runs, daemonsSeen, skipped)
			overlaps := b.count(t, `SELECT count(*) FROM platform.purge_run a JOIN platform.purge_run b
				ON a.service = b.service AND a.id < b.id
				WHERE NOT a.dry_run AND NOT b.dry_run
				AND tstzrange(a.started_at, a.finished_at, '[]') && tstzrange(b.started_at, b.finished_at, '[]')`)
			require.Zero(t, overlaps, "purge runs overlapped")
			require.GreaterOrEqual(t, runs, 3)
			require.Positive(t, skipped, "the runs must have contended for the lock")

			require.Zero(t, b.count(t, `SELECT count(*) FROM processed_event WHERE processed_at < $1`,
				seededAt.Add(-horizon)), "rows expired at the start are gone")
			require.Zero(t, b.count(t, `SELECT count(*) FROM processed_event WHERE processed_at <
				(SELECT max(cutoff) FROM platform.purge_run WHERE error IS NULL AND NOT dry_run)`),
				"rows expired at the last successful run's cutoff are gone")
			require.GreaterOrEqual(t, b.rows(t), 100)
			require.Empty(t, logs.atLeast(slog.LevelError))
		})
	}
}

// Purges that do overlap, because they bypass the lock (dedup.Purge called
// directly beside RunNow), still delete exactly the expired rows between
// them.
func TestOverlappingPurgesDeleteExactlyExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	sc := service(b.db, time.Hour)
	sc.BatchSize = 50
	sc.Pause = -1
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}})
	b.seed(t, 4000, time.Hour+2*time.Second)
	b.seed(t, 300, time.Hour-2*time.Minute)

	other := b.pool(t, 4)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		total   int64
		started = make(chan struct{})
	)
	for range 2 {
		wg.Go(func() {
			<-started
			res, err := dedup.Purge(ctx, other, dedup.PurgeParams{Horizon: time.Hour, BatchSize: 50, Pause: -1})
			require.NoError(t, err)
			mu.Lock()
			total += res.Deleted
			mu.Unlock()
		})
	}
	wg.Go(func() {
		<-started
		run, err := s.RunNow(ctx, "stock", false, "ops")
		require.NoError(t, err)
		mu.Lock()
		total += run.Deleted
		mu.Unlock()
	})
	close(started)
	wg.Wait()
	require.EqualValues(t, 4000, total)
	require.Equal(t, 300, b.rows(t))
}

func TestStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := scheduler.New(scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)}})
	require.NoError(t, err)
	s.Stop()
	s.Stop()
	require.ErrorIs(t, s.Start(context.Background()), scheduler.ErrStopped)
	require.ErrorIs(t, s.Start(context.Background()), startstop.ErrStopped)
	_, err = s.RunNow(context.Background(), "stock", false, "ops")
	require.ErrorIs(t, err, scheduler.ErrStopped)

	s2, err := scheduler.New(scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)}})
	require.NoError(t, err)
	require.NoError(t, s2.Start(context.Background()))
	require.ErrorIs(t, s2.Start(context.Background()), startstop.ErrStarted, "a second Start, as startstop.Base answers it")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(s2.Stop)
	}
	wg.Wait()
	s2.Stop()
}

// slowService makes each run take about 10s: 3000 expired rows deleted 10
// at a time with a 30ms pause.
func slowService(t *testing.T, b *testBundle) scheduler.Service {
	t.Helper()
	b.seed(t, 3000, 2*time.Hour)
	sc := service(b.db, time.Hour)
	sc.BatchSize = 10
	sc.Pause = 30 * time.Millisecond
	return sc
}

// waitPurging waits until a run is under way and has deleted rows.
func waitPurging(t *testing.T, b *testBundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM platform.purge_run WHERE finished_at IS NULL`) == 1 && b.rows(t) < 3000
	}, 10*time.Second, 10*time.Millisecond)
}

// requireInterrupted checks the one recorded run ended with a cancellation.
func requireInterrupted(t *testing.T, b *testBundle, trigger string) {
	t.Helper()
	runs, err := state.ListPurgeRuns(context.Background(), b.db, "stock", 10)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Equal(t, trigger, runs[0].Trigger)
	require.False(t, runs[0].FinishedAt.IsZero(), "the interrupted run is recorded as finished")
	require.Contains(t, runs[0].Error, "context canceled")
	require.Positive(t, runs[0].Deleted)
	require.EqualValues(t, 3000-b.rows(t), runs[0].Deleted)
}

// Stop during a long scheduled run cancels it promptly; the run is recorded
// with its error and not logged as an error.
func TestStopDuringScheduledRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &logRecorder{}
	sc := slowService(t, b)
	sc.Every = 100 * time.Millisecond
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}, Logger: slog.New(logs)})
	require.NoError(t, s.Start(context.Background()))
	waitPurging(t, b)

	start := time.Now()
	s.Stop()
	took := time.Since(start)
	t.Logf("Stop took %s", took)
	require.Less(t, took, 3*time.Second)
	requireInterrupted(t, b, state.TriggerSchedule)
	require.Len(t, logs.find("scheduler: purge interrupted"), 1)
	require.Empty(t, logs.atLeast(slog.LevelWarn))
	require.Zero(t, b.advisoryLocks(t))
}

// Stop during RunNow cancels it too; RunNow returns a context error.
func TestStopDuringRunNow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{slowService(t, b)}})
	require.NoError(t, s.Start(context.Background()))
	errc := make(chan error, 1)
	go func() {
		_, err := s.RunNow(context.Background(), "stock", false, "ops")
		errc <- err
	}()
	waitPurging(t, b)
	start := time.Now()
	s.Stop()
	require.Less(t, time.Since(start), 3*time.Second)
	err := <-errc
	require.ErrorIs(t, err, context.Canceled)
	requireInterrupted(t, b, state.TriggerAdmin)
}

// Cancelling Start's context cancels the running purge as Stop does.
func TestStartContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sc := slowService(t, b)
	sc.Every = 100 * time.Millisecond
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{sc}})
	ctx, cancel := context.WithCancel(context.Background())
	purged := &s.TestSignals().PurgeFinished
	purged.Init(t)
	require.NoError(t, s.Start(ctx))
	waitPurging(t, b)
	cancel()
	require.Error(t, purged.WaitOrTimeout().Err, "the run in progress ended, cancelled")
	require.Zero(t, b.count(t, `SELECT count(*) FROM platform.purge_run WHERE finished_at IS NULL`))
	requireInterrupted(t, b, state.TriggerSchedule)
	s.Stop()
}

// The caller's context bounds RunNow.
func TestRunNowContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{slowService(t, b)}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := s.RunNow(ctx, "stock", false, "ops")
		errc <- err
	}()
	waitPurging(t, b)
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(3 * time.Second):
		t.Fatal("RunNow did not return after its context was cancelled")
	}
	requireInterrupted(t, b, state.TriggerAdmin)
}

func TestRowEstimate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := metrics.New()
	b.seed(t, 1000, time.Minute)
	_, err := b.db.Exec(context.Background(), `ANALYZE processed_event`)
	require.NoError(t, err)
	s := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b.db, time.Hour)},
		Metrics: m, RowEstimateEvery: 100 * time.Millisecond})
	s.TestSignals().RowsEstimated.Init(t)
	require.NoError(t, s.Start(context.Background()))
	gauge := m.ProcessedEventRows.WithLabelValues("stock")
	s.TestSignals().RowsEstimated.WaitUntil("the estimate set", func() bool { return testutil.ToFloat64(gauge) == 1000 })

	// Never analyzed: reltuples is -1, reported as 0.
	b2 := setup(t)
	m2 := metrics.New()
	s2 := newScheduler(t, scheduler.Config{Services: []scheduler.Service{service(b2.db, time.Hour)},
		Metrics: m2, RowEstimateEvery: 100 * time.Millisecond})
	var reltuples float64
	require.NoError(t, b2.db.QueryRow(context.Background(),
		`SELECT reltuples FROM pg_class WHERE oid = 'processed_event'::regclass`).Scan(&reltuples))
	require.Negative(t, reltuples)
	m2.ProcessedEventRows.WithLabelValues("stock").Set(-5) // sentinel, overwritten by the job
	s2.TestSignals().RowsEstimated.Init(t)
	require.NoError(t, s2.Start(context.Background()))
	require.LessOrEqual(t, s2.TestSignals().RowsEstimated.WaitOrTimeout(), int64(0), "never analyzed: no estimate")
	require.Zero(t, testutil.ToFloat64(m2.ProcessedEventRows.WithLabelValues("stock")), "reported as 0, the sentinel overwritten")
}

// River-style start/stop stress: start, maybe run, stop, many times.
func TestStartStopStress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, 50, 2*time.Hour)
	sc := service(b.db, time.Hour)
	sc.Every = 5 * time.Millisecond
	var longest time.Duration
	for i := range 20 {
		s, err := scheduler.New(scheduler.Config{Services: []scheduler.Service{sc}, Metrics: metrics.New(),
			RowEstimateEvery: 5 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, s.Start(context.Background()))
		if i%2 == 0 {
			go func() { _, _ = s.RunNow(context.Background(), "stock", i%4 == 0, "ops") }()
		}
		time.Sleep(time.Duration(i%5) * 5 * time.Millisecond) //nolint:forbidigo // the scenario: stop at varied points of a run
		start := time.Now()
		s.Stop()
		longest = max(longest, time.Since(start))
		_, err = s.RunNow(context.Background(), "stock", false, "ops")
		require.ErrorIs(t, err, scheduler.ErrStopped)
	}
	t.Logf("longest Stop: %s", longest)
	require.Less(t, longest, 3*time.Second)
	// Every recorded run is finished, however Stop interrupted it.
	require.Zero(t, b.count(t, `SELECT count(*) FROM platform.purge_run WHERE finished_at IS NULL`))
}
