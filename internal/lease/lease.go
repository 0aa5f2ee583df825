// Package lease elects the one holder of a named piece of work (a
// service's outbox relay, its purge, a replay) across daemons through a
// row of platform.lease in the service database: holder and expires_at,
// by the database's clock. Unlike a session advisory lock it holds no
// database session between statements, so it works through a
// transaction-mode pooler and costs no connection while idle.
//
// The rule that keeps two holders from working at once: a holder renews
// well before expiry (every TTL/3), and counts its own deadline from the
// moment it sent its last successful renewal, less a margin (TTL/5); at
// that deadline its work's context is cancelled and Held turns false,
// before the row can expire in the database and let another take it.
// Work checks Held (or its context) before each unit it does.
//
// Modelled on River's leader election (a row with an expiry,
// river_leader), with the database's now() as the only clock that
// decides expiry.
package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/query"
)

// Defaults of Config.
const (
	// TTLDefault is how long a lease lasts after its last renewal.
	TTLDefault = 15 * time.Second
	// RetryEveryDefault is how often Run tries to take a lease another
	// holds.
	RetryEveryDefault = time.Second
	// releaseTimeout bounds the release, run even when the work's context
	// ended.
	releaseTimeout = 5 * time.Second
)

// ErrLost is the cause of a work context cancelled because the lease was
// lost (not renewed in time, or taken over).
var ErrLost = errors.New("lease lost")

// Config configures a Lease. Zero values take the defaults.
type Config struct {
	// Name names the work (unique per database), e.g. "outbox".
	Name string
	// Holder names this holder (default "<host>:<pid>:<random>"): unique
	// per Lease, so that two electors in one process are two holders.
	Holder string
	// TTL is the lease's life after each renewal (default TTLDefault, at
	// least 100ms); it is renewed every TTL/3.
	TTL time.Duration
	// RetryEvery is how often Run tries to take the lease while another
	// holds it (default RetryEveryDefault).
	RetryEvery time.Duration
	// DB runs the statements when DoFunc is nil.
	DB query.Querier
	// DoFunc, when set, runs the statements instead (e.g. on a service's
	// control session).
	DoFunc func(ctx context.Context, fn func(context.Context, query.Querier) error) error
	// Logger receives take-overs and losses (default: discarded).
	Logger *slog.Logger
}

// Lease is one holder's view of a named lease. Its methods are safe for
// concurrent use.
type Lease struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	held  bool
	until time.Time // local deadline (monotonic), valid while held

	testSignals TestSignals
}

// New returns a Lease not held.
func New(cfg Config) (*Lease, error) {
	if cfg.Name == "" || (cfg.DB == nil && cfg.DoFunc == nil) {
		return nil, errors.New("lease: a name and a database are required")
	}
	cfg.TTL = max(cmp.Or(cfg.TTL, TTLDefault), 100*time.Millisecond)
	cfg.RetryEvery = cmp.Or(cfg.RetryEvery, RetryEveryDefault)
	if cfg.Holder == "" {
		cfg.Holder = DefaultHolder()
	}
	if cfg.DoFunc == nil {
		db := cfg.DB
		cfg.DoFunc = func(ctx context.Context, fn func(context.Context, query.Querier) error) error { return fn(ctx, db) }
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Lease{cfg: cfg, log: log.With(slog.String("lease", cfg.Name), slog.String("holder", cfg.Holder))}, nil
}

// DefaultHolder returns "<host>:<pid>:<random>".
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + ":" + strconv.Itoa(os.Getpid()) + ":" + hex.EncodeToString(b)
}

// Holder returns this holder's name.
func (l *Lease) Holder() string { return l.cfg.Holder }

// Held reports whether this holder holds the lease and its local deadline
// has not passed: check it before each unit of work.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held && time.Now().Before(l.until)
}

// Deadline returns the local deadline of a held lease: its work must be
// done by then unless a renewal extends it.
func (l *Lease) Deadline() (time.Time, bool) {
	d := l.deadline()
	return d, !d.IsZero()
}

// margin is what the local deadline keeps short of the lease's expiry, for
// the clocks' drift and the renewal's own latency.
func (l *Lease) margin() time.Duration { return l.cfg.TTL / 5 }

// TryAcquire takes the lease if it is free, expired or already this
// holder's, and reports whether this holder now holds it.
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	sent := time.Now()
	ok, err := do(ctx, l, "acquire", func(ctx context.Context, q query.Querier, p leaseParams) (bool, error) {
		_, ok, err := acquireLease.Find(ctx, q, p)
		return ok, err
	})
	if err != nil {
		return false, err
	}
	if !ok {
		l.setHeld(false, time.Time{})
		return false, nil
	}
	l.setHeld(true, sent.Add(l.cfg.TTL-l.margin()))
	return true, nil
}

// Renew extends a held lease; false (and no error) when it is no longer
// this holder's. An error leaves the local deadline as it was.
func (l *Lease) Renew(ctx context.Context) (bool, error) {
	sent := time.Now()
	tag, err := do(ctx, l, "renew", renewLease.Run)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		l.setHeld(false, time.Time{})
		return false, nil
	}
	l.setHeld(true, sent.Add(l.cfg.TTL-l.margin()))
	return true, nil
}

// Fence, run inside a transaction tx, reports whether this holder holds
// the lease by the database's clock, and keeps that true until tx ends:
// the lease's row stays locked, so no other holder can take the lease
// over before tx commits or rolls back. Work that must not land after a
// take-over (a record of progress written after the work's context ended)
// runs its statements in tx after a true Fence. It holds nothing between
// transactions (it works through a transaction-mode pooler).
func (l *Lease) Fence(ctx context.Context, tx query.Querier) (bool, error) {
	_, ok, err := fenceLease.Find(ctx, tx, l.params())
	if err != nil {
		return false, fmt.Errorf("lease %s: fence: %w", l.cfg.Name, err)
	}
	return ok, nil
}

