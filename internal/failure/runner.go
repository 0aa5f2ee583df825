package failure

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/startstop"
	"github.com/platformd/platformd/internal/testsignal"
)

// HeaderReplayRetryPrefix starts a retried copy's x-replay header:
// "retry-failed:<retry id>".
const HeaderReplayRetryPrefix = "retry-failed:"

// RetryLeaseName is the runner's lease in platform.lease (package lease),
// which lives in each service database: one runner per service database
// sends its retries, whatever the number of daemons.
const RetryLeaseName = "platformd.failure_retry"

// Defaults of RunnerConfig.
const (
	// RunnerPollDefault is how often an idle runner looks for open
	// retries, and how often a canary's outcome is read.
	RunnerPollDefault = time.Second
	// RunnerLockRetryDefault is how often a runner tries the lease another
	// holds while a retry is open.
	RunnerLockRetryDefault = time.Second
	// RunnerLeaseTTLDefault is the lease's life after each renewal.
	RunnerLeaseTTLDefault = lease.TTLDefault
	// RunnerChunkEveryDefault is the time one chunk stands for at the
	// retry's rate: a chunk is rate x RunnerChunkEvery copies (at most
	// RunnerChunkMax), published and confirmed together, then marked sent
	// in one transaction. It is also how soon a retry gives way to a
	// backlog (RunnerConfig.Backlog), and how many copies at most were
	// already sent when it does: 400 at 2,000/s.
	RunnerChunkEveryDefault = 200 * time.Millisecond
	// RunnerChunkMax is the most copies of one chunk.
	RunnerChunkMax = 1000
	// RunnerYieldShareDefault is the share of its rate a retry keeps
	// while a pool it does not send to has a backlog (RunnerConfig.Backlog):
	// live traffic goes first, and the retry never stops outright, so a
	// pool that is always behind cannot starve it.
	RunnerYieldShareDefault = 0.1
	// RunnerYieldHoldDefault is how long a retry keeps giving way after
	// the backlog it gave way to has left the queue: the pool still works
	// through what it holds (its prefetch).
	RunnerYieldHoldDefault = time.Second
	// RunnerUnhostedTimeoutDefault is how long a retry waits, with no
	// progress, for a daemon hosting the pools of its unsent items before
	// it is finished (done, its error naming what was not sent).
	RunnerUnhostedTimeoutDefault = 10 * time.Minute
	// runnerStopTimeout bounds how long Stop waits for the chunk in
	// flight.
	runnerStopTimeout = 10 * time.Second
	markTimeout       = 10 * time.Second
	publishTimeout    = 30 * time.Second
)

// Headers a retried copy drops: the attempt starts afresh, and the
// broker's and the publisher's own bookkeeping is the previous copy's.
var droppedHeaders = []string{broker.HeaderAttempt, broker.HeaderError, broker.HeaderFailureReason, broker.HeaderFailedAt,
	"x-death", "x-delivery-count", "x-platformd-publish-id", broker.HeaderReplay, HeaderFailureID,
	broker.HeaderBeyondHorizonOverride}

// droppedHeaderPrefixes are the dead-lettering headers' prefixes.
var droppedHeaderPrefixes = []string{"x-first-death-", "x-last-death-"}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Store is the service database's failure store.
	Store *Store
	// Broker is the publishing connection.
	Broker *broker.Conn
	// QueueOf returns the queue of a pool this daemon hosts; false for a
	// pool it does not host. A retry's items of pools not hosted here are
	// left unsent for a daemon that hosts them: while only such items are
	// left, the runner lets the lease go (so another daemon may take it)
	// and notes why on the retry's error; after UnhostedTimeout with no
	// progress the retry is finished (done) with an error naming how many
	// copies were not sent and of which pools.
	QueueOf func(pool string) (queue string, ok bool)
	// Logger receives the runner's progress and faults.
	Logger *slog.Logger
	// Poll: see RunnerPollDefault. LockRetry: see RunnerLockRetryDefault.
	Poll, LockRetry time.Duration
	// LeaseTTL: see RunnerLeaseTTLDefault.
	LeaseTTL time.Duration
	// ChunkEvery: see RunnerChunkEveryDefault.
	ChunkEvery time.Duration
	// UnhostedTimeout: see RunnerUnhostedTimeoutDefault.
	UnhostedTimeout time.Duration
	// Backlog, when set, names a pool of this daemon with a backlog right
	// now ("service/pool"), or returns "" when none has; it leaves out
	// this service's pools in targets (those the retry sends to: their
	// live traffic shares its queue with the copies, at the rate the
	// operator chose). It is asked before each chunk; while it names
	// one, and YieldHold after, the retry sends at YieldShare of its
	// rate. Default: none.
	Backlog func(ctx context.Context, targets []string) string
	// YieldShare: see RunnerYieldShareDefault. YieldHold: see
	// RunnerYieldHoldDefault.
	YieldShare float64
	YieldHold  time.Duration
	// Yielded, when set, is told the time each chunk sent while giving
	// way to a backlog stands for (platformd_failure_retry_yield_seconds_total).
	Yielded func(time.Duration)
	// ControlFunc, when set, runs the runner's small statements (its idle
	// poll for an open retry, its lease) on the service's control
	// session, so that an idle runner holds no pooled connection;
	// default: on the store's database pool.
	ControlFunc func(ctx context.Context, fn func(context.Context, query.Querier) error) error
}

