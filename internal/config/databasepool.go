package config

import (
	"net/url"
	"strings"
	"time"
)

// Database pool defaults and limits (services[].database_pool).
const (
	// DatabasePoolMaxIdleDefault is the default database_pool.max_idle: a
	// pooled connection unused that long is closed, so that an idle
	// service shrinks back to its control session (docs/tenants.md).
	DatabasePoolMaxIdleDefault = 30 * time.Second
	// DatabasePoolSpareConns is what the derived max_conns adds to the sum
	// of the pools' concurrency: a relay pass, a purge chunk and an admin
	// call next to full pools.
	DatabasePoolSpareConns = 3

	databasePoolConnsMax   = 1000
	databasePoolMaxIdleMin = time.Second
	databasePoolMaxIdleMax = 24 * time.Hour
)

// Database modes (services[].database_mode).
const (
	// DatabaseModeDirect (the default) talks to PostgreSQL itself: the
	// service's control session LISTENs for pauses, horizons and outbox
	// wake-ups.
	DatabaseModeDirect = "direct"
	// DatabaseModePooler talks to a transaction-mode pooler (PgBouncer):
	// only transaction-scoped state. No LISTEN (pauses, horizons and the
	// outbox are polled), leases instead of session locks, statements
	// described per connection and run as unnamed ones (pgx's
	// cache_describe: no prepared statement outlives a transaction), no
	// session settings as startup parameters (set statement_timeout and
	// idle_in_transaction_session_timeout on the database or role), and
	// migrations without goose's session lock.
	DatabaseModePooler = "pooler"
)

// DatabasePoolConfig sizes a service's database connection pool
// (services[].database_pool). The pool grows with the work and shrinks
// back when idle: an idle service holds its control session only (one
// connection that LISTENs, pings and renews leases) plus what min_conns
// keeps.
type DatabasePoolConfig struct {
	// MaxConns is the most connections of the pool, the control session
	// not included (default: the sum of the service's pools' concurrency
	// plus DatabasePoolSpareConns). A reload that changes it, set or
	// derived (a pool's concurrency changed), resizes the service's pool
	// in place: nothing restarts.
	MaxConns int `yaml:"max_conns"`
	// MaxConnsSet is true when the config sets max_conns (not derived).
	MaxConnsSet bool `yaml:"-"`
	// MinConns is how many connections the pool keeps open while idle
	// (default 0, at most max_conns).
	MinConns int `yaml:"min_conns"`
	// MaxIdle is how long an unused pooled connection stays open (default
	// 30s, 1s to 24h).
	MaxIdle time.Duration `yaml:"max_idle"`
}

// applyDatabasePoolDefaults fills the absent keys of a service's
// database_pool block (after its pools' defaults).
func applyDatabasePoolDefaults(s *ServiceConfig, sp string, isSet func(string) bool) {
	dp := &s.DatabasePool
	dp.MaxConnsSet = isSet(sp + ".database_pool.max_conns")
	if !dp.MaxConnsSet {
		n := DatabasePoolSpareConns
		for _, p := range s.Pools {
			n += max(p.Concurrency, 0)
		}
		dp.MaxConns = min(n, databasePoolConnsMax)
	}
	if !isSet(sp + ".database_pool.max_idle") {
		dp.MaxIdle = DatabasePoolMaxIdleDefault
	}
	if !isSet(sp + ".database_mode") {
		s.DatabaseMode = DatabaseModeDirect
	}
	if s.Pooler() {
		s.Database = PoolerDSN(s.Database)
	}
}

// Pooler reports whether the service's database is reached through a
// transaction-mode pooler (database_mode: pooler).
func (s ServiceConfig) Pooler() bool { return s.DatabaseMode == DatabaseModePooler }

// PoolerQueryExecMode is the pgx query mode of database_mode: pooler:
// statements described once per connection and run unnamed, in one round
// trip (describe_exec takes two, which a transaction-mode pooler may send
// to two servers outside a transaction; cache_statement leaves named
// prepared statements on the pooler's servers).
const PoolerQueryExecMode = "cache_describe"

// PoolerDSN returns dsn with pgx's default_query_exec_mode set to
// PoolerQueryExecMode, unless it sets one itself; every connection to the
// service (its pool, migrations, checks) then runs statements that way.
func PoolerDSN(dsn string) string {
	if strings.Contains(dsn, "default_query_exec_mode") {
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("default_query_exec_mode", PoolerQueryExecMode)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return strings.TrimSpace(dsn) + " default_query_exec_mode=" + PoolerQueryExecMode
}

// databasePool checks a service's database_pool block and database_mode.
func (v *validator) databasePool(i int, s *ServiceConfig) {
	oneOf(v.ps, servicePath(i)+".database_mode", s.DatabaseMode, DatabaseModeDirect, DatabaseModePooler)
	sp := servicePath(i) + ".database_pool"
	dp := s.DatabasePool
	if dp.MaxConns < 2 || dp.MaxConns > databasePoolConnsMax {
		v.ps.add(sp+".max_conns", "must be between 2 and %d (got %d): a purge or a relay pass needs a connection beside a batch", databasePoolConnsMax, dp.MaxConns)
	}
	if dp.MinConns < 0 || dp.MinConns > dp.MaxConns {
		v.ps.add(sp+".min_conns", "must be between 0 and max_conns (%d) (got %d)", dp.MaxConns, dp.MinConns)
	}
	if dp.MaxIdle < databasePoolMaxIdleMin || dp.MaxIdle > databasePoolMaxIdleMax {
		v.ps.add(sp+".max_idle", "must be between %s and %s (got %s)", fmtDuration(databasePoolMaxIdleMin), fmtDuration(databasePoolMaxIdleMax), fmtDuration(dp.MaxIdle))
	}
}
