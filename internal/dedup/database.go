package dedup

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Session timeout defaults applied to every platformd connection unless the
// DSN sets them. They keep a black-holed or stuck worker from holding a
// processed_event row (and so blocking its duplicates) for hours, and stay
// well below RabbitMQ's 30-minute consumer timeout.
const (
	StatementTimeoutDefault         = 30 * time.Second
	IdleInTransactionTimeoutDefault = 15 * time.Second
)

// PoolConfig configures Connect.
type PoolConfig struct {
	// MaxConns is the pool size (default 8).
	MaxConns int32
	// ApplicationName is shown in pg_stat_activity (default "platformd").
	ApplicationName string
	// StatementTimeout, IdleInTransactionTimeout override the defaults.
	StatementTimeout         time.Duration
	IdleInTransactionTimeout time.Duration
}

// Connect opens a pgx pool on dsn with platformd's session settings.
func Connect(ctx context.Context, dsn string, pc PoolConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dedup: parse database url: %w", err)
	}
	if pc.MaxConns > 0 {
		cfg.MaxConns = pc.MaxConns
	} else {
		cfg.MaxConns = 8
	}
	rp := cfg.ConnConfig.RuntimeParams
	setDefault := func(k, v string) {
		if _, ok := rp[k]; !ok {
			rp[k] = v
		}
	}
	setDefault("application_name", firstNonEmpty(pc.ApplicationName, "platformd"))
	setDefault("statement_timeout", ms(pc.StatementTimeout, StatementTimeoutDefault))
	setDefault("idle_in_transaction_session_timeout", ms(pc.IdleInTransactionTimeout, IdleInTransactionTimeoutDefault))
	// The dedup race resolution described in the package doc relies on READ
	// COMMITTED; REPEATABLE READ would turn it into 40001 failures.
	rp["default_transaction_isolation"] = "read committed"
	cfg.HealthCheckPeriod = 10 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("dedup: connect %s: %w", cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

func ms(d, def time.Duration) string {
	if d <= 0 {
		d = def
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