// RunnerTestSignals are a runner's internal events that tests wait on
// (package testsignal); production code never initialises them.
type RunnerTestSignals struct {
	// ChunkSent fires after a chunk was published and marked sent (value:
	// the copies published).
	ChunkSent testsignal.Signal[int]
	// CanaryWaiting fires each time the runner found canary copies still
	// waiting for their outcome (value: how many).
	CanaryWaiting testsignal.Signal[int64]
	// Yielding fires when a retry starts giving way to a backlog (value:
	// the pool, "service/pool") and when it goes back to its rate ("").
	Yielding testsignal.Signal[string]
}

// Runner sends the retries of one service database, oldest first: one
// runner per database is active across daemons, the holder of the lease
// RetryLeaseName, taken only while a retry is open. A retry resumes after
// a restart from its items not yet marked sent. It follows startstop's
// lifecycle and is safe for concurrent use.
type Runner struct {
	startstop.Base
	cfg         RunnerConfig
	log         *slog.Logger
	lease       *lease.Lease
	wake        chan struct{}
	active      atomic.Bool
	testSignals RunnerTestSignals
}

// NewRunner returns a stopped Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Store == nil || cfg.Broker == nil || cfg.QueueOf == nil || cfg.Logger == nil {
		return nil, errors.New("failure: runner needs a store, a broker, QueueOf and a logger")
	}
	cfg.Poll = cmp.Or(cfg.Poll, RunnerPollDefault)
	cfg.LockRetry = cmp.Or(cfg.LockRetry, RunnerLockRetryDefault)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, RunnerLeaseTTLDefault)
	cfg.ChunkEvery = cmp.Or(cfg.ChunkEvery, RunnerChunkEveryDefault)
	cfg.UnhostedTimeout = cmp.Or(cfg.UnhostedTimeout, RunnerUnhostedTimeoutDefault)
	cfg.YieldShare = cmp.Or(cfg.YieldShare, RunnerYieldShareDefault)
	if cfg.YieldShare <= 0 || cfg.YieldShare > 1 {
		return nil, fmt.Errorf("failure: runner: yield share %v is not in (0, 1]", cfg.YieldShare)
	}
	cfg.YieldHold = cmp.Or(cfg.YieldHold, RunnerYieldHoldDefault)
	if cfg.ControlFunc == nil {
		db := cfg.Store.db
		cfg.ControlFunc = func(ctx context.Context, fn func(context.Context, query.Querier) error) error { return fn(ctx, db) }
	}
	l, err := lease.New(lease.Config{Name: RetryLeaseName, TTL: cfg.LeaseTTL, RetryEvery: cfg.LockRetry, DoFunc: cfg.ControlFunc, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("failure: runner: %w", err)
	}
	return &Runner{cfg: cfg, log: cfg.Logger, lease: l, wake: make(chan struct{}, 1)}, nil
}

// Start runs the runner in the background until Stop.
func (r *Runner) Start(ctx context.Context) error {
	return r.StartFunc(func() (func(), error) {
		cancel, done := startstop.Go(ctx, r.run)
		return func() {
			cancel()
			if !startstop.WaitDone(done, runnerStopTimeout) {
				r.log.Warn("failure: retry runner still blocked on the broker; it ends with the broker connection")
			}
		}, nil
	})
}

