// Package session gives a service database one control session: a single
// connection of its own that LISTENs on every channel the service watches
// (horizon, pause, outbox wake-ups) and runs the service's small periodic
// statements (health pings, lease renewals, an idle relay's look for rows)
// between notifications. Everything else runs on the service's pool, which
// shrinks to nothing when idle: an idle service costs this one connection.
//
// Without LISTEN (a transaction-mode pooler in front of the database),
// there is no session: Do runs on the pool and every subscriber is called
// every poll period instead of on notifications.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/query"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbpool"
	"github.com/platformd/platformd/internal/startstop"
)

// Defaults of Config.
const (
	// PollDefault is how often subscribers are called without a
	// notification: always without LISTEN, and as a safety net with it.
	PollDefault = 30 * time.Second
	// PollNoListenDefault is PollDefault without LISTEN: subscribers then
	// learn of pauses and horizons by polling only.
	PollNoListenDefault = 2 * time.Second
	// StatementTimeout bounds what one Do call or subscriber runs on the
	// session: its caller's cancellation does not interrupt it.
	StatementTimeout = 5 * time.Second
)

// ApplicationName is the control session's application_name in
// pg_stat_activity (the pool's connections keep the DSN's, by default
// "platformd").
const ApplicationName = "platformd-control"

// Config configures a Session.
type Config struct {
	// DB is the service's pool: the session's connection is taken from it
	// (and then leaves it), and Do falls back to it while there is no
	// session.
	DB dbpool.DB
	// NoListen runs without a session: no LISTEN, Do on the pool,
	// subscribers polled (a transaction-mode pooler).
	NoListen bool
	// Poll is how often every subscriber is called without a
	// notification (default PollDefault, PollNoListenDefault with
	// NoListen).
	Poll time.Duration
	// Logger receives the session's warnings.
	Logger *slog.Logger
}

// Func is a subscriber: called with a notification's payload, or "" after
// a (re)connection and every poll period (re-read what may have changed).
// It runs on the session's goroutine with q, the session's connection (or
// the pool): it must not call Do, and must not block long.
type Func func(ctx context.Context, q query.Querier, payload string)

// Session is a service database's control session. It follows startstop's
// lifecycle; Do, Listening and Err are safe for concurrent use.
type Session struct {
	startstop.Base
	cfg  Config
	log  *slog.Logger
	subs map[string][]Func
	chs  []string
	// first is closed the first time the session holds its connection
	// (at once without LISTEN).
	first     chan struct{}
	firstOnce sync.Once

	mu      sync.Mutex
	live    bool               // a connection is held and LISTENs
	queue   []*request         // Do calls waiting for the session
	wake    context.CancelFunc // ends the current wait for notifications
	lastErr error

	testSignals TestSignals
}

type request struct {
	ctx  context.Context
	fn   func(context.Context, query.Querier) error
	done chan error
}

// New returns a stopped Session.
func New(cfg Config) *Session {
	def := PollDefault
	if cfg.NoListen {
		def = PollNoListenDefault
	}
	cfg.Poll = cmp.Or(cfg.Poll, def)
	return &Session{cfg: cfg, log: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), subs: map[string][]Func{},
		first: make(chan struct{})}
}

// Subscribe calls fn for channel's notifications; call it before Start.
func (s *Session) Subscribe(channel string, fn Func) {
	if _, ok := s.subs[channel]; !ok {
		s.chs = append(s.chs, channel)
	}
	s.subs[channel] = append(s.subs[channel], fn)
}

// Start runs the session in the background until Stop.
func (s *Session) Start(ctx context.Context) error {
	return s.StartFunc(func() (func(), error) {
		cancel, done := startstop.Go(ctx, func(ctx context.Context) {
			if s.cfg.NoListen {
				s.firstOnce.Do(func() { close(s.first) })
				s.poll(ctx)
				return
			}
			s.run(ctx)
		})
		return func() { cancel(); <-done }, nil
	})
}

// Held is closed the first time the session holds its connection (at
// Start without LISTEN): a caller about to start work that uses Do may
// wait for it, so that its first statements do not open pooled
// connections.
func (s *Session) Held() <-chan struct{} { return s.first }

