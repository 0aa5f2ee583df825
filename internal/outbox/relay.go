package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/envelope"
	"github.com/platformd/platformd/internal/lease"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/internal/startstop"
)

// Defaults of Config.
const (
	// BatchSizeDefault is the most rows one pass publishes.
	BatchSizeDefault = 500
	// PollDefault is how often the relay looks for rows without a
	// notification.
	PollDefault = time.Second
	// LockRetryDefault is how often a standby tries to take the relay
	// lease.
	LockRetryDefault = time.Second
	// LeaseTTLDefault is the relay lease's life after each renewal: a
	// standby takes over within it after the active relay died.
	LeaseTTLDefault = lease.TTLDefault
	// HoldMinDefault and HoldMaxDefault bound the backoff of a held row.
	HoldMinDefault = time.Second
	HoldMaxDefault = 5 * time.Minute
	// PublishTimeoutDefault bounds one batch's publish and confirms.
	PublishTimeoutDefault = 30 * time.Second
	// StopTimeoutDefault bounds how long Stop lets the pass in flight
	// finish.
	StopTimeoutDefault = 10 * time.Second
	// WarnEveryDefault is how often, at most, the relay logs a warning for
	// one event name's unroutable or held rows: one line per name per
	// interval, with the rows counted since the previous line, however many
	// rows there are.
	WarnEveryDefault = time.Minute
)

// Channel is the notification channel the outbox trigger signals.
const Channel = "platform_outbox"

// LeaseName is the relay's lease in platform.lease (package lease). It
// names no service: the lease table is per database, as the outbox table
// is, so two service entries on one database (a producer and a consumer
// entry, say) still run one active relay on it.
const LeaseName = "platformd.outbox"

// Config configures a Relay. Zero values take the defaults.
type Config struct {
	// Service is the service's name (metrics, logs, lock).
	Service string
	// DB is the service database.
	DB dbpool.DB
	// Broker is the publishing connection.
	Broker *broker.Conn
	// Exchange is broker.exchange.
	Exchange string
	// BatchSize is the most rows per pass (default BatchSizeDefault).
	BatchSize int
	// Poll is the fallback poll period (default PollDefault).
	Poll time.Duration
	// LockRetry is how often a standby tries to take over (default
	// LockRetryDefault).
	LockRetry time.Duration
	// LeaseTTL is the relay lease's life (default LeaseTTLDefault).
	LeaseTTL time.Duration
	// ControlFunc, when set, runs the relay's small statements (its lease,
	// the look for rows while idle, the gauges) instead of a pooled
	// connection: the daemon runs them on the service's control session,
	// so that an idle relay holds no pooled connection. A pass that has
	// rows to publish always runs on a pooled connection.
	ControlFunc func(ctx context.Context, fn func(context.Context, query.Querier) error) error
	// HoldMin and HoldMax bound the backoff of a returned or invalid row
	// (defaults HoldMinDefault, HoldMaxDefault).
	HoldMin, HoldMax time.Duration
	// MaxBodyBytes is the consumers' body limit (default
	// envelope.DefaultMaxBodyBytes).
	MaxBodyBytes int
	// Unroutable is what the relay does with a row no queue is bound for
	// (the broker returns its message): config.OutboxUnroutableHold sends
	// a copy to the exchange's unroutable queue (package broker,
	// UnroutableQueue) and deletes the row after its confirm;
	// config.OutboxUnroutableDrop deletes the row. Default
	// config.OutboxUnroutableDefault.
	Unroutable string
	// WarnEvery is how often, at most, one event name's unroutable or held
	// rows are logged (default WarnEveryDefault).
	WarnEvery time.Duration
	// Archive, when true, moves each confirmed row into
	// platform.outbox_archive in the transaction that deletes it
	// (services[].outbox.archive > 0).
	Archive bool
	Metrics *metrics.Metrics
	Logger  *slog.Logger

	// Test holds the relay's test-only knobs; its zero value is
	// production's.
	Test RelayTest
}

