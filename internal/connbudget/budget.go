package connbudget

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/semaphore"

	"github.com/platformd/platformd/internal/startstop"
)

// Defaults of a Budget.
const (
	// ReclaimEveryDefault is the default Config.ReclaimEvery: how often,
	// at most, idle connections are reclaimed while dials wait.
	ReclaimEveryDefault = 100 * time.Millisecond
	// closeTimeout bounds the close of one reclaimed connection (its
	// Terminate message).
	closeTimeout = time.Second
	// drainTimeout bounds how long a connection's Close waits for the
	// server to close its end (it does within a millisecond of a
	// Terminate).
	drainTimeout = 250 * time.Millisecond
)

// Config configures New.
type Config struct {
	// MaxConns is the most connections held at once under the budget; 0 or
	// less means no budget (New returns nil).
	MaxConns int
	// ReclaimEvery is the shortest time between two reclaim passes
	// (default ReclaimEveryDefault).
	ReclaimEvery time.Duration
	// Logger logs reclaim passes at debug level (default: discarded).
	Logger *slog.Logger
}

// Budget is a daemon's connection budget (see the package doc). Its dial
// wrapper works from New on; the reclaim of idle connections runs between
// Start and Stop. A nil *Budget is no budget: Wrap returns the dial
// function unchanged and the other methods do nothing. It is safe for
// concurrent use.
type Budget struct {
	startstop.Base
	max          int64
	sem          *semaphore.Weighted
	reclaimEvery time.Duration
	log          *slog.Logger

	conns   atomic.Int64  // tokens held
	waits   atomic.Uint64 // dials that had to wait
	waiting atomic.Int64  // dials waiting now
	kick    chan struct{} // a dial started waiting; capacity 1

	mu    sync.Mutex // guards pools and next; never held while a dial waits
	pools []registered
	next  int // the pool the next pass starts with
}

// registered is a pool registered for reclaim, with the connections it
// keeps while idle.
type registered struct {
	pool     *pgxpool.Pool
	minConns int32
}

// New returns the budget of c.MaxConns connections, nil when c.MaxConns is
// 0 or less (no budget).
func New(c Config) *Budget {
	if c.MaxConns <= 0 {
		return nil
	}
	if c.ReclaimEvery <= 0 {
		c.ReclaimEvery = ReclaimEveryDefault
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Budget{
		max: int64(c.MaxConns), sem: semaphore.NewWeighted(int64(c.MaxConns)),
		reclaimEvery: c.ReclaimEvery, log: c.Logger, kick: make(chan struct{}, 1),
	}
}

// MaxConns returns the budget's size, 0 for a nil Budget.
func (b *Budget) MaxConns() int {
	if b == nil {
		return 0
	}
	return int(b.max)
}

// Conns returns the connections held under the budget now.
func (b *Budget) Conns() int {
	if b == nil {
		return 0
	}
	return int(b.conns.Load())
}

// Waits returns how many dials have had to wait for a token so far.
func (b *Budget) Waits() uint64 {
	if b == nil {
		return 0
	}
	return b.waits.Load()
}

// Wrap returns dial under the budget: each dial takes a token first
// (waiting, with the dial's context, in the order the dials came), gives
// it back if dial fails, and otherwise hands it to the connection, which
// gives it back when it is first closed. A nil Budget returns dial itself.
// A nil dial is a plain net.Dialer's.
func (b *Budget) Wrap(dial pgconn.DialFunc) pgconn.DialFunc {
	if b == nil {
		return dial
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := b.acquire(ctx); err != nil {
			return nil, fmt.Errorf("connbudget: waiting for one of the daemon's %d database connections (database_budget.max_conns): %w", b.max, err)
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			b.release()
			return nil, err
		}
		return &conn{Conn: c, b: b}, nil
	}
}

// acquire takes a token, waiting for one with ctx when none is free (or
// other dials wait already: first come, first served).
func (b *Budget) acquire(ctx context.Context) error {
	if b.sem.TryAcquire(1) {
		b.conns.Add(1)
		return nil
	}
	b.waits.Add(1)
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	select { // ask for a reclaim pass, unless one is asked for already
	case b.kick <- struct{}{}:
	default:
	}
	if err := b.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	b.conns.Add(1)
	return nil
}

// release gives a token back.
func (b *Budget) release() {
	b.conns.Add(-1)
	b.sem.Release(1)
}

// conn is a connection holding a token, given back on its first Close.
type conn struct {
	net.Conn
	b    *Budget
	once sync.Once
}

// Close closes the connection and gives its token back (once, whoever
// calls it and however often). It first waits, at most drainTimeout, for
// the server to close its end: PostgreSQL frees a backend's slot before its
// socket closes (pgx sends Terminate before Close), so a token given back
// after that is a slot the server has freed too, and the dial it lets
// through cannot find the server still full of the connection just closed.
func (c *conn) Close() error {
	if c.Conn.SetReadDeadline(time.Now().Add(drainTimeout)) == nil {
		_, _ = io.Copy(io.Discard, c.Conn) // until EOF, an error or the deadline
	}
	err := c.Conn.Close()
	c.once.Do(c.b.release)
	return err
}

// Register makes p's idle connections reclaimable when a dial waits; the
// returned function undoes it (call it before closing p). A nil Budget
// returns a function that does nothing.
func (b *Budget) Register(p *pgxpool.Pool) (unregister func()) {
	if b == nil {
		return func() {}
	}
	r := registered{pool: p, minConns: p.Config().MinConns}
	b.mu.Lock()
	b.pools = append(b.pools, r)
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			for i, q := range b.pools {
				if q.pool == p {
					b.pools = append(b.pools[:i], b.pools[i+1:]...)
					return
				}
			}
		})
	}
}