// Listening reports whether the session holds its connection now.
func (s *Session) Listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// Err is why the session's connection was lost or could not be taken;
// nil while it is held (and always without LISTEN).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// Do runs fn on the session's connection, between two waits for
// notifications, or on the pool while there is no session. It returns fn's
// error. fn gets ctx; its statements must be short (notifications wait
// meanwhile).
func (s *Session) Do(ctx context.Context, fn func(context.Context, query.Querier) error) error {
	if q, ok := ctx.Value(onSessionKey{}).(query.Querier); ok {
		return fn(ctx, q) // called by a subscriber or a Do function: already on it
	}
	s.mu.Lock()
	if !s.live {
		s.mu.Unlock()
		return fn(ctx, s.cfg.DB)
	}
	r := &request{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.queue = append(s.queue, r)
	if s.wake != nil {
		s.wake()
	}
	s.mu.Unlock()
	return <-r.done // always answered: on the session, or on the pool once it is lost
}

// onSessionKey marks the context of what runs on the session's goroutine
// (subscribers, Do functions), with the query.Querier they run on: a Do from
// there runs at once instead of waiting for the session.
type onSessionKey struct{}

// run holds the session until ctx ends, taking it again with backoff
// after a loss.
func (s *Session) run(ctx context.Context) {
	var backoff startstop.Backoff
	for ctx.Err() == nil {
		held, err := s.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if held {
			backoff.Reset()
		}
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		wait := backoff.Next()
		s.log.WarnContext(ctx, "session: control session lost, taking it again",
			slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return
		}
	}
}

// once takes a connection, LISTENs, and serves notifications and Do calls
// on it until it fails or ctx ends; held says whether it got that far.
func (s *Session) once(ctx context.Context) (held bool, err error) {
	pc, err := s.cfg.DB.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("session: take a connection: %w", err)
	}
	// A LISTENing session must not go back to the pool.
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	// Named apart in pg_stat_activity: the service's one standing
	// connection.
	if _, err := setApplicationName.Run(ctx, conn, ApplicationName); err != nil {
		return false, fmt.Errorf("session: set application_name: %w", err)
	}
	for _, ch := range s.chs {
		if _, err := listen.Run(ctx, conn, ch); err != nil {
			return false, fmt.Errorf("session: listen %s: %w", ch, err)
		}
	}
	s.mu.Lock()
	s.live, s.lastErr = true, nil
	s.mu.Unlock()
	s.firstOnce.Do(func() { close(s.first) })
	s.testSignals.Listening.Signal(struct{}{})
	defer s.lose()
	s.notifyAll(ctx, conn)
	lastPoll := time.Now()
	for {
		q, wctx, cancel := s.next(ctx, time.Until(lastPoll.Add(s.cfg.Poll)))
		if len(q) > 0 {
			if err := s.serve(conn, q); err != nil { //nolint:contextcheck // each Do call runs under its caller's context
				return true, err
			}
			continue
		}
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			for _, fn := range s.subs[n.Channel] {
				_ = s.onSession(ctx, conn, func(ctx context.Context) error { fn(ctx, conn, n.Payload); return nil })
			}
		case ctx.Err() != nil:
			return true, ctx.Err()
		case wctx.Err() != nil && !conn.IsClosed():
			if time.Since(lastPoll) >= s.cfg.Poll {
				s.notifyAll(ctx, conn)
				lastPoll = time.Now()
			}
		default:
			return true, fmt.Errorf("session: wait for notifications: %w", err)
		}
	}
}

// next takes the Do calls waiting; when there are none it returns the
// context of the next wait for notifications instead, which a Do call
// arriving meanwhile cancels (wake), as does the end of the poll period d.
func (s *Session) next(ctx context.Context, d time.Duration) ([]*request, context.Context, context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queue; len(q) > 0 {
		s.queue = nil
		return q, nil, func() {}
	}
	wctx, cancel := context.WithTimeout(ctx, max(d, time.Millisecond))
	s.wake = cancel
	return nil, wctx, cancel
}

// serve runs Do calls on the session's connection; an error when the
// connection closed (the calls not run are answered on the pool).
func (s *Session) serve(conn *pgx.Conn, q []*request) error {
	for i, r := range q {
		if conn.IsClosed() {
			s.requeue(q[i:])
			return errors.New("session: connection closed")
		}
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		r.done <- s.onSession(r.ctx, conn, func(ctx context.Context) error { return r.fn(ctx, conn) })
	}
	return nil
}

// onSession runs fn on the session's connection under a context that
// carries the session (a Do from fn runs at once) and that its caller's
// cancellation does not reach: a statement cancelled half-way would cost
// the connection (pgx closes it), so it is bounded by StatementTimeout
// instead. The statements run there are small.
func (s *Session) onSession(ctx context.Context, conn *pgx.Conn, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), StatementTimeout)
	defer cancel()
	return fn(context.WithValue(ctx, onSessionKey{}, query.Querier(conn)))
}

// requeue puts back Do calls not yet run, for lose to answer.
func (s *Session) requeue(q []*request) {
	s.mu.Lock()
	s.queue = append(q, s.queue...)
	s.mu.Unlock()
}

// lose marks the session lost and runs the waiting Do calls on the pool.
func (s *Session) lose() {
	s.mu.Lock()
	s.live, s.wake = false, nil
	q := s.queue
	s.queue = nil
	s.mu.Unlock()
	s.testSignals.Lost.Signal(struct{}{})
	for _, r := range q {
		r.done <- r.fn(r.ctx, s.cfg.DB)
	}
}

// notifyAll calls every subscriber with an empty payload, on the
// session's connection (conn) or, without LISTEN, on the pool.
func (s *Session) notifyAll(ctx context.Context, conn *pgx.Conn) {
	for _, ch := range s.chs {
		for _, fn := range s.subs[ch] {
			if conn == nil {
				fn(context.WithValue(ctx, onSessionKey{}, query.Querier(s.cfg.DB)), s.cfg.DB, "")
				continue
			}
			_ = s.onSession(ctx, conn, func(ctx context.Context) error { fn(ctx, conn, ""); return nil })
		}
	}
}

// poll calls every subscriber every Poll on the pool (no LISTEN).
func (s *Session) poll(ctx context.Context) {
	s.notifyAll(ctx, nil)
	startstop.Tick(ctx, s.cfg.Poll, func(ctx context.Context) { s.notifyAll(ctx, nil) })
}