// RelayTest are a relay's test-only knobs, in one place (River's
// Config.Test): they act inside the relay where a test signal
// (RelayTestSignals) only reports.
type RelayTest struct {
	// AfterConfirmFunc runs after a batch's confirms and before its rows
	// are deleted, with the confirmed ids (to kill the daemon there).
	AfterConfirmFunc func(ids []uuid.UUID)
}

// Relay publishes one service's outbox. It follows startstop's lifecycle;
// its methods are safe for concurrent use.
type Relay struct {
	startstop.Base
	cfg Config
	log *slog.Logger
	pub *broker.Publisher

	pending, oldest, active   prometheus.Gauge
	publishedTotal            prometheus.Counter
	heldReturned, heldInvalid prometheus.Counter
	kept, dropped             prometheus.Counter

	testSignals RelayTestSignals

	warns warnLimiter // run goroutine only
	// unroutableDeclared is true once the unroutable exchange and queue
	// were declared by this relay (run goroutine only).
	unroutableDeclared bool

	lease    *lease.Lease
	wake     chan struct{}
	isActive atomic.Bool
	held     map[uuid.UUID]*heldRow // used by the run goroutine only
	// archivedUntil is the end of the last archive partition ensured
	// (run goroutine only).
	archivedUntil time.Time
	busy          bool // rows waited at the last look; run goroutine only
}

// heldRow is a row held back: when it may be tried again.
type heldRow struct {
	attempts int
	due      time.Time
}

// New validates cfg and returns a stopped Relay.
func New(cfg Config) (*Relay, error) {
	if cfg.Service == "" || cfg.DB == nil || cfg.Broker == nil || cfg.Exchange == "" || cfg.Metrics == nil || cfg.Logger == nil {
		return nil, errors.New("outbox: relay needs a service, a database, a broker, an exchange, metrics and a logger")
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, BatchSizeDefault)
	cfg.Poll = cmp.Or(cfg.Poll, PollDefault)
	cfg.LockRetry = cmp.Or(cfg.LockRetry, LockRetryDefault)
	cfg.HoldMin = cmp.Or(cfg.HoldMin, HoldMinDefault)
	cfg.HoldMax = max(cmp.Or(cfg.HoldMax, HoldMaxDefault), cfg.HoldMin)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, envelope.DefaultMaxBodyBytes)
	cfg.Unroutable = cmp.Or(cfg.Unroutable, config.OutboxUnroutableDefault)
	if cfg.Unroutable != config.OutboxUnroutableHold && cfg.Unroutable != config.OutboxUnroutableDrop {
		return nil, fmt.Errorf("outbox: unroutable must be %s or %s (got %q)", config.OutboxUnroutableHold, config.OutboxUnroutableDrop, cfg.Unroutable)
	}
	cfg.WarnEvery = cmp.Or(cfg.WarnEvery, WarnEveryDefault)
	m := cfg.Metrics.Outbox
	r := &Relay{
		cfg:            cfg,
		log:            cfg.Logger.With(slog.String("service", cfg.Service)),
		pub:            broker.NewPublisher(cfg.Broker, cfg.BatchSize),
		pending:        m.Pending.WithLabelValues(cfg.Service),
		oldest:         m.Oldest.WithLabelValues(cfg.Service),
		active:         m.Active.WithLabelValues(cfg.Service),
		publishedTotal: m.Published.WithLabelValues(cfg.Service),
		heldReturned:   m.Held.WithLabelValues(cfg.Service, metrics.HeldReturned),
		heldInvalid:    m.Held.WithLabelValues(cfg.Service, metrics.HeldInvalid),
		kept:           m.Unroutable.WithLabelValues(cfg.Service, metrics.UnroutableKept),
		dropped:        m.Unroutable.WithLabelValues(cfg.Service, metrics.UnroutableDropped),
		warns:          warnLimiter{every: cfg.WarnEvery},
		held:           map[uuid.UUID]*heldRow{},
		wake:           make(chan struct{}, 1),
	}
	if cfg.ControlFunc == nil {
		db := cfg.DB
		r.cfg.ControlFunc = func(ctx context.Context, fn func(context.Context, query.Querier) error) error { return fn(ctx, db) }
	}
	l, err := lease.New(lease.Config{Name: LeaseName, TTL: cfg.LeaseTTL, RetryEvery: cfg.LockRetry,
		DoFunc: r.cfg.ControlFunc, Logger: r.log})
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	r.lease = l
	return r, nil
}

