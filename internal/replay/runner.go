package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/startstop"
)

// Header names a replay sets on its copies (docs/contracts.md, "Topology").
const (
	HeaderReplay                = broker.HeaderReplay
	HeaderBeyondHorizonOverride = broker.HeaderBeyondHorizonOverride
	HeaderOriginalRoutingKey    = broker.HeaderOriginalRoutingKey
)

// LeaseName is the runner's lease in platform.lease (package lease): one
// per producer database, so that the producer's replays run one at a
// time, oldest first, at their own rate, whatever the number of daemons.
const LeaseName = "platformd.replay"

// Defaults of RunnerConfig.
const (
	// PollDefault is how often an idle runner looks for running replays.
	PollDefault = time.Second
	// LockRetryDefault is how often a runner tries the lease another
	// holds while a replay is running.
	LockRetryDefault = time.Second
	// LeaseTTLDefault is the runner lease's life after each renewal: a
	// SIGKILLed holder's replay resumes elsewhere within it.
	LeaseTTLDefault = lease.TTLDefault
	// StopTimeoutDefault bounds how long Stop waits for the chunk in
	// flight.
	StopTimeoutDefault = 10 * time.Second
	// ChunkEveryDefault is the time one chunk stands for at the replay's
	// rate: a chunk is rate x ChunkEvery events, published in one AMQP
	// transaction and followed by one progress record. Each chunk costs a
	// fixed share (an archive read, a broker commit, a journal clear, a
	// fenced record) that at 20 chunks a second made a replay at 500/s
	// take 11.8% of a 2-core machine (BenchmarkLivePoolUnderReplay); at 2
	// a second it takes 4.8%.
	ChunkEveryDefault = 500 * time.Millisecond
	// ChunkMax is the most events published between two progress records.
	ChunkMax = 1000
	// progressTimeout bounds recording a chunk's progress, which runs even
	// when the runner is being stopped.
	progressTimeout = 10 * time.Second
	publishTimeout  = 30 * time.Second
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Service is the producer service.
	Service string
	// DB is the producer's database (archive and platform.replay).
	DB dbpool.DB
	// Broker is the publishing connection.
	Broker *broker.Conn
	// Exchange is broker.exchange.
	Exchange string
	// Archive is the producer's archive period: events published before
	// it are not replayed.
	Archive time.Duration
	// TargetsFunc returns a replay's target pools as they are now (the
	// horizon in force, the queue); for a targeted replay the one pool.
	TargetsFunc func(r Record) ([]Target, error)
	// MaxBodyBytes is the consumers' body limit (default the envelope's).
	MaxBodyBytes int
	// Published counts confirmed copies by service and replay; may be nil.
	Published *prometheus.CounterVec
	// Poll and LockRetry: see PollDefault and LockRetryDefault.
	Poll, LockRetry time.Duration
	// LeaseTTL is the runner lease's life (default LeaseTTLDefault).
	LeaseTTL time.Duration
	// ChunkEvery: see ChunkEveryDefault.
	ChunkEvery time.Duration
	// ControlFunc, when set, runs the runner's small statements (its
	// lease, an idle runner's look for running replays), e.g. on the
	// service's control session; by default they run on DB.
	ControlFunc func(ctx context.Context, fn func(context.Context, query.Querier) error) error
	Logger      *slog.Logger
}

// Runner runs the replays of one producer service; one runner per
// producer database is active across daemons, the holder of the lease
// LeaseName, taken only while a replay is running. It follows startstop's
// lifecycle and is safe for concurrent use.
type Runner struct {
	startstop.Base
	cfg    RunnerConfig
	log    *slog.Logger
	lease  *lease.Lease
	wake   chan struct{}
	active atomic.Bool

	testSignals RunnerTestSignals
	test        runnerTest
}

