package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/go-co-op/gocron/v2"

	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/state"
)

// Defaults of Service and Config fields left zero.
const (
	// ChunkTimeoutDefault is Service.ChunkTimeout's default.
	ChunkTimeoutDefault = 5 * time.Second
	// RowEstimateEveryDefault is Config.RowEstimateEvery's default.
	RowEstimateEveryDefault = time.Minute
)

const (
	// recordTimeout bounds the recording of a run's start and end, which
	// happen even when the run's context was cancelled.
	recordTimeout = 5 * time.Second
	// stopTimeout is how long gocron's Shutdown waits for running jobs;
	// ours end within a chunk's round trip once their context is cancelled.
	stopTimeout = 30 * time.Second
)

// Errors of RunNow and Start.
var (
	// ErrUnknownService is RunNow's error for a service the Scheduler does
	// not purge.
	ErrUnknownService = errors.New("unknown service")
	// ErrPurgeInProgress is RunNow's error when another run of the service
	// (on this daemon or another one sharing the database) holds its purge
	// lease; the error is a *PurgeInProgressError.
	ErrPurgeInProgress = errors.New("purge already in progress")
	// ErrStopped is the error of Start and RunNow after Stop; it is
	// startstop.ErrStopped too (errors.Is).
	ErrStopped = fmt.Errorf("scheduler: %w", startstop.ErrStopped)
)

// PurgeInProgressError is RunNow's error when another holder has the
// service's purge lease: errors.Is(err, ErrPurgeInProgress). The Holding
// (holder "<daemon>:<host>:<pid>:<random>") is zero when the lease was
// free again by the time it was read.
type PurgeInProgressError struct {
	// Service is the service whose purge was refused.
	Service string
	lease.Holding
}

// Error is Reason, for the logs.
func (e *PurgeInProgressError) Error() string { return "scheduler: " + e.Reason() }