// Start starts reclaiming idle connections for waiting dials in the
// background, until Stop. A nil Budget does nothing.
func (b *Budget) Start(ctx context.Context) error {
	if b == nil {
		return nil
	}
	return b.StartFunc(func() (func(), error) {
		cancel, done := startstop.Go(ctx, b.reclaimLoop)
		return func() {
			cancel()
			<-done
		}, nil
	})
}

// Stop stops the reclaim and waits for it; dials keep working. It is safe
// to call twice, before Start, and on a nil Budget.
func (b *Budget) Stop() {
	if b == nil {
		return
	}
	b.Base.Stop()
}

// reclaimLoop runs a reclaim pass when a dial starts waiting, then one per
// reclaimEvery while dials still wait, until ctx ends.
func (b *Budget) reclaimLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		}
		for b.waiting.Load() > 0 {
			b.reclaim(ctx)
			if !startstop.Sleep(ctx, b.reclaimEvery) {
				return
			}
		}
	}
}

// reclaim closes idle connections of the registered pools, at most as many
// as dials wait and never below a pool's MinConns, starting with the pool
// after the one the previous pass started with. It holds no lock while it
// closes.
func (b *Budget) reclaim(ctx context.Context) {
	need := b.waiting.Load()
	b.mu.Lock()
	pools := make([]registered, 0, len(b.pools))
	if n := len(b.pools); n > 0 {
		start := b.next % n
		pools = append(append(pools, b.pools[start:]...), b.pools[:start]...)
		b.next = start + 1
	}
	b.mu.Unlock()
	closed := 0
	for _, r := range pools {
		if need <= 0 || ctx.Err() != nil {
			break
		}
		if st := r.pool.Stat(); st.IdleConns() == 0 || st.TotalConns() <= r.minConns {
			continue // nothing to give: leave its idle connections untouched
		}
		// The idle connections kept are released as used (pgxpool has no
		// way to give them back untouched): their max_idle starts again.
		idle := r.pool.AcquireAllIdle(ctx)
		if len(idle) == 0 {
			continue
		}
		spare := r.pool.Stat().TotalConns() - r.minConns
		for _, c := range idle {
			if need > 0 && spare > 0 {
				cctx, cancel := context.WithTimeout(ctx, closeTimeout)
				_ = c.Conn().Close(cctx) // gives the token back; Release then destroys the closed handle
				cancel()
				need--
				spare--
				closed++
			}
			c.Release()
		}
	}
	if closed > 0 {
		b.log.DebugContext(ctx, "connbudget: idle connections reclaimed for waiting dials",
			slog.Int("closed", closed), slog.Int64("waiting", b.waiting.Load()))
	}
}