// NewRunner returns a stopped Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Service == "" || cfg.DB == nil || cfg.Broker == nil || cfg.Exchange == "" || cfg.Archive <= 0 || cfg.TargetsFunc == nil || cfg.Logger == nil {
		return nil, errors.New("replay: runner needs a service, a database, a broker, an exchange, an archive period, targets and a logger")
	}
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	cfg.LockRetry = cmp.Or(cfg.LockRetry, LockRetryDefault)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, LeaseTTLDefault)
	cfg.ChunkEvery = cmp.Or(cfg.ChunkEvery, ChunkEveryDefault)
	if cfg.ControlFunc == nil {
		db := cfg.DB
		cfg.ControlFunc = func(ctx context.Context, fn func(context.Context, query.Querier) error) error { return fn(ctx, db) }
	}
	log := cfg.Logger.With(slog.String("service", cfg.Service))
	l, err := lease.New(lease.Config{Name: LeaseName, TTL: cfg.LeaseTTL, RetryEvery: cfg.LockRetry, DoFunc: cfg.ControlFunc, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return &Runner{cfg: cfg, log: log, lease: l, wake: make(chan struct{}, 1)}, nil
}

// Start runs the runner in the background until Stop.
func (r *Runner) Start(ctx context.Context) error {
	return r.StartFunc(func() (func(), error) {
		cancel, done := startstop.Go(ctx, r.run)
		return func() {
			cancel()
			if !startstop.WaitDone(done, StopTimeoutDefault) {
				// A tx.commit blocked by a broker that blocks publishers
				// (a memory or disk alarm) heeds no context: the runner
				// ends with the broker connection, which the daemon
				// closes after its services.
				r.log.Warn("replay: runner still blocked on the broker; it ends with the broker connection")
			}
		}, nil
	})
}

// Stop stops the runner: a chunk being published is abandoned before its
// progress is recorded only if its publish had not been confirmed (it is
// published again on resume); a confirmed chunk's progress is recorded.
// It releases the lease, so that another daemon resumes at once. Safe to
// call twice and before Start.
func (r *Runner) Stop() { r.Base.Stop() }

// Wake makes an idle runner look for running replays now.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Active reports whether this runner holds the replay lease and runs
// replays.
func (r *Runner) Active() bool { return r.active.Load() }

// run looks for running replays every Poll (or when woken) and, while
// there are, campaigns for the lease and runs them under it; an idle
// runner holds no lease.
func (r *Runner) run(ctx context.Context) {
	var backoff startstop.Backoff
	for ctx.Err() == nil {
		running, err := r.anyRunning(ctx)
		if err == nil && !running {
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
			// Another daemon runs the producer's replays.
			if !startstop.SleepOrWake(ctx, r.cfg.LockRetry, r.wake) {
				return
			}
			continue
		}
		if err == nil {
			r.lease.Keep(ctx, func(lctx context.Context) { err = r.work(lctx) })
			// A lost lease is no fault: the replay goes on where its
			// holder's progress and journal say, here or elsewhere.
			if err == nil || errors.Is(err, errLeaseLost) || ctx.Err() != nil {
				backoff.Reset()
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		r.log.WarnContext(ctx, "replay: runner fault, starting again", slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return
		}
	}
}

// anyRunning reports whether the producer has a running replay: an idle
// runner takes no lease and no pooled connection.
func (r *Runner) anyRunning(ctx context.Context) (bool, error) {
	var running bool
	err := r.cfg.ControlFunc(ctx, func(ctx context.Context, q query.Querier) error {
		var err error
		running, err = anyRunning.One(ctx, q, query.NoParams{})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("replay: look for running replays: %w", err)
	}
	return running, nil
}

// errLeaseLost ends the work of a runner whose lease ended: it publishes
// and records nothing more.
var errLeaseLost = errors.New("replay: the runner's lease was lost")

// held reports whether the lease is still held, checked before each unit
// of work: a runner whose lease may have expired publishes nothing more.
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

// work runs the running replays, oldest first, while the lease is held
// (ctx ends when it is lost); it returns nil when none is left, and the
// lease is then released.
func (r *Runner) work(ctx context.Context) error {
	r.active.Store(true)
	r.testSignals.Active.Signal(true)
	defer func() {
		r.active.Store(false)
		r.testSignals.Active.Signal(false)
	}()
	pub := newTxChannel(r.cfg.Broker)
	defer pub.close()
	for {
		if err := r.held(ctx); err != nil {
			return err
		}
		id, found, err := nextRunning.Find(ctx, r.cfg.DB, query.NoParams{})
		switch {
		case err != nil:
			return fmt.Errorf("replay: next replay: %w", err)
		case !found:
			return nil
		}
		if err := r.runOne(ctx, pub, id); err != nil {
			return err
		}
	}
}

// runOne runs one replay until it is done, cancelled or failed, or until
// a fault or the lease's loss (returned: the replay resumes where its
// progress and journal say, here or on another daemon).
func (r *Runner) runOne(ctx context.Context, pub *txChannel, id uuid.UUID) error {
	db := r.cfg.DB
	rec, err := Get(ctx, db, id)
	if err != nil {
		return err
	}
	log := r.log.With(slog.String("replay", id.String()))
	if err := r.resumeJournal(ctx, pub, &rec); err != nil {
		return err
	}
	targets, err := r.cfg.TargetsFunc(rec)
	if err != nil {
		// The target pool is gone from the config: nothing to run.
		log.WarnContext(ctx, "replay: failed", slog.Any("error", err))
		return fail(ctx, db, id, err.Error())
	}
	items, _, err := Select(ctx, db, rec.Selection, r.cfg.Archive)
	if err != nil {
		return err
	}
	start := 0
	if rec.Cursor != nil {
		c := *rec.Cursor
		start = sort.Search(len(items), func(i int) bool { return compareUUID(items[i].ID, c) > 0 })
	}
	log.InfoContext(ctx, "replay: running", slog.Int("remaining", len(items)-start), slog.Int64("published", rec.Published))
	var counter prometheus.Counter
	if r.cfg.Published != nil {
		counter = r.cfg.Published.WithLabelValues(r.cfg.Service, id.String())
	}
	chunk := min(max(int(float64(rec.Rate)*r.cfg.ChunkEvery.Seconds()), 1), ChunkMax)
	for i := start; i < len(items); {
		// The lease is checked before each chunk: a runner whose lease may
		// have expired publishes nothing more.
		if err := r.held(ctx); err != nil {
			return err
		}
		part := items[i:min(i+chunk, len(items))]
		t0 := time.Now()
		n, err := r.publishChunk(ctx, pub, &rec, targets, part)
		if err != nil {
			// Nothing of the chunk was committed, or (a commit-ok lost)
			// its mark is in the journal: the next session reads it.
			return err
		}
		if counter != nil {
			counter.Add(float64(n))
		}
		if f := r.test.afterCommit; f != nil {
			f(rec)
		}
		// Progress is recorded even when ctx ended (a stop): the broker
		// committed the chunk, so a resume must not publish it again. It
		// is recorded only under the lease (fenced): after a take-over the
		// chunk's mark, left in the journal, tells the new holder.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressTimeout)
		perr := r.recordProgress(pctx, &rec, i+len(part) == len(items)) //nolint:contextcheck // detached on purpose
		if perr == nil || errors.Is(perr, errNotRunning) {
			perr = cmp.Or(pub.clearJournal(pctx, id, *rec.Cursor), perr) //nolint:contextcheck // detached on purpose
		}
		cancel()
		if perr == nil {
			if f := r.test.afterChunk; f != nil {
				f(rec)
			}
			r.testSignals.ChunkRecorded.Signal(rec)
		}
		switch {
		case errors.Is(perr, errNotRunning):
			log.InfoContext(ctx, "replay: stopped", slog.String("state", rec.State), slog.Int64("published", rec.Published))
			pub.deleteJournal(ctx, id)
			return nil
		case perr != nil:
			return perr
		}
		i += len(part)
		if i == len(items) {
			break
		}
		// Pace: len(part) events per len(part)/rate seconds.
		if !startstop.Sleep(ctx, time.Until(t0.Add(time.Duration(len(part))*time.Second/time.Duration(rec.Rate)))) {
			return ctx.Err()
		}
	}
	if len(items) == start {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressTimeout)
		defer cancel()
		if err := r.recordProgress(pctx, &rec, true); err != nil && !errors.Is(err, errNotRunning) { //nolint:contextcheck // detached on purpose
			return err
		}
	}
	pub.deleteJournal(ctx, id)
	log.InfoContext(ctx, "replay: finished", slog.String("state", rec.State), slog.Int64("published", rec.Published))
	return nil
}

// resumeJournal reads the replay's journal: a mark past the recorded
// cursor is a chunk the broker committed whose progress the previous
// runner did not record (it died in between); it is recorded now, so that
// the chunk is not published again.
func (r *Runner) resumeJournal(ctx context.Context, pub *txChannel, rec *Record) error {
	if err := pub.declareJournal(ctx, rec.ID); err != nil {
		return err
	}
	m, err := pub.lastMark(ctx, rec.ID)
	if err != nil || m == nil {
		return err
	}
	if rec.Cursor == nil || compareUUID(m.Cursor, *rec.Cursor) > 0 {
		c := m.Cursor
		rec.Cursor = &c
		rec.Published += m.Published
		for i := range rec.Pools {
			rec.Pools[i].Published += m.Pools[rec.Pools[i].Pool]
		}
		r.log.InfoContext(ctx, "replay: a chunk committed by the broker before the runner died, recorded now",
			slog.String("replay", rec.ID.String()), slog.Int64("published", m.Published))
		if err := r.recordProgress(ctx, rec, false); err != nil && !errors.Is(err, errNotRunning) {
			return err
		}
	}
	if rec.Cursor == nil {
		return nil
	}
	return pub.clearJournal(ctx, rec.ID, *rec.Cursor)
}

// recordProgress is the package's recordProgress, fenced by the lease:
// errLeaseLost, and nothing recorded, once another may hold it.
func (r *Runner) recordProgress(ctx context.Context, rec *Record, done bool) error {
	return recordProgress(ctx, r.cfg.DB, rec, done, func(ctx context.Context, tx pgx.Tx) error {
		ok, err := r.lease.Fence(ctx, tx)
		switch {
		case err != nil:
			return err
		case !ok:
			return errLeaseLost
		}
		return nil
	})
}

// publishChunk publishes part's events (those still archived, and for a
// targeted replay not beyond the pool's horizon unless asked) and the
// chunk's mark in one AMQP transaction, and adds them to rec's counts and
// cursor. It returns how many copies it published.
func (r *Runner) publishChunk(ctx context.Context, pub *txChannel, rec *Record, targets []Target, part []Item) (int, error) {
	ids := make([][16]byte, len(part))
	for i, it := range part {
		ids[i] = it.ID
	}
	byID := make(map[uuid.UUID]archivedRow, len(part))
	err := readArchived.Each(ctx, r.cfg.DB, idsParams{IDs: ids}, func(a archivedRow) error {
		byID[a.ID] = a
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("replay: read archived events: %w", err)
	}
	targeted := rec.TargetPool != ""
	now := time.Now()
	out := make([]broker.Outgoing, 0, len(part))
	m := mark{Cursor: part[len(part)-1].ID, Pools: map[string]int64{}}
	for _, it := range part {
		row, ok := byID[it.ID]
		if !ok {
			continue // dropped from the archive since
		}
		msg, err := outbox.ArchivedMessage(it.ID, row.Name, row.At, row.Payload, row.Headers, r.cfg.MaxBodyBytes)
		if err != nil {
			r.log.WarnContext(ctx, "replay: archived event not publishable, skipped", slog.String("event_id", it.ID.String()), slog.Any("error", err))
			continue
		}
		h := make(amqp.Table, len(msg.Headers)+3)
		for k, v := range msg.Headers {
			h[k] = v
		}
		h[HeaderReplay] = rec.ID.String()
		o := broker.Outgoing{Exchange: r.cfg.Exchange, RoutingKey: row.Name}
		if targeted && len(targets) == 1 {
			if targets[0].beyond(envelope.EventTime(it.ID, row.At), now) {
				if !rec.IncludeBeyondHorizon {
					continue
				}
				h[HeaderBeyondHorizonOverride] = true
			}
			// By the default exchange the routing key is the queue's name:
			// the pool reads the event's from this header.
			h[HeaderOriginalRoutingKey] = row.Name
			o = broker.Outgoing{RoutingKey: targets[0].Queue}
		}
		msg.Headers = h
		o.Msg = msg
		out = append(out, o)
		m.Published++
		for _, p := range rec.Pools {
			if targeted || poolReceives(targets, p, it.Name) {
				m.Pools[p.Pool]++
			}
		}
	}
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	// The lease is checked again before tx.commit: the chunk's reads may
	// have taken the time left.
	err = pub.publish(pctx, rec.ID, out, m, func() error { return r.held(ctx) })
	cancel()
	if err != nil {
		return 0, err
	}
	c := m.Cursor
	rec.Cursor = &c
	rec.Published += m.Published
	for i := range rec.Pools {
		rec.Pools[i].Published += m.Pools[rec.Pools[i].Pool]
	}
	return len(out), nil
}

// poolReceives reports whether the target named by pc is bound to name.
func poolReceives(targets []Target, pc PoolCount, name string) bool {
	for _, t := range targets {
		if t.Pool == pc.Pool {
			return t.Receives(name)
		}
	}
	return false
}

func compareUUID(a, b uuid.UUID) int {
	for i := range a {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}