// Reason is the refusal as an operator reads it: which purge, and who
// holds its lease for how long, when known.
func (e *PurgeInProgressError) Reason() string {
	msg := "a purge of " + e.Service + " is already running"
	if e.Holder == "" {
		return msg
	}
	return fmt.Sprintf("%s (held by %s; free in %s if that holder is gone)", msg, e.Holder, e.ExpiresIn.Round(100*time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrPurgeInProgress) true.
func (e *PurgeInProgressError) Unwrap() error { return ErrPurgeInProgress }

// Service is one service whose processed_event table is purged.
type Service struct {
	// Name identifies the service (unique); the jobs are named
	// "purge:<Name>" and "rows:<Name>".
	Name string
	// DB is the service's database.
	DB dbpool.DB
	// ControlFunc, when set, runs the purge lease's statements (the daemon
	// runs them on the service's control session); else they run on DB.
	ControlFunc func(ctx context.Context, fn func(context.Context, query.Querier) error) error
	// LeaseTTL is the purge lease's life after each renewal (default
	// lease.TTLDefault).
	LeaseTTL time.Duration
	// DefaultHorizon is the horizon in force while none is stored (see
	// state.GetHorizon). Must be positive and not under MinHorizon.
	DefaultHorizon time.Duration
	// MinHorizon is the floor a stored horizon may only go under by force.
	MinHorizon time.Duration
	// Every is the purge period (default config.PurgeEveryDefault; -1
	// disables the
	// scheduled purge, RunNow still works).
	Every time.Duration
	// BatchSize is the rows deleted per chunk (default
	// config.PurgeBatchSizeDefault).
	BatchSize int
	// ChunkTimeout bounds each chunk, as its statement timeout too (default
	// ChunkTimeoutDefault).
	ChunkTimeout time.Duration
	// Pause is the sleep between chunks, jittered by up to 50% (default
	// dedup.PurgePauseDefault; -1 for none).
	Pause time.Duration
	// Ahead is, for a partitioned processed_event, the days of partitions
	// each run keeps created after today's (default
	// config.PartitionsAheadDefault).
	Ahead int
	// Archive is the service's outbox archive period
	// (services[].outbox.archive); when positive, the "archive:<Name>" job
	// drops what is older every ArchiveEvery.
	Archive time.Duration
	// ArchiveEvery is the archive job's period (default
	// ArchiveEveryDefault).
	ArchiveEvery time.Duration
	// FailureRetention is how long resolved and discarded failures stay
	// (services[].failures.retention); when positive, the
	// "failures:<Name>" job deletes what is older, and counts the store
	// for platformd_failed_events, every FailuresEvery.
	FailureRetention time.Duration
	// FailuresEvery is the failures job's period (default
	// FailuresEveryDefault).
	FailuresEvery time.Duration
}

// Config configures a Scheduler.
type Config struct {
	// Services are the services to purge.
	Services []Service
	// Daemon identifies this daemon instance in platform.purge_run
	// (default "<hostname>:<pid>").
	Daemon string
	// Logger receives the scheduler's logs (default: discarded).
	Logger *slog.Logger
	// Metrics receives purge metrics; may be nil.
	Metrics *metrics.Metrics
	// RowEstimateEvery is the period of the processed_event row estimate
	// (default RowEstimateEveryDefault; -1 disables it). Unused without
	// Metrics.
	RowEstimateEvery time.Duration
	// PurgeRunsKeep is how many finished runs per service the purge
	// history keeps; older ones are deleted after each run (default
	// state.PurgeRunsKeepDefault).
	PurgeRunsKeep int
}

// Scheduler purges the processed_event table of each configured service,
// on a schedule and through RunNow. It is safe for concurrent use.
type Scheduler struct {
	services map[string]*Service
	order    []*Service
	daemon   string
	logger   *slog.Logger
	metrics  *metrics.Metrics
	rowEvery time.Duration
	keepRuns int

	// runCtx is the parent of every run's context; cancelled by Stop, or
	// when Start's context ends.
	runCtx    context.Context
	runCancel context.CancelFunc

	startstop.Base

	// mu orders run registration against Stop: closing is set, under mu,
	// before Stop waits for runs.
	mu      sync.Mutex
	closing bool
	runs    sync.WaitGroup // scheduled runs and RunNow calls in progress

	testSignals TestSignals
}

// New validates cfg, applies its defaults and returns a Scheduler that is
// not started. It refuses a service without a name or database, named
// twice, with a non-positive
// DefaultHorizon or one under its MinHorizon (state.ErrBelowMinHorizon), or
// with a negative BatchSize or ChunkTimeout.
func New(cfg Config) (*Scheduler, error) {
	s := &Scheduler{
		services: make(map[string]*Service, len(cfg.Services)),
		daemon:   cmp.Or(cfg.Daemon, defaultDaemon()),
		logger:   cfg.Logger,
		metrics:  cfg.Metrics,
		rowEvery: cmp.Or(cfg.RowEstimateEvery, RowEstimateEveryDefault),
		keepRuns: cfg.PurgeRunsKeep,
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	for i, sc := range cfg.Services {
		if err := validateService(sc); err != nil {
			return nil, fmt.Errorf("scheduler: services[%d] (%q): %w", i, sc.Name, err)
		}
		if _, dup := s.services[sc.Name]; dup {
			return nil, fmt.Errorf("scheduler: services[%d]: duplicate service %q", i, sc.Name)
		}
		sc.Every = cmp.Or(sc.Every, config.PurgeEveryDefault)
		sc.BatchSize = cmp.Or(sc.BatchSize, config.PurgeBatchSizeDefault)
		sc.ChunkTimeout = cmp.Or(sc.ChunkTimeout, ChunkTimeoutDefault)
		sc.Pause = cmp.Or(sc.Pause, dedup.PurgePauseDefault)
		s.services[sc.Name] = &sc
		s.order = append(s.order, &sc)
	}
	s.runCtx, s.runCancel = context.WithCancel(context.Background())
	return s, nil
}

func validateService(sc Service) error {
	switch {
	case sc.Name == "":
		return errors.New("name is required")
	case sc.DB == nil:
		return errors.New("database pool is required")
	case sc.DefaultHorizon <= 0:
		return fmt.Errorf("default horizon must be positive, got %s", sc.DefaultHorizon)
	case sc.DefaultHorizon < sc.MinHorizon:
		return fmt.Errorf("default horizon %s under min horizon %s: %w", sc.DefaultHorizon, sc.MinHorizon, state.ErrBelowMinHorizon)
	case sc.BatchSize < 0:
		return fmt.Errorf("batch size must not be negative, got %d", sc.BatchSize)
	case sc.ChunkTimeout < 0:
		return fmt.Errorf("chunk timeout must not be negative, got %s", sc.ChunkTimeout)
	}
	return nil
}

func defaultDaemon() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// Start schedules the jobs and returns; they run in the background until
// Stop, or until ctx ends (which cancels the running purges and stops
// scheduling; Stop must still be called). As every startstop service, a
// second Start returns startstop.ErrStarted, and a Start after Stop
// ErrStopped.
func (s *Scheduler) Start(ctx context.Context) error {
	err := s.StartFunc(func() (func(), error) {
		cron, err := gocron.NewScheduler(gocron.WithLogger(s.logger), gocron.WithStopTimeout(stopTimeout))
		if err != nil {
			return nil, fmt.Errorf("scheduler: start: %w", err)
		}
		if err := s.addJobs(cron); err != nil {
			_ = cron.Shutdown()
			return nil, fmt.Errorf("scheduler: start: %w", err)
		}
		cron.Start()
		stopWatch := context.AfterFunc(ctx, s.runCancel)
		return func() { stopWatch(); s.stop(cron) }, nil
	})
	if errors.Is(err, startstop.ErrStarted) {
		return fmt.Errorf("scheduler: %w", err)
	}
	if errors.Is(err, startstop.ErrStopped) {
		return ErrStopped
	}
	return err
}

func (s *Scheduler) addJobs(cron gocron.Scheduler) error {
	for _, svc := range s.order {
		if svc.Every > 0 {
			// No first run at once: it comes one period after Start (see
			// the package doc).
			if err := s.addJob(cron, svc, "purge", svc.Every, false, s.scheduledPurge); err != nil {
				return fmt.Errorf("purge job of %s: %w", svc.Name, err)
			}
		}
		if svc.Archive > 0 {
			if err := s.addJob(cron, svc, "archive", cmp.Or(svc.ArchiveEvery, ArchiveEveryDefault), true, s.scheduledArchive); err != nil {
				return fmt.Errorf("archive job of %s: %w", svc.Name, err)
			}
		}
		if svc.FailureRetention > 0 {
			if err := s.addJob(cron, svc, "failures", cmp.Or(svc.FailuresEvery, FailuresEveryDefault), true, s.scheduledFailures); err != nil {
				return fmt.Errorf("failures job of %s: %w", svc.Name, err)
			}
		}
		if s.metrics != nil && s.rowEvery > 0 {
			if err := s.addJob(cron, svc, "rows", s.rowEvery, true, s.estimateRows); err != nil {
				return fmt.Errorf("row estimate job of %s: %w", svc.Name, err)
			}
		}
	}
	return nil
}

// addJob adds svc's job kind ("kind:<service>") running task every
// period: in singleton mode (a run that overlaps the next is rescheduled)
// under the scheduler's run context, its first run at once when now.
func (s *Scheduler) addJob(cron gocron.Scheduler, svc *Service, kind string, every time.Duration, now bool,
	task func(context.Context, *Service),
) error {
	opts := []gocron.JobOption{
		gocron.WithName(kind + ":" + svc.Name),
		gocron.WithSingletonMode(gocron.LimitModeReschedule),
	}
	if now {
		opts = append(opts, gocron.WithStartAt(gocron.WithStartImmediately()))
	}
	opts = append(opts, gocron.WithContext(s.runCtx))
	_, err := cron.NewJob(gocron.DurationJob(every), gocron.NewTask(task, svc), opts...)
	return err
}

// Stop cancels the running purges, waits until every run (scheduled or
// RunNow) has ended and recorded itself, and shuts gocron down. It may be
// called more than once, concurrently, and before Start (RunNow is refused
// from then on); every call returns once the Scheduler is stopped.
func (s *Scheduler) Stop() {
	s.Base.Stop()
	s.stop(nil) // stopped before Start: RunNow calls may still run
}

// stop ends the runs and then cron, if the Scheduler was started.
func (s *Scheduler) stop(cron gocron.Scheduler) {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.runCancel()
	// Wait for our runs before gocron's Shutdown, which busy-waits for
	// running jobs: by then they have returned, or return at once.
	s.runs.Wait()
	if cron != nil {
		if err := cron.Shutdown(); err != nil {
			s.logger.Warn("scheduler: gocron shutdown", slog.Any("error", err))
		}
	}
}

// enter registers a run; false once Stop has begun.
func (s *Scheduler) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing || s.Stopped() {
		return false
	}
	s.runs.Add(1)
	return true
}

// RunNow purges service once, now, through the same path and under the
// same one-purger rule as the scheduled job, records the run with trigger
// "admin", and returns it finished. With dryRun it only counts the rows it
// would delete (the run is recorded with dry_run set). actor, the caller's
// name for the logs (an admin token's name, never a secret), is not stored.
// ctx bounds the run; Stop cancels it too.
//
// Errors: ErrUnknownService; a *PurgeInProgressError (ErrPurgeInProgress)
// when another run holds the service's purge lease (no run is recorded);
// ErrStopped after Stop. When the run itself fails, the recorded run is returned with the error; when it was
// cancelled, the error wraps ctx's error.
func (s *Scheduler) RunNow(ctx context.Context, service string, dryRun bool, actor string) (state.PurgeRun, error) {
	svc, ok := s.services[service]
	if !ok {
		return state.PurgeRun{}, fmt.Errorf("scheduler: purge %q: %w", service, ErrUnknownService)
	}
	if !s.enter() {
		return state.PurgeRun{}, fmt.Errorf("scheduler: purge %q: %w", service, ErrStopped)
	}
	defer s.runs.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Stop (or Start's context ending) cancels the run too.
	defer context.AfterFunc(s.runCtx, cancel)() //nolint:contextcheck // ctx is inherited; runCtx only adds a cancellation
	return s.purge(ctx, svc, state.TriggerAdmin, dryRun, actor)
}

// scheduledPurge is the body of a "purge:<service>" job.
func (s *Scheduler) scheduledPurge(ctx context.Context, svc *Service) {
	if !s.enter() {
		return
	}
	defer s.runs.Done()
	_, err := s.purge(ctx, svc, state.TriggerSchedule, false, "")
	if errors.Is(err, ErrPurgeInProgress) {
		s.logger.DebugContext(ctx, "scheduler: purge skipped, another run holds the lock",
			slog.String("service", svc.Name))
		s.testSignals.PurgeSkipped.Signal(svc.Name)
	}
}

// purge is one run, scheduled or not, under the service's purge lease:
// take it, record, read the horizon, delete, record the outcome, release.
// Its outcome is logged here, except for the lease being held elsewhere,
// which the callers handle.
func (s *Scheduler) purge(ctx context.Context, svc *Service, trigger string, dryRun bool, actor string) (state.PurgeRun, error) {
	var run state.PurgeRun
	var runErr error
	err := s.withPurgeLease(ctx, svc, func(lctx context.Context) {
		run, runErr = s.purgeLeased(lctx, svc, trigger, dryRun, actor)
	})
	switch {
	case errors.Is(err, ErrPurgeInProgress):
		return state.PurgeRun{}, err
	case err != nil:
		s.logFailure(ctx, trigger, "scheduler: purge not started", slog.String("service", svc.Name), slog.Any("error", err))
		return state.PurgeRun{}, fmt.Errorf("scheduler: purge %s: %w", svc.Name, err)
	}
	return run, runErr
}

// purgeLeased is a run while the purge lease is held; ctx ends when it is
// lost.
func (s *Scheduler) purgeLeased(ctx context.Context, svc *Service, trigger string, dryRun bool, actor string) (state.PurgeRun, error) {

	// The run is recorded, start and end, even when ctx ends meanwhile: a
	// start INSERT interrupted by a cancellation may have committed, and
	// would then stay "running" for ever.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	id, err := state.StartPurgeRun(rctx, svc.DB, svc.Name, trigger, dryRun, s.daemon)
	cancel()
	if err != nil {
		s.logFailure(ctx, trigger, "scheduler: purge not started", slog.String("service", svc.Name), slog.Any("error", err))
		return state.PurgeRun{}, fmt.Errorf("scheduler: purge %s: %w", svc.Name, err)
	}
	start := time.Now()
	horizon, res, runErr := s.purgeRows(ctx, svc, dryRun)
	took := time.Since(start)

	rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	run, finErr := state.FinishPurgeRun(rctx, svc.DB, id, res.Cutoff, res.Deleted, runErr)
	if finErr == nil {
		if _, err := state.PrunePurgeRuns(rctx, svc.DB, svc.Name, s.keepRuns); err != nil {
			s.logger.WarnContext(ctx, "scheduler: purge history not pruned", slog.String("service", svc.Name), slog.Any("error", err))
		}
	}
	cancel()
	if finErr != nil {
		// Report what is known even though it could not be recorded.
		run = state.PurgeRun{ID: id, Service: svc.Name, Trigger: trigger, DryRun: dryRun,
			Cutoff: res.Cutoff, Deleted: res.Deleted, Daemon: s.daemon}
		if runErr != nil {
			run.Error = runErr.Error()
		}
	}
	s.observe(svc.Name, dryRun, res.Deleted, took, runErr == nil)
	defer func() {
		s.testSignals.PurgeFinished.Signal(PurgeSignal{Service: svc.Name, Started: start, Run: run, Err: runErr})
	}()

	attrs := []any{
		slog.String("service", svc.Name), slog.String("trigger", trigger), slog.Int64("run_id", id),
		slog.Bool("dry_run", dryRun), slog.Int64("deleted", res.Deleted), slog.Int("chunks", res.Chunks),
		slog.Duration("horizon", horizon), slog.Time("cutoff", res.Cutoff),
		slog.Duration("duration", took), slog.Duration("longest_chunk", res.LongestChunk),
	}
	if actor != "" {
		attrs = append(attrs, slog.String("actor", actor))
	}
	switch {
	case runErr != nil && ctx.Err() != nil:
		// Cancelled (Stop, or the admin caller went away): not an error.
		s.logger.InfoContext(ctx, "scheduler: purge interrupted", attrs...)
		return run, fmt.Errorf("scheduler: purge %s: %w (%w)", svc.Name, ctx.Err(), runErr)
	case runErr != nil:
		s.logFailure(ctx, trigger, "scheduler: purge failed", append(attrs, slog.Any("error", runErr))...)
		return run, fmt.Errorf("scheduler: purge %s: %w", svc.Name, runErr)
	case finErr != nil:
		s.logger.ErrorContext(ctx, "scheduler: purge done but not recorded", append(attrs, slog.Any("error", finErr))...)
		return run, fmt.Errorf("scheduler: purge %s: %w", svc.Name, finErr)
	case res.Deleted > 0 && !dryRun:
		s.logger.InfoContext(ctx, "scheduler: purge done", attrs...)
	default:
		s.logger.DebugContext(ctx, "scheduler: purge done", attrs...)
	}
	return run, nil
}

// logFailure logs a failed scheduled run as an error; a failed admin run is
// returned to its caller, so it is only logged at debug level here.
func (s *Scheduler) logFailure(ctx context.Context, trigger, msg string, attrs ...any) {
	if ctx.Err() != nil {
		s.logger.InfoContext(ctx, msg, attrs...)
		return
	}
	if trigger == state.TriggerSchedule {
		s.logger.ErrorContext(ctx, msg, attrs...)
		return
	}
	s.logger.DebugContext(ctx, msg, attrs...)
}

// purgeRows reads the horizon in force and purges against it.
func (s *Scheduler) purgeRows(ctx context.Context, svc *Service, dryRun bool) (time.Duration, dedup.PurgeResult, error) {
	h, err := state.GetHorizon(ctx, svc.DB, svc.Name, svc.DefaultHorizon, svc.MinHorizon)
	if err != nil {
		return 0, dedup.PurgeResult{}, err
	}
	horizon := h.Horizon
	if horizon < svc.MinHorizon && !h.Forced {
		s.logger.WarnContext(ctx, "scheduler: stored horizon under min_horizon and not forced; purging at min_horizon",
			slog.String("service", svc.Name), slog.Duration("horizon", horizon), slog.Duration("min_horizon", svc.MinHorizon))
		horizon = svc.MinHorizon
	}
	p := dedup.PurgeParams{
		Horizon:      horizon,
		BatchSize:    svc.BatchSize,
		ChunkTimeout: svc.ChunkTimeout,
		Pause:        svc.Pause,
		DryRun:       dryRun,
		Ahead:        svc.Ahead,
	}
	if s.metrics != nil && !dryRun {
		chunks := s.metrics.PurgeChunkDuration.WithLabelValues(svc.Name)
		p.OnChunkFunc = func(_ int64, took time.Duration) { chunks.Observe(took.Seconds()) }
	}
	res, err := dedup.Purge(ctx, svc.DB, p)
	return max(horizon, res.HorizonInForce), res, err
}

// observe updates the purge metrics of a run that deleted (dry runs count
// nothing).
func (s *Scheduler) observe(service string, dryRun bool, deleted int64, took time.Duration, ok bool) {
	if s.metrics == nil || dryRun {
		return
	}
	s.metrics.PurgeRowsDeleted.WithLabelValues(service).Add(float64(deleted))
	s.metrics.PurgeDuration.WithLabelValues(service).Observe(took.Seconds())
	if ok {
		s.metrics.PurgeLastSuccess.WithLabelValues(service).SetToCurrentTime()
	}
}

// control runs fn through ControlFunc when set, else on DB.
func (sc *Service) control(ctx context.Context, fn func(context.Context, query.Querier) error) error {
	if sc.ControlFunc != nil {
		return sc.ControlFunc(ctx, fn)
	}
	return fn(ctx, sc.DB)
}

// estimateRows is the body of a "rows:<service>" job: it sets the
// processed_event row estimate from the planner's statistics (no scan).
func (s *Scheduler) estimateRows(ctx context.Context, svc *Service) {
	if !s.enter() {
		return
	}
	defer s.runs.Done()
	var n int64
	err := svc.control(ctx, func(ctx context.Context, q query.Querier) error {
		var err error
		n, err = dedup.EstimateRows(ctx, q) // partitioned: the sum of the partitions'
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			s.logger.WarnContext(ctx, "scheduler: processed_event row estimate",
				slog.String("service", svc.Name), slog.Any("error", err))
		}
		return
	}
	// -1 until the table is first vacuumed or analyzed.
	s.metrics.ProcessedEventRows.WithLabelValues(svc.Name).Set(float64(max(n, 0)))
	s.testSignals.RowsEstimated.Signal(n)
}
