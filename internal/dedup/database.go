package dedup

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/connbudget"
)

// Session timeout defaults applied to every platformd connection unless the
// DSN sets them. They keep a black-holed or stuck worker from holding a
// processed_event row (and so blocking its duplicates) for hours, and stay
// well below RabbitMQ's 30-minute consumer timeout.
const (
	StatementTimeoutDefault         = 30 * time.Second
	IdleInTransactionTimeoutDefault = 15 * time.Second
)

// ConnectConfig configures Connect.
type ConnectConfig struct {
	// MaxConns is the pool size (default 8).
	MaxConns int32
	// MinConns is how many connections the pool keeps open while idle
	// (default 0).
	MinConns int32
	// MaxConnIdleTime closes a connection unused that long (default
	// pgxpool's, 30 minutes); a short one lets an idle pool shrink back.
	MaxConnIdleTime time.Duration
	// ApplicationName is shown in pg_stat_activity (default "platformd").
	ApplicationName string
	// Pooler connects through a transaction-mode pooler: no session
	// settings are sent at startup (a pooler refuses them; set them on
	// the database or role), application_name aside.
	Pooler bool
	// StatementTimeout, IdleInTransactionTimeout override the defaults.
	StatementTimeout         time.Duration
	IdleInTransactionTimeout time.Duration
	// Budget, when set, is the daemon's connection budget: every
	// connection the pool opens takes one of its tokens, and gives it back
	// when closed, hijacked or not (nil, the default: no budget). The
	// caller registers the pool with it for reclaim (Budget.Register).
	Budget *connbudget.Budget
}

// Connect opens a pgx pool on dsn with platformd's session settings.
func Connect(ctx context.Context, dsn string, pc ConnectConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("dedup: parse database url: %w", err)
	}
	if pc.MaxConns > 0 {
		cfg.MaxConns = pc.MaxConns
	} else {
		cfg.MaxConns = 8
	}
	cfg.MinConns = min(max(pc.MinConns, 0), cfg.MaxConns)
	cfg.ConnConfig.DialFunc = pc.Budget.Wrap(cfg.ConnConfig.DialFunc)
	if pc.MaxConnIdleTime > 0 {
		cfg.MaxConnIdleTime = pc.MaxConnIdleTime
	}
	rp := cfg.ConnConfig.RuntimeParams
	setDefault := func(k, v string) {
		if _, ok := rp[k]; !ok {
			rp[k] = v
		}
	}
	setDefault("application_name", firstNonEmpty(pc.ApplicationName, "platformd"))
	// The health check also closes connections idle for MaxConnIdleTime:
	// check often enough for a short idle time to take effect.
	cfg.HealthCheckPeriod = min(10*time.Second, max(cfg.MaxConnIdleTime/3, time.Second))
	if pc.Pooler {
		return connect(ctx, cfg)
	}
	setDefault("statement_timeout", ms(pc.StatementTimeout, StatementTimeoutDefault))
	setDefault("idle_in_transaction_session_timeout", ms(pc.IdleInTransactionTimeout, IdleInTransactionTimeoutDefault))
	// The dedup race resolution described in the package doc relies on READ
	// COMMITTED; REPEATABLE READ would turn it into 40001 failures.
	rp["default_transaction_isolation"] = "read committed"
	return connect(ctx, cfg)
}

func connect(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
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