// Holding is who holds a lease, by the database's clock.
type Holding struct {
	// Holder is the holder's name (Config.Holder).
	Holder string
	// ExpiresIn is how long the lease lasts unless its holder renews it:
	// a live holder renews every TTL/3, a dead one (SIGKILL, a lost
	// host) keeps it until then.
	ExpiresIn time.Duration
}

// Current reports who holds the lease now; ok is false when nobody does
// (free, released or expired). It is for telling an operator who has the
// work and for how long, not for deciding who may do it: the answer can
// be stale as soon as it is read (TryAcquire decides).
func (l *Lease) Current(ctx context.Context) (Holding, bool, error) {
	// No row (nobody holds it) leaves row zero: a holder is never empty.
	row, err := do(ctx, l, "current", func(ctx context.Context, q query.Querier, p leaseParams) (holdingRow, error) {
		r, _, err := currentLease.Find(ctx, q, p)
		return r, err
	})
	if err != nil || row.holder == "" {
		return Holding{}, false, err
	}
	return Holding{Holder: row.holder, ExpiresIn: time.Duration(row.leftMsec) * time.Millisecond}, true, nil
}

// Release gives the lease up (only if this holder has it), so that
// another may take it at once. It runs even when ctx is done.
func (l *Lease) Release(ctx context.Context) error {
	l.setHeld(false, time.Time{})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	_, err := do(ctx, l, "release", releaseLease.Run)
	return err
}

// do runs one of the lease's statements through DoFunc with the lease's
// params, its error named after the lease and what it did.
func do[R any](ctx context.Context, l *Lease, what string, stmt func(context.Context, query.Querier, leaseParams) (R, error)) (R, error) {
	var r R
	err := l.cfg.DoFunc(ctx, func(ctx context.Context, q query.Querier) error {
		var err error
		r, err = stmt(ctx, q, l.params())
		return err
	})
	if err != nil {
		return r, fmt.Errorf("lease %s: %s: %w", l.cfg.Name, what, err)
	}
	return r, nil
}

// params are the lease's statements' params.
func (l *Lease) params() leaseParams {
	return leaseParams{Name: l.cfg.Name, Holder: l.cfg.Holder, TTLMillis: l.cfg.TTL.Milliseconds()}
}

func (l *Lease) setHeld(held bool, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held, l.until = held, until
}

// deadline returns the local deadline (zero when not held).
func (l *Lease) deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return time.Time{}
	}
	return l.until
}

// Keep runs work while the lease, just taken (TryAcquire), stays held: it
// renews it every TTL/3 and cancels work's context (cause ErrLost) at the
// local deadline when no renewal came in time, or at once when the lease
// was taken over. It returns once work has returned; it releases the
// lease then, unless it was lost.
func (l *Lease) Keep(ctx context.Context, work func(ctx context.Context)) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watchdog cancels the work at the local deadline whatever the
	// renewing loop is doing (a renewal stuck behind a slow database).
	l.mu.Lock()
	watchdog := time.AfterFunc(time.Until(l.until), func() { cancel(ErrLost) })
	l.mu.Unlock()
	defer watchdog.Stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		work(wctx)
	}()
	renew := time.NewTicker(l.cfg.TTL / 3)
	defer renew.Stop()
	for {
		select {
		case <-done:
			l.end(ctx, wctx)
			return
		case <-wctx.Done():
			<-done
			l.end(ctx, wctx)
			return
		case <-renew.C:
		}
		rctx, rcancel := context.WithDeadline(wctx, l.deadline())
		ok, err := l.Renew(rctx)
		rcancel()
		switch {
		case err != nil:
			if wctx.Err() == nil {
				l.log.WarnContext(ctx, "lease: renewal failed; the work stops at the lease's deadline unless a renewal succeeds",
					slog.Any("error", err))
			}
		case !ok:
			cancel(ErrLost)
		default:
			l.mu.Lock()
			if !watchdog.Reset(time.Until(l.until)) && wctx.Err() != nil {
				// Fired before this renewal landed: the work is stopping.
				l.held = false
			}
			l.mu.Unlock()
		}
	}
}

// end releases the lease after the work returned, unless it was lost.
func (l *Lease) end(ctx context.Context, wctx context.Context) {
	if errors.Is(context.Cause(wctx), ErrLost) {
		l.setHeld(false, time.Time{})
		l.log.WarnContext(ctx, "lease: lost; work stopped")
		return
	}
	if err := l.Release(ctx); err != nil {
		l.log.WarnContext(ctx, "lease: release failed; it expires on its own", slog.Any("error", err))
	}
}

// Run campaigns for the lease until ctx ends: it tries to take it every
// RetryEvery and, while it holds it, runs work under Keep. When work
// returns on its own, the lease is released and the campaign goes on.
func (l *Lease) Run(ctx context.Context, work func(ctx context.Context)) {
	for ctx.Err() == nil {
		ok, err := l.TryAcquire(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			l.log.WarnContext(ctx, "lease: acquire failed", slog.Any("error", err))
		case ok:
			l.log.InfoContext(ctx, "lease: taken")
			l.Keep(ctx, work)
			if ctx.Err() != nil {
				return
			}
		case err == nil:
			l.testSignals.TurnedAway.Signal(struct{}{})
		}
		t := time.NewTimer(l.cfg.RetryEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
