// Package dbpool is a service's database pool that a running daemon can
// replace: a reload that changes a service's database_pool (max_conns,
// min_conns, max_idle) resizes it without restarting anything that uses it.
//
// pgxpool cannot change its size once built, and every part of a service
// (its worker pools' transactions, its relay, purges, control session,
// admin calls) holds the pool for its whole life. So the parts hold a
// Handle instead, through the DB interface that *pgxpool.Pool satisfies
// too (tests and one-off callers keep passing a pool). Replace swaps in a
// pool built at the new size: every call from then on acquires from the
// new pool, and the old one is closed once the last call that acquired
// from it has its connection back (a transaction commits or rolls back on
// the connection it began on, never across the switch). While the old
// pool drains, the service may hold connections of both (its old size plus
// its new one at most); the daemon's database_budget, which every dial
// goes through, still caps the daemon as a whole.
package dbpool

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what the parts of a service need of its database pool: a
// *pgxpool.Pool or a *Handle.
type DB interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Ping(ctx context.Context) error
}

// Compile-time checks: both are DBs.
var (
	_ DB = (*pgxpool.Pool)(nil)
	_ DB = (*Handle)(nil)
)

// Handle is a replaceable database pool (see the package doc). Its
// methods are pgxpool.Pool's, run on the pool in force when called; they
// and Replace, Pool and Close are safe for concurrent use. The zero value
// is not usable: call New.
type Handle struct {
	cur atomic.Pointer[generation]
	// mu serialises Replace and Close.
	mu     sync.Mutex
	closed bool
	// draining counts the replaced pools not closed yet; Close waits for
	// them.
	draining sync.WaitGroup
}

// generation is one pool of a Handle and the calls using it.
type generation struct {
	pool *pgxpool.Pool
	// refs is 1 while the pool is in force, plus one per call acquiring
	// from it; the pool closes when it drops to 0 (replaced and no call
	// left). A call never takes a reference from 0.
	refs atomic.Int64
	h    *Handle
}

// New returns a Handle over p, which it owns from then on (Close closes
// it).
func New(p *pgxpool.Pool) *Handle {
	h := &Handle{}
	h.cur.Store(h.newGeneration(p))
	return h
}

func (h *Handle) newGeneration(p *pgxpool.Pool) *generation {
	g := &generation{pool: p, h: h}
	g.refs.Store(1)
	return g
}

// Pool returns the pool in force (its Config and Stat say the size in
// force). Do not close it: the Handle owns it.
func (h *Handle) Pool() *pgxpool.Pool { return h.cur.Load().pool }

// Replace puts p in force: calls from now on acquire from p, and the pool
// it replaces is closed, in the background, once the calls that acquired
// from it have released their connections. It returns the replaced pool
// (for its statistics or its unregistering; not to be used). After Close,
// p is closed at once and nil returned.
func (h *Handle) Replace(p *pgxpool.Pool) *pgxpool.Pool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		p.Close()
		return nil
	}
	old := h.cur.Swap(h.newGeneration(p))
	h.draining.Add(1)
	old.release()
	return old.pool
}

// Close closes the pool in force and waits until every replaced pool has
// closed too: it returns once no connection of the Handle's is open.
// Calls after Close fail as calls on a closed pgxpool do. Safe to call
// twice.
func (h *Handle) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		h.cur.Load().pool.Close()
	}
	h.mu.Unlock()
	h.draining.Wait()
}

// use returns the generation in force with a reference taken for one
// call; the caller releases it.
func (h *Handle) use() *generation {
	for {
		g := h.cur.Load()
		n := g.refs.Load()
		if n > 0 && g.refs.CompareAndSwap(n, n+1) {
			return g
		}
		// g was replaced and has drained (or is draining to 0): the pool
		// in force is another one, loaded again.
	}
}

// release drops a reference; the last one of a replaced pool closes it.
func (g *generation) release() {
	if g.refs.Add(-1) == 0 {
		go func() {
			// Close waits for the connections still acquired (a
			// transaction begun before the switch) to come back.
			defer g.h.draining.Done()
			g.pool.Close()
		}()
	}
}

// Acquire acquires a connection from the pool in force; it stays of that
// pool until released, which keeps that pool open.
func (h *Handle) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	g := h.use()
	defer g.release()
	return g.pool.Acquire(ctx)
}

// Begin begins a transaction on a connection of the pool in force.
func (h *Handle) Begin(ctx context.Context) (pgx.Tx, error) {
	g := h.use()
	defer g.release()
	return g.pool.Begin(ctx)
}

// BeginTx begins a transaction with opts on a connection of the pool in
// force.
func (h *Handle) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	g := h.use()
	defer g.release()
	return g.pool.BeginTx(ctx, opts)
}

// Exec runs sql on the pool in force.
func (h *Handle) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	g := h.use()
	defer g.release()
	return g.pool.Exec(ctx, sql, args...)
}

// Query runs sql on the pool in force; the rows hold their connection
// until closed.
func (h *Handle) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	g := h.use()
	defer g.release()
	return g.pool.Query(ctx, sql, args...)
}

// QueryRow runs sql on the pool in force; the row holds its connection
// until scanned.
func (h *Handle) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	g := h.use()
	defer g.release()
	return g.pool.QueryRow(ctx, sql, args...)
}

// SendBatch sends b on the pool in force; the results hold their
// connection until closed.
func (h *Handle) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	g := h.use()
	defer g.release()
	return g.pool.SendBatch(ctx, b)
}

// CopyFrom copies rows into table on the pool in force.
func (h *Handle) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	g := h.use()
	defer g.release()
	return g.pool.CopyFrom(ctx, table, columns, src)
}

// Ping checks a connection of the pool in force.
func (h *Handle) Ping(ctx context.Context) error {
	g := h.use()
	defer g.release()
	return g.pool.Ping(ctx)
}