// Start runs the relay in the background until Stop; ctx bounds nothing
// after it returns. It fails only when called twice or after Stop.
func (r *Relay) Start(ctx context.Context) error {
	return r.StartFunc(func() (func(), error) {
		// Waits end with fetch; database and broker work runs under work,
		// which outlives fetch by Stop's grace.
		workCtx, hard := context.WithCancel(context.WithoutCancel(ctx))
		cancel, done := startstop.Go(ctx, func(fetchCtx context.Context) { r.run(fetchCtx, workCtx) })
		return func() { r.stop(cancel, hard, done) }, nil
	})
}

// Stop stops the relay and waits for it: the pass in flight may finish
// (its confirmed rows deleted) within StopTimeoutDefault, then it is
// abandoned (its rows stay and are published again); a pass blocked in a
// write to a blocked broker is left to end with the broker connection
// after another StopTimeoutDefault. It releases the relay
// lease. Safe to call twice and before Start.
func (r *Relay) Stop() { r.Base.Stop() }

func (r *Relay) stop(cancel, hard context.CancelFunc, done <-chan struct{}) {
	cancel()
	if !startstop.WaitDone(done, StopTimeoutDefault) {
		r.log.Warn("outbox: stop timed out, abandoning the pass in flight")
	}
	hard()
	if startstop.WaitDone(done, StopTimeoutDefault) {
		r.pub.Close()
	} else {
		// A publish blocked in a socket write (the broker blocking a
		// connection in a memory or disk alarm) heeds no context: the
		// pass ends when the daemon closes the broker connection, after
		// the services. Stop must not wait for that.
		r.log.Warn("outbox: relay still blocked on the broker; it ends with the broker connection")
	}
	r.active.Set(0)
}

// Active reports whether this relay holds the service's relay lease.
func (r *Relay) Active() bool { return r.isActive.Load() }

// Wake makes an active relay look for rows now (a notification on
// Channel: the daemon's control session delivers them). It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the rows waiting in the outbox and the age of the oldest,
// read from the database now.
func Stats(ctx context.Context, db query.Querier) (pending int64, oldest time.Duration, err error) {
	r, err := countPending.One(ctx, db, query.NoParams{})
	if err != nil {
		return 0, 0, fmt.Errorf("outbox stats: %w", err)
	}
	return r.Pending, time.Duration(max(r.Secs, 0) * float64(time.Second)), nil
}

// refreshStats reads the gauges and returns the rows pending.
//
// While the outbox was empty at the last look, the count runs on the
// control session (an idle relay holds no pooled connection); while rows
// wait, on the pool, where the passes run anyway: a count over a large
// backlog must not hold up the session's pings and notifications.
func (r *Relay) refreshStats(ctx context.Context) (int64, error) {
	var n int64
	var age time.Duration
	stats := func(ctx context.Context, q query.Querier) error {
		var err error
		n, age, err = Stats(ctx, q)
		return err
	}
	var err error
	if r.busy {
		err = stats(ctx, r.cfg.DB)
	} else {
		err = r.cfg.ControlFunc(ctx, stats)
	}
	if err != nil {
		return 0, err
	}
	r.busy = n > 0
	r.pending.Set(float64(n))
	r.oldest.Set(age.Seconds())
	return n, nil
}