// Stop stops the runner; a chunk published and confirmed is marked sent
// first. It releases the lease, so another daemon resumes at once. Safe to
// call twice and before Start.
func (r *Runner) Stop() { r.Base.Stop() }

// Wake makes an idle runner look for open retries now (after
// CreateRetry).
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Active reports whether this runner holds the lease and sends retries.
func (r *Runner) Active() bool { return r.active.Load() }

// TestSignals returns the runner's test signals, for tests only.
func (r *Runner) TestSignals() *RunnerTestSignals { return &r.testSignals }

var (
	// errLeaseLost ends the work of a runner whose lease ended.
	errLeaseLost = errors.New("failure: the retry runner's lease was lost")
	// errUnhosted ends the work of a runner whose oldest retry has only
	// items of pools it does not host left.
	errUnhosted = errors.New("failure: the retry's remaining items are of pools not hosted here")
)

// run looks for open retries every Poll (or when woken) and, while there
// are, campaigns for the lease and sends them under it.
func (r *Runner) run(ctx context.Context) {
	var backoff startstop.Backoff
	for ctx.Err() == nil {
		var open bool
		err := r.cfg.ControlFunc(ctx, func(ctx context.Context, q query.Querier) error {
			var err error
			open, err = anyOpenRetry.One(ctx, q, query.NoParams{})
			return err
		})
		if err == nil && !open {
			backoff.Reset()
			if !startstop.SleepOrWake(ctx, r.cfg.Poll, r.wake) {
				return
			}
			continue
		}
		var ok bool
		if err == nil {
			ok, err = r.lease.TryAcquire(ctx)
		}
		if err == nil && !ok {
			if !startstop.SleepOrWake(ctx, r.cfg.LockRetry, r.wake) {
				return
			}
			continue
		}
		if err == nil {
			r.lease.Keep(ctx, func(lctx context.Context) { err = r.work(lctx) })
			switch {
			case errors.Is(err, errUnhosted):
				backoff.Reset()
				if !startstop.Sleep(ctx, r.cfg.Poll) {
					return
				}
				continue
			case err == nil || errors.Is(err, errLeaseLost) || ctx.Err() != nil:
				backoff.Reset()
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		r.log.WarnContext(ctx, "failure: retry runner fault, starting again", slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return
		}
	}
}

// held reports whether the lease is still held, checked before each
// chunk: a runner whose lease may have expired publishes nothing more.
func (r *Runner) held(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if errors.Is(context.Cause(ctx), lease.ErrLost) {
			return errLeaseLost
		}
		return err
	}
	if !r.lease.Held() {
		return errLeaseLost
	}
	return nil
}

// work sends the open retries, oldest first, while the lease is held; it
// returns nil when none is left.
func (r *Runner) work(ctx context.Context) error {
	r.active.Store(true)
	defer r.active.Store(false)
	pub := broker.NewPublisher(r.cfg.Broker, RunnerChunkMax)
	defer pub.Close()
	for {
		if err := r.held(ctx); err != nil {
			return err
		}
		rec, found, err := nextOpenRetry.Find(ctx, r.cfg.Store.db, query.NoParams{})
		switch {
		case err != nil:
			return fmt.Errorf("failure: next retry: %w", err)
		case !found:
			return nil
		}
		if err := r.runOne(ctx, pub, rec); err != nil {
			return err
		}
	}
}

// runOne sends one retry until it is done, its canary failed or it was
// cancelled, or until a fault or the lease's loss (returned: the retry
// resumes from its unsent items, here or elsewhere).
func (r *Runner) runOne(ctx context.Context, pub *broker.Publisher, rec openRetry) error {
	db := r.cfg.Store.db
	log := r.log.With(slog.String("retry", rec.ID.String()))
	var fj filterJSON
	if err := json.Unmarshal(rec.Filter, &fj); err != nil {
		return fmt.Errorf("failure: retry %s: filter: %w", rec.ID, err)
	}
	chunk := min(max(int(float64(rec.Rate)*r.cfg.ChunkEvery.Seconds()), 1), RunnerChunkMax)
	s := sender{r: r, pub: pub, rec: rec, override: fj.OverrideBeyondHorizon, chunk: chunk, log: log}
	if rec.State == RetryCanary {
		stopped, err := s.send(ctx, true)
		if err != nil || stopped {
			return err
		}
		if err := r.checkUnhosted(ctx, rec, true); err != nil {
			return err
		}
		for {
			if err := r.held(ctx); err != nil {
				return err
			}
			st, err := retryState.One(ctx, db, rec.ID)
			if err != nil {
				return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
			}
			if st != RetryCanary {
				log.InfoContext(ctx, "failure: retry stopped", slog.String("state", st))
				return nil
			}
			out, err := canaryOutcomes.One(ctx, db, rec.ID)
			if err != nil {
				return fmt.Errorf("failure: retry %s: canary: %w", rec.ID, err)
			}
			if out.FailedAgain > 0 {
				msg := fmt.Sprintf("%d of the canary's copies failed again", out.FailedAgain)
				if _, _, err := moveRetry.Find(ctx, db, moveParams{ID: rec.ID, From: RetryCanary, To: RetryCanaryFailed, Error: msg}); err != nil {
					return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
				}
				log.WarnContext(ctx, "failure: retry's canary failed", slog.Int64("failed_again", out.FailedAgain))
				return nil
			}
			if out.Pending == 0 {
				ok, _, err := moveRetry.Find(ctx, db, moveParams{ID: rec.ID, From: RetryCanary, To: RetryRunning})
				if err != nil {
					return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
				}
				if !ok {
					return nil // cancelled meanwhile
				}
				log.InfoContext(ctx, "failure: retry's canary passed")
				break
			}
			r.testSignals.CanaryWaiting.Signal(out.Pending)
			if !startstop.Sleep(ctx, r.cfg.Poll) {
				return ctx.Err()
			}
		}
	}
	stopped, err := s.send(ctx, false)
	if err != nil || stopped {
		return err
	}
	if err := r.checkUnhosted(ctx, rec, false); err != nil {
		return err
	}
	if _, _, err := moveRetry.Find(ctx, db, moveParams{ID: rec.ID, From: RetryRunning, To: RetryDone}); err != nil {
		return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
	}
	log.InfoContext(ctx, "failure: retry done")
	return nil
}

// checkUnhosted returns nil when no item of the phase is left unsent;
// else the items left are of pools not hosted here: errUnhosted, or,
// past UnhostedTimeout without progress, the retry finished with an
// error.
func (r *Runner) checkUnhosted(ctx context.Context, rec openRetry, canaryOnly bool) error {
	db := r.cfg.Store.db
	n, err := unsentCount.One(ctx, db, phaseParams{ID: rec.ID, CanaryOnly: canaryOnly})
	if err != nil {
		return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
	}
	if n == 0 {
		return nil
	}
	pools, err := unsentPools.All(ctx, db, phaseParams{ID: rec.ID, CanaryOnly: canaryOnly})
	if err != nil {
		return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
	}
	// The retry's clock: its last progress, read again (the send may
	// have moved it).
	cur, found, err := nextOpenRetry.Find(ctx, db, query.NoParams{})
	if err != nil {
		return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
	}
	if !found || cur.ID != rec.ID {
		return nil
	}
	msg := fmt.Sprintf("%d copies not sent: pools %s are not hosted by the daemon running the retry", n, strings.Join(pools, ", "))
	if cur.DBNow.Sub(cur.UpdatedAt) < r.cfg.UnhostedTimeout {
		if _, err := setRetryError.Run(ctx, db, retryErrorParams{ID: rec.ID, Error: "waiting: " + msg}); err != nil {
			return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
		}
		return errUnhosted
	}
	r.log.WarnContext(ctx, "failure: retry finished with copies unsent", slog.String("retry", rec.ID.String()), slog.String("error", msg))
	if _, _, err := moveRetry.Find(ctx, db, moveParams{ID: rec.ID, From: cur.State, To: RetryDone, Error: msg}); err != nil {
		return fmt.Errorf("failure: retry %s: %w", rec.ID, err)
	}
	return nil
}

// sender sends one phase of one retry.
type sender struct {
	r        *Runner
	pub      *broker.Publisher
	rec      openRetry
	override bool
	chunk    int
	log      *slog.Logger
	// yieldingTo is the pool the retry gives way to, "" at its rate;
	// backlogSeen is when Backlog last named one.
	yieldingTo  string
	backlogSeen time.Time
}

// pace returns the size of the next chunk and the rate it is sent at:
// the retry's, or YieldShare of it while a pool other than targets has a
// backlog, and YieldHold after (RunnerConfig.Backlog).
func (s *sender) pace(ctx context.Context, targets []string) (chunk int, rate float64) {
	r := s.r
	rate = float64(s.rec.Rate)
	who := ""
	if r.cfg.Backlog != nil {
		who = r.cfg.Backlog(ctx, targets)
	}
	switch {
	case who != "":
		s.backlogSeen = time.Now()
	case s.yieldingTo != "" && time.Since(s.backlogSeen) < r.cfg.YieldHold:
		who = s.yieldingTo
	}
	slow := rate * r.cfg.YieldShare
	if who != s.yieldingTo {
		// The retry's error says why it is slow while it is (cleared
		// when it is not), for an operator who reads the retry.
		note := ""
		if who != "" {
			note = fmt.Sprintf("waiting: giving way to the backlog of %s, at %g copies/s", who, slow)
			s.log.InfoContext(ctx, "failure: retry gives way to a pool's backlog", slog.String("backlog", who), slog.Float64("rate", slow))
		} else {
			s.log.InfoContext(ctx, "failure: retry back to its rate", slog.Float64("rate", rate))
		}
		if _, err := setRetryError.Run(ctx, r.cfg.Store.db, retryErrorParams{ID: s.rec.ID, Error: note}); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "failure: retry's note not written", slog.Any("error", err))
		}
		s.yieldingTo = who
		r.testSignals.Yielding.Signal(who)
	}
	if who == "" {
		return s.chunk, rate
	}
	return min(max(int(slow*r.cfg.ChunkEvery.Seconds()), 1), s.chunk), slow
}

