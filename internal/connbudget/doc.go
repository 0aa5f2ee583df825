// Package connbudget caps the connections one daemon holds to all its
// services' databases at once (database_budget.max_conns): a hundred
// services on one PostgreSQL server each grow their pool under a burst, and
// per-service caps cannot keep their sum under the server's
// max_connections. A Budget queues the burst instead of filling the server.
//
// # Tokens live with TCP connections
//
// A Budget is a FIFO semaphore of MaxConns tokens handed to pgx as a
// pgconn.DialFunc wrapper (Budget.Wrap): a dial first takes a token,
// waiting with the dial's context (a caller's deadline is honoured), a
// failed dial gives it back, and the returned net.Conn gives it back
// exactly once when it is closed, after the server has closed its end (or
// a quarter of a second, whichever comes first): PostgreSQL frees a
// backend's slot before its socket closes, so the budget never counts a
// slot free that the server still holds. Because the token travels with the
// connection, it survives pgxpool's Hijack (the services' control sessions)
// and is released whoever closes the connection: the pool, the session, or
// a check at start. Every platformd connection to a service's server goes
// through it: the pools, migrations, the checks of SQL handlers, the
// layout work on processed_event and the creation of databases. A nil
// Budget (max_conns 0) wraps nothing: it costs nothing.
//
// # Reclaiming idle connections
//
// A pool keeps an unused connection for its max_idle (30 s by default), so
// a burst on other services would otherwise wait that long for tokens that
// nobody uses. When a dial has to wait, the Budget asks the pools
// registered with it (Budget.Register) for idle connections and closes them
// (pgxpool's AcquireAllIdle, then the underlying connection is closed and
// the pool's handle released, which destroys it): at most as many as dials
// are waiting, never below a pool's MinConns, starting with a different
// pool each pass so that no service is always the one to give. pgxpool does
// not say how long a connection has been idle, so any idle one may go: a
// connection nobody uses is worth less than a dial that waits. A pass runs
// in a goroutine of the Budget's own (Start, Stop), never under a lock a
// dial waits on, at once when a dial starts waiting and then once per
// ReclaimEvery while dials still wait: a burst costs a pass per interval,
// not one per dial.
//
// # Sizing
//
// Every service needs its control session plus one connection to share, so
// config validation asks for max_conns of at least the number of services
// plus one (or 0: no cap). A dial that cannot get a token within its
// context fails like a connection the server refused: a pool's Acquire
// returns the error, a service waits and tries again. Choose the server's
// max_connections less what other clients need (docs/tenants.md).
package connbudget