// run campaigns for the relay lease until ctx ends and relays while it
// holds it. Waits end with ctx; database and broker work runs under work,
// and ends at once when the lease is lost.
func (r *Relay) run(ctx, work context.Context) {
	r.lease.Run(ctx, func(lctx context.Context) {
		// The pass in flight may finish after a stop (work outlives ctx
		// by Stop's grace), never after the lease is lost.
		pctx, cancel := context.WithCancel(work)
		defer cancel()
		stop := context.AfterFunc(lctx, func() {
			if errors.Is(context.Cause(lctx), lease.ErrLost) {
				cancel()
			}
		})
		defer stop()
		r.isActive.Store(true)
		r.active.Set(1)
		r.testSignals.Active.Signal(true)
		defer func() {
			r.isActive.Store(false)
			r.active.Set(0)
			r.testSignals.Active.Signal(false)
		}()
		r.log.InfoContext(ctx, "outbox: relay active")
		r.relay(lctx, pctx)
	})
}

// relay runs passes while the lease is held. An idle relay only looks for
// rows, on the control session, when woken, every poll period, or when a
// held row is due; a pass that has rows takes a pooled connection. After a
// fault it backs off.
func (r *Relay) relay(ctx, work context.Context) {
	var backoff startstop.Backoff
	declared := false
	// A new holder ensures the archive's partitions again: a pass that
	// failed for want of one is retried after this; and declares the
	// unroutable queue again, which an operator may have deleted.
	r.archivedUntil = time.Time{}
	r.unroutableDeclared = false
	more := true // look at once
	for {
		if !more {
			if !r.wait(ctx) {
				return
			}
		}
		// The lease is checked before each unit of work: a holder whose
		// lease may have expired publishes nothing more.
		if ctx.Err() != nil || !r.lease.Held() {
			return
		}
		if !declared {
			declared = r.declareExchange(ctx)
		}
		pending, err := r.refreshStats(ctx)
		if err == nil && pending == 0 {
			clear(r.held)
			more = false
			continue
		}
		var n int
		var pubErr error
		if err == nil {
			n, pubErr, err = r.passOnPool(work)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && pubErr == nil:
			backoff.Reset()
			more = n == r.cfg.BatchSize
			continue
		}
		wait := backoff.Next()
		if err != nil {
			r.log.WarnContext(ctx, "outbox: relay pass failed, rows kept for the next pass",
				slog.Any("error", err), slog.Duration("backoff", wait))
		} else {
			r.log.WarnContext(ctx, "outbox: publish failed, rows kept for the next pass",
				slog.Any("error", pubErr), slog.Duration("backoff", wait))
			declared = false // a missing exchange closes the channel
		}
		if !startstop.Sleep(ctx, wait) {
			return
		}
		more = true
	}
}

// passOnPool runs one pass on a pooled connection, its deadline the
// lease's.
func (r *Relay) passOnPool(ctx context.Context) (int, error, error) {
	if dl, ok := r.lease.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	conn, err := r.cfg.DB.Acquire(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("outbox: acquire connection: %w", err)
	}
	defer conn.Release()
	return r.pass(ctx, conn)
}