// send publishes the phase's unsent items of hosted pools in seq order,
// chunk by chunk, paced at the retry's rate. stopped is true when the
// retry was cancelled meanwhile.
//
// A chunk is published and confirmed, then marked sent in one
// transaction. A crash (or a lost lease) between the confirms and the
// mark sends the chunk again on resume: harmless, since the consumer's
// dedup makes the second copy a duplicate, and resolving a row is
// conditional on its being unresolved.
func (s *sender) send(ctx context.Context, canaryOnly bool) (stopped bool, err error) {
	r := s.r
	db := r.cfg.Store.db
	// The queues of the pools met, hosted or not (QueueOf is asked once
	// per pool and send).
	type hosting struct {
		queue string
		ok    bool
	}
	queues := map[string]hosting{}
	var after int64
	// The pools the phase sends to, whose own traffic does not make it
	// give way (pace).
	targets, err := unsentPools.All(ctx, db, phaseParams{ID: s.rec.ID, CanaryOnly: canaryOnly})
	if err != nil {
		return false, fmt.Errorf("failure: retry %s: pools: %w", s.rec.ID, err)
	}
	// Pacing is a schedule: each chunk moves the next send time by
	// len(chunk)/rate, so that a slow chunk (a busy database) is made up
	// by the next ones; the schedule never lags the clock by more than
	// one second, so no burst exceeds one second's worth.
	next := time.Now()
	for {
		if err := r.held(ctx); err != nil {
			return false, err
		}
		limit, rate := s.pace(ctx, targets)
		items, err := nextChunk.All(ctx, db, chunkParams{ID: s.rec.ID, AfterSeq: after, CanaryOnly: canaryOnly, Limit: limit})
		if err != nil {
			return false, fmt.Errorf("failure: retry %s: next chunk: %w", s.rec.ID, err)
		}
		if len(items) == 0 {
			return false, nil
		}
		out := make([]broker.Outgoing, 0, len(items))
		m := markParams{ID: s.rec.ID, Seqs: make([]int64, 0, len(items)), At: items[0].At}
		for _, it := range items {
			if !it.Found || it.State == StateResolved || it.State == StateDiscarded {
				// Settled since the retry was created (or purged):
				// marked sent, no copy.
				m.Seqs = append(m.Seqs, it.Seq)
				continue
			}
			h, met := queues[it.Pool]
			if !met {
				h.queue, h.ok = r.cfg.QueueOf(it.Pool)
				queues[it.Pool] = h
			}
			if !h.ok {
				continue // left unsent for a daemon hosting the pool (checkUnhosted)
			}
			msg, err := s.copyOf(&it)
			if err != nil {
				return false, err
			}
			m.Seqs = append(m.Seqs, it.Seq)
			out = append(out, broker.Outgoing{RoutingKey: h.queue, Msg: msg})
			m.IDs = append(m.IDs, it.FailureID)
		}
		if len(out) > 0 {
			pctx, cancel := context.WithTimeout(ctx, publishTimeout)
			errs := s.pub.Publish(pctx, out)
			cancel()
			if err := errors.Join(errs...); err != nil {
				return false, fmt.Errorf("failure: retry %s: publish: %w", s.rec.ID, firstErr(errs))
			}
		}
		after = items[len(items)-1].Seq
		if len(m.Seqs) == 0 {
			continue // only items of pools not hosted here: no progress to mark
		}
		m.Sent = int64(len(out))
		// Marked even when ctx ended (a stop): the broker confirmed the
		// copies. Fenced by the lease: after a take-over the new holder
		// sends the chunk again (see above).
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
		st, err := s.mark(mctx, m) //nolint:contextcheck // detached on purpose
		cancel()
		if err != nil {
			return false, err
		}
		r.testSignals.ChunkSent.Signal(len(out))
		if st != RetryCanary && st != RetryRunning {
			s.log.InfoContext(ctx, "failure: retry stopped", slog.String("state", st))
			return true, nil
		}
		if len(items) < limit {
			continue // the next read finds none
		}
		d := time.Duration(float64(len(items)) * float64(time.Second) / rate)
		if s.yieldingTo != "" && r.cfg.Yielded != nil {
			r.cfg.Yielded(d)
		}
		next = later(next, time.Now().Add(-time.Second)).Add(d)
		if !startstop.Sleep(ctx, time.Until(next)) {
			return false, ctx.Err()
		}
	}
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// mark records a published chunk in one transaction, fenced by the lease:
// its items sent, its rows retrying, the retry's sent count. It returns
// the retry's state.
func (s *sender) mark(ctx context.Context, m markParams) (string, error) {
	st, err := dbutil.WithTxV(ctx, s.r.cfg.Store.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (string, error) {
		ok, err := s.r.lease.Fence(ctx, tx)
		switch {
		case err != nil:
			return "", err
		case !ok:
			return "", errLeaseLost
		}
		if _, err := markItemsSent.Run(ctx, tx, m); err != nil {
			return "", err
		}
		if len(m.IDs) > 0 {
			if _, err := markRetrying.Run(ctx, tx, m); err != nil {
				return "", err
			}
		}
		return addSent.One(ctx, tx, m)
	})
	if err != nil {
		return "", fmt.Errorf("failure: retry %s: mark sent: %w", m.ID, err)
	}
	return st, nil
}

// copyOf returns the copy of it to publish (Copy.Publishing), marked as
// this retry's: x-replay, the event id as message id, and the override
// header when the retry asked for it.
func (s *sender) copyOf(it *item) (amqp.Publishing, error) {
	c := Copy{ID: it.FailureID, EventID: it.EventID, RoutingKey: it.RoutingKey, Headers: it.Headers, Body: it.Body}
	p, err := c.Publishing()
	if err != nil {
		return amqp.Publishing{}, fmt.Errorf("failure: retry %s: %w", s.rec.ID, err)
	}
	p.Headers[broker.HeaderReplay] = HeaderReplayRetryPrefix + s.rec.ID.String()
	if s.override {
		p.Headers[broker.HeaderBeyondHorizonOverride] = true
	}
	if it.EventID != uuid.Nil {
		p.MessageId = it.EventID.String()
	}
	return p, nil
}

// retryHeaders turns a row's stored headers (JSON) back into AMQP
// headers (broker.TableFromJSON: integers stay integers), less the
// dropped ones; never nil.
func retryHeaders(raw []byte) (amqp.Table, error) {
	t, err := broker.TableFromJSON(raw)
	if err != nil {
		return nil, err
	}
	if t == nil {
		t = amqp.Table{}
	}
	for k := range t {
		if slices.Contains(droppedHeaders, k) || hasAnyPrefix(k, droppedHeaderPrefixes) {
			delete(t, k)
		}
	}
	return t, nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
