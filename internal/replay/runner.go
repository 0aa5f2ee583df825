package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/startstop"
)

// Header names a replay sets on its copies (DESIGN.md, "Topology").
const (
	HeaderReplay                = broker.HeaderReplay
	HeaderBeyondHorizonOverride = broker.HeaderBeyondHorizonOverride
	HeaderOriginalRoutingKey    = broker.HeaderOriginalRoutingKey
)

// LockName is the advisory lock (per producer database) the active runner
// holds on a dedicated session.
const LockName = "platformd.replay"

// Defaults of RunnerConfig.
const (
	// PollDefault is how often an idle active runner looks for replays.
	PollDefault = time.Second
	// LockRetryDefault is how often a standby runner tries the lock.
	LockRetryDefault = time.Second
	// StopTimeoutDefault bounds how long Stop waits for the chunk in
	// flight.
	StopTimeoutDefault = 10 * time.Second
	// ChunkMax is the most events published between two progress records.
	ChunkMax = 100
	// progressTimeout bounds recording a chunk's progress, which runs even
	// when the runner is being stopped.
	progressTimeout = 10 * time.Second
	publishTimeout  = 30 * time.Second
	backoffMin      = 100 * time.Millisecond
	backoffMax      = 5 * time.Second
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Service is the producer service.
	Service string
	// DB is the producer's database (archive and platform.replay).
	DB *pgxpool.Pool
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
	Logger          *slog.Logger

	// TestAfterChunkFunc, for tests only, runs after a chunk's progress
	// was recorded, with the replay's record.
	TestAfterChunkFunc func(r Record)
	// TestAfterCommitFunc, for tests only, runs after the broker committed
	// a chunk and before its progress is recorded.
	TestAfterCommitFunc func(r Record)
}

// Runner runs the replays of one producer service; one runner per
// producer database is active across daemons. It follows startstop's
// lifecycle and is safe for concurrent use.
type Runner struct {
	startstop.Base
	cfg    RunnerConfig
	log    *slog.Logger
	wake   chan struct{}
	active atomic.Bool
}

// NewRunner returns a stopped Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if cfg.Service == "" || cfg.DB == nil || cfg.Broker == nil || cfg.Exchange == "" || cfg.Archive <= 0 || cfg.TargetsFunc == nil || cfg.Logger == nil {
		return nil, errors.New("replay: runner needs a service, a database, a broker, an exchange, an archive period, targets and a logger")
	}
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	cfg.LockRetry = cmp.Or(cfg.LockRetry, LockRetryDefault)
	return &Runner{cfg: cfg, log: cfg.Logger.With(slog.String("service", cfg.Service)), wake: make(chan struct{}, 1)}, nil
}