// declareExchange declares broker.exchange (durable topic, as the pools
// do), so that a service with no pools can publish to a fresh broker. A
// failure is logged; the publish that follows reports the fault.
func (r *Relay) declareExchange(ctx context.Context) bool {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ch, err := r.cfg.Broker.Channel(dctx)
	if err == nil {
		err = ch.ExchangeDeclare(r.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
		_ = ch.Close()
	}
	if err != nil {
		// A broker not reached in time is the next publish's to report
		// (and a stopping relay's to keep quiet about).
		if dctx.Err() == nil {
			r.log.WarnContext(ctx, "outbox: declare exchange", slog.String("exchange", r.cfg.Exchange), slog.Any("error", err))
		}
		return false
	}
	return true
}

// wait blocks until a wake-up, the poll period or the next held row is
// due; false when ctx ended.
func (r *Relay) wait(ctx context.Context) bool {
	d := r.cfg.Poll
	now := time.Now()
	for _, h := range r.held {
		d = min(d, max(h.due.Sub(now), time.Millisecond))
	}
	return startstop.SleepOrWake(ctx, d, r.wake)
}

// pass publishes the first BatchSize visible rows, in event_id order, that
// are not held back, and deletes those the broker confirmed. It returns
// the rows selected, the first broker error of the batch (its rows stay),
// and a database error (the session is then over).
func (r *Relay) pass(ctx context.Context, conn *pgxpool.Conn) (int, error, error) {
	now := time.Now()
	skip := make([][16]byte, 0, len(r.held))
	for id, h := range r.held {
		if now.Before(h.due) {
			skip = append(skip, id)
		}
	}
	rows, err := r.selectRows(ctx, conn, skip)
	if err != nil {
		return 0, nil, err
	}
	if len(rows) < r.cfg.BatchSize {
		// Every due held row was eligible: those not selected are gone.
		seen := make(map[uuid.UUID]bool, len(rows))
		for _, rw := range rows {
			seen[rw.id] = true
		}
		for id, h := range r.held {
			if !now.Before(h.due) && !seen[id] {
				delete(r.held, id)
			}
		}
	}
	if len(rows) == 0 {
		return 0, nil, nil
	}
	out := make([]broker.Outgoing, 0, len(rows))
	outRows := make([]row, 0, len(rows))
	for _, rw := range rows {
		msg, err := rw.message(r.cfg.MaxBodyBytes)
		if err != nil {
			r.hold(ctx, rw, metrics.HeldInvalid, err)
			continue
		}
		out = append(out, broker.Outgoing{Exchange: r.cfg.Exchange, RoutingKey: rw.name, Msg: msg})
		outRows = append(outRows, rw)
	}
	pctx, cancel := context.WithTimeout(ctx, PublishTimeoutDefault)
	errs := r.pub.Publish(pctx, out)
	cancel()
	var pubErr error
	confirmed := make([]uuid.UUID, 0, len(out))
	var returned []returnedRow
	for i, perr := range errs {
		rw := outRows[i]
		switch {
		case perr == nil:
			confirmed = append(confirmed, rw.id)
			r.released(ctx, rw)
		case errors.Is(perr, broker.ErrReturned):
			returned = append(returned, returnedRow{row: rw, msg: out[i].Msg, cause: perr})
		default:
			pubErr = cmp.Or(pubErr, perr)
		}
	}
	if len(returned) > 0 {
		gone, err := r.settleReturned(ctx, returned)
		confirmed = append(confirmed, gone...)
		pubErr = cmp.Or(pubErr, err)
	}
	if len(confirmed) == 0 {
		return len(rows), pubErr, nil
	}
	if f := r.cfg.Test.AfterConfirmFunc; f != nil {
		f(confirmed)
	}
	ids := make([][16]byte, len(confirmed))
	for i, id := range confirmed {
		ids[i] = id
	}
	if r.cfg.Archive {
		if err := r.ensureArchive(ctx); err != nil {
			return len(rows), pubErr, err
		}
	}
	if err := deleteRows(ctx, conn, ids, r.cfg.Archive); err != nil {
		// Confirmed but not deleted: the next active relay publishes them
		// again, which the consumers' dedup makes harmless.
		return len(rows), pubErr, fmt.Errorf("outbox: delete %d published rows: %w", len(ids), err)
	}
	r.publishedTotal.Add(float64(len(confirmed)))
	r.testSignals.Deleted.Signal(len(confirmed))
	return len(rows), pubErr, nil
}

// deleteRows deletes published rows. The transaction only deletes
// published rows: a delete lost in a crash only publishes its rows once
// more, which the contract allows, so it need not wait for its WAL flush
// (a few ms per pass on this disk, the largest part of a pass at low
// load). One round trip: set_config(..., true) holds for the batch's
// implicit transaction only, so no session state is left behind.
//
// With archive, the rows are moved into platform.outbox_archive by the same
// statement: a row is in the outbox or in the archive, never in neither,
// and is archived once since it is deleted once (a lost commit loses the
// archive rows with the delete: the rows are published and archived again).
func deleteRows(ctx context.Context, conn *pgxpool.Conn, ids [][16]byte, archive bool) error {
	del := deletePublished
	if archive {
		del = archivePublished
	}
	p := idsParams{IDs: ids}
	b := &pgx.Batch{}
	b.Queue(synchronousCommitOff.SQL(query.NoParams{}))
	b.Queue(del.SQL(p), idsArgs(p)...)
	// The error is named after the delete, whichever statement met it:
	// pgx prepares (describes) a batch's statements before it runs any, so
	// the first result can carry the second's error.
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", del.Name(), err)
	}
	return nil
}

