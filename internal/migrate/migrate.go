// Package migrate applies platformd's SQL migrations, and those of the
// registered handlers, to a service database with goose. Several daemons
// may start at once: every set is applied under a PostgreSQL advisory lock,
// so one applies and the others find the work done.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/connbudget"
	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/query"
	"github.com/platformd/platformd/migrations"
)

// lockID is the advisory lock key platformd migrations run under
// ("platformd" hashed by hand; constant so every daemon uses the same).
const lockID int64 = 0x706c6174666f726d

// Set is one named group of goose migrations, versioned in its own table
// platform.goose_<Name>.
type Set struct {
	// Name identifies the set: "platform" or a handler's name.
	Name string
	// FS holds the goose SQL files at its root.
	FS fs.FS
}

// PlatformSetName is the name of the platform's own migration set.
const PlatformSetName = "platform"

// Sets returns the platform set followed by the sets of the named handlers
// that declare migrations, each once, in the order given.
func Sets(reg *consumer.Registry, handlerNames []string) ([]Set, error) {
	sets := []Set{{Name: PlatformSetName, FS: migrations.Platform()}}
	seen := map[string]bool{}
	for _, name := range handlerNames {
		if seen[name] {
			continue
		}
		seen[name] = true
		r, err := reg.Lookup(name)
		if err != nil {
			return nil, fmt.Errorf("migration sets: %w", err)
		}
		if r.Migrations != nil {
			sets = append(sets, Set{Name: name, FS: r.Migrations})
		}
	}
	return sets, nil
}

// ServiceSet returns the set of a service's own migrations
// (services[].migrations). It is versioned in platform.goose__service_<name>:
// handler names start with a letter or a digit, so no handler's table can
// take that name.
func ServiceSet(service string, fsys fs.FS) Set {
	return Set{Name: "_service_" + service, FS: fsys}
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]`)

// tableName returns the goose version table of a set.
func tableName(set string) string {
	return "platform.goose_" + nonIdent.ReplaceAllString(strings.ToLower(set), "_")
}

// Apply applies every set, in order, to the database at dsn. It is safe to
// call from several processes at once, except through a transaction-mode
// pooler: a dsn whose default_query_exec_mode is not cache_statement
// (database_mode: pooler) migrates without goose's session lock, which such
// a pooler cannot hold; run `platformd migrate` once before starting
// several daemons together, or point it at the server.
func Apply(ctx context.Context, dsn string, sets []Set, logger *slog.Logger) error {
	return ApplyWith(ctx, dsn, sets, logger, Options{})
}

// Options tunes ApplyWith.
type Options struct {
	// Budget, when set, is the daemon's connection budget: every
	// connection the migrations open takes one of its tokens (nil: none).
	Budget *connbudget.Budget
}

// ApplyWith is Apply with options.
func ApplyWith(ctx context.Context, dsn string, sets []Set, logger *slog.Logger, opts Options) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrate: parse database url: %w", err)
	}
	cfg.DialFunc = opts.Budget.Wrap(cfg.DialFunc)
	sessionLock := cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	if err := ensureSchema(ctx, cfg); err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(4)

	for _, s := range sets {
		if err := applySet(ctx, db, s, sessionLock, logger.With(slog.String("database", cfg.Database))); err != nil {
			return err
		}
	}
	return nil
}

// ensureSchema creates the platform schema, which holds the goose version
// tables, under a transaction-scoped advisory lock (a concurrent CREATE
// SCHEMA IF NOT EXISTS can otherwise fail on pg_namespace's unique index).
func ensureSchema(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = dbutil.WithTx(ctx, conn, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := lockMigrations.Run(ctx, tx, query.NoParams{}); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		if _, err := createPlatformSchema.Run(ctx, tx, query.NoParams{}); err != nil {
			return fmt.Errorf("create schema platform: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

func applySet(ctx context.Context, db *sql.DB, s Set, sessionLock bool, logger *slog.Logger) error {
	store, err := database.NewStore(database.DialectPostgres, tableName(s.Name))
	if err != nil {
		return fmt.Errorf("migrate %s: store: %w", s.Name, err)
	}
	// Poll every second for up to 5 minutes while another daemon migrates.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return fmt.Errorf("migrate %s: locker: %w", s.Name, err)
	}
	opts := []goose.ProviderOption{goose.WithStore(store), goose.WithDisableGlobalRegistry(true)}
	if sessionLock {
		opts = append(opts, goose.WithSessionLocker(locker))
	}
	p, err := goose.NewProvider("", db, s.FS, opts...)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", s.Name, err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "migrate: applied",
			slog.String("set", s.Name),
			slog.String("migration", r.Source.Path),
			slog.Duration("duration", r.Duration))
	}
	return nil
}