// Start runs the runner in the background until Stop.
func (r *Runner) Start(ctx context.Context) error {
	return r.StartFunc(func() (func(), error) {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.run(rctx)
		}()
		return func() {
			cancel()
			select {
			case <-done:
			case <-time.After(StopTimeoutDefault):
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
// Safe to call twice and before Start.
func (r *Runner) Stop() { r.Base.Stop() }

// Wake makes an idle active runner look for replays now.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Active reports whether this runner holds the replay lock.
func (r *Runner) Active() bool { return r.active.Load() }

func (r *Runner) run(ctx context.Context) {
	backoff := backoffMin
	for ctx.Err() == nil {
		err := r.session(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "replay: runner session lost, starting again", slog.Any("error", err), slog.Duration("backoff", backoff))
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(backoff*2, backoffMax)
	}
}

// session holds the replay lock on a dedicated connection and runs the
// running replays, oldest first, over it.
func (r *Runner) session(ctx context.Context) error {
	pc, err := r.cfg.DB.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("replay: acquire connection: %w", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, LockName).Scan(&ok); err != nil {
			return fmt.Errorf("replay: take lock: %w", err)
		}
		if ok {
			break
		}
		if !sleep(ctx, r.cfg.LockRetry) {
			return ctx.Err()
		}
	}
	r.active.Store(true)
	defer r.active.Store(false)
	pub := &txChannel{conn: r.cfg.Broker}
	defer pub.close()
	for {
		var id uuid.UUID
		err := conn.QueryRow(ctx, `SELECT id FROM platform.replay WHERE state = 'running' ORDER BY created_at, id LIMIT 1`).Scan(&id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			t := time.NewTimer(r.cfg.Poll)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-r.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		case err != nil:
			return fmt.Errorf("replay: next replay: %w", err)
		}
		if err := r.runOne(ctx, conn, pub, id); err != nil {
			return err
		}
	}
}

// runOne runs one replay until it is done, cancelled or failed, or until
// a fault (returned: the session starts again and resumes it).
func (r *Runner) runOne(ctx context.Context, conn *pgx.Conn, pub *txChannel, id uuid.UUID) error {
	rec, err := Get(ctx, conn, id)
	if err != nil {
		return err
	}
	log := r.log.With(slog.String("replay", id.String()))
	if err := r.resumeJournal(ctx, conn, pub, &rec); err != nil {
		return err
	}
	targets, err := r.cfg.TargetsFunc(rec)
	if err != nil {
		// The target pool is gone from the config: nothing to run.
		log.WarnContext(ctx, "replay: failed", slog.Any("error", err))
		return fail(ctx, conn, id, err.Error())
	}
	items, _, err := Select(ctx, conn, rec.Selection, r.cfg.Archive)
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
	chunk := min(max(rec.Rate/20, 1), ChunkMax)
	for i := start; i < len(items); {
		part := items[i:min(i+chunk, len(items))]
		t0 := time.Now()
		n, err := r.publishChunk(ctx, conn, pub, &rec, targets, part)
		if err != nil {
			// Nothing of the chunk was committed, or (a commit-ok lost)
			// its mark is in the journal: the next session reads it.
			return err
		}
		if counter != nil {
			counter.Add(float64(n))
		}
		if f := r.cfg.TestAfterCommitFunc; f != nil {
			f(rec)
		}
		// Progress is recorded even when ctx ended: the broker committed
		// the chunk, so a resume must not publish it again.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressTimeout)
		perr := recordProgress(pctx, conn, &rec, i+len(part) == len(items)) //nolint:contextcheck // detached on purpose
		if perr == nil || errors.Is(perr, errNotRunning) {
			perr = cmp.Or(pub.clearJournal(pctx, id), perr) //nolint:contextcheck // detached on purpose
		}
		cancel()
		if f := r.cfg.TestAfterChunkFunc; f != nil && perr == nil {
			f(rec)
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
		if !sleep(ctx, time.Until(t0.Add(time.Duration(len(part))*time.Second/time.Duration(rec.Rate)))) {
			return ctx.Err()
		}
	}
	if len(items) == start {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progressTimeout)
		defer cancel()
		if err := recordProgress(pctx, conn, &rec, true); err != nil && !errors.Is(err, errNotRunning) { //nolint:contextcheck // detached on purpose
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
func (r *Runner) resumeJournal(ctx context.Context, conn *pgx.Conn, pub *txChannel, rec *Record) error {
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
		if err := recordProgress(ctx, conn, rec, false); err != nil && !errors.Is(err, errNotRunning) {
			return err
		}
	}
	return pub.clearJournal(ctx, rec.ID)
}

// archivedSQL reads the chunk's rows (each id's newest publication).
const archivedSQL = `SELECT DISTINCT ON (event_id) event_id, event_name, occurred_at, payload::text, headers::text
FROM platform.outbox_archive WHERE event_id = ANY($1::uuid[]) ORDER BY event_id, published_at DESC`

// publishChunk publishes part's events (those still archived, and for a
// targeted replay not beyond the pool's horizon unless asked) and the
// chunk's mark in one AMQP transaction, and adds them to rec's counts and
// cursor. It returns how many copies it published.
func (r *Runner) publishChunk(ctx context.Context, conn *pgx.Conn, pub *txChannel, rec *Record, targets []Target, part []Item) (int, error) {
	ids := make([][16]byte, len(part))
	for i, it := range part {
		ids[i] = it.ID
	}
	rows, err := conn.Query(ctx, archivedSQL, ids)
	if err != nil {
		return 0, fmt.Errorf("replay: read archived events: %w", err)
	}
	type archived struct {
		name, payload, headers string
		at                     time.Time
	}
	byID := make(map[uuid.UUID]archived, len(part))
	var id [16]byte
	var a archived
	_, err = pgx.ForEachRow(rows, []any{&id, &a.name, &a.at, &a.payload, &a.headers}, func() error {
		byID[id] = a
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
		msg, err := outbox.ArchivedMessage(it.ID, row.name, row.at, row.payload, row.headers, r.cfg.MaxBodyBytes)
		if err != nil {
			r.log.WarnContext(ctx, "replay: archived event not publishable, skipped", slog.String("event_id", it.ID.String()), slog.Any("error", err))
			continue
		}
		h := make(amqp.Table, len(msg.Headers)+3)
		for k, v := range msg.Headers {
			h[k] = v
		}
		h[HeaderReplay] = rec.ID.String()
		o := broker.Outgoing{Exchange: r.cfg.Exchange, RoutingKey: row.name}
		if targeted && len(targets) == 1 {
			if targets[0].beyond(EventTime(it.ID, row.at), now) {
				if !rec.IncludeBeyondHorizon {
					continue
				}
				h[HeaderBeyondHorizonOverride] = true
			}
			// By the default exchange the routing key is the queue's name:
			// the pool reads the event's from this header.
			h[HeaderOriginalRoutingKey] = row.name
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
	err = pub.publish(pctx, rec.ID, out, m)
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

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