// ensureArchive creates the archive's partitions ahead when the last ones
// ensured end within half a day.
func (r *Relay) ensureArchive(ctx context.Context) error {
	if time.Until(r.archivedUntil) > ArchiveWidth/2 {
		return nil
	}
	until, err := EnsureArchivePartitions(ctx, r.cfg.DB, ArchiveAheadDefault)
	if err != nil {
		return err
	}
	r.archivedUntil = until
	return nil
}

func (r *Relay) selectRows(ctx context.Context, conn *pgxpool.Conn, skip [][16]byte) ([]row, error) {
	rows := make([]row, 0, r.cfg.BatchSize)
	err := selectBatch.Each(ctx, conn, selectBatchParams{Limit: r.cfg.BatchSize, Skip: skip}, func(s scannedRow) error {
		rw := row{id: s.ID, name: s.Name, payload: s.Payload, headers: s.Headers}
		if s.OccurredAt != nil {
			rw.occurredAt, rw.finite = *s.OccurredAt, true
		}
		rows = append(rows, rw)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: select rows: %w", err)
	}
	return rows, nil
}

// released forgets rw's hold, if it was held: its message is out.
func (r *Relay) released(ctx context.Context, rw row) {
	if _, ok := r.held[rw.id]; ok {
		delete(r.held, rw.id)
		r.log.InfoContext(ctx, "outbox: held row published", slog.String("event_id", rw.id.String()),
			slog.String("event_name", rw.name))
	}
}

// hold keeps rw back for a backoff that doubles with each attempt. A row
// is counted at every hold; its first hold is logged, at most once per
// event name and reason per WarnEvery (a burst of rows of one name makes
// one line, with the count).
func (r *Relay) hold(ctx context.Context, rw row, reason string, cause error) {
	h, ok := r.held[rw.id]
	if !ok {
		h = &heldRow{}
		r.held[rw.id] = h
		if n, log := r.warns.note("held\x00"+reason+"\x00"+rw.name, time.Now()); log {
			r.log.WarnContext(ctx, "outbox: row held back, it stays in the outbox and is retried with backoff",
				slog.String("event_id", rw.id.String()), slog.String("event_name", rw.name),
				slog.String("reason", reason), slog.Int("rows", n), slog.Duration("per", r.cfg.WarnEvery),
				slog.Any("error", cause))
		}
	}
	d := r.cfg.HoldMin << min(h.attempts, 30)
	if d <= 0 || d > r.cfg.HoldMax {
		d = r.cfg.HoldMax
	}
	h.attempts++
	h.due = time.Now().Add(startstop.Jitter(d))
	if reason == metrics.HeldReturned {
		r.heldReturned.Inc()
	} else {
		r.heldInvalid.Inc()
	}
}
