package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/migrate"
)

// benchDB is the bench's scratch service database: created for the run,
// migrated with platformd's own migrations (platform set and the shop's
// stock.reserve set, exactly what `platformd run` applies), dropped at the
// end.
type benchDB struct {
	adminURL string // the server's maintenance database, for CREATE/DROP
	name     string
	url      string
	pool     *pgxpool.Pool
}

// withDatabase returns dsn with its database name replaced by name. A URL
// that names no sslmode gets sslmode=disable: every contender receives
// this same URL, the server is on the loopback, and TLS there would
// measure the cipher (about a tenth of the consumer's and the database's
// CPU in a profile) rather than the consumers.
func withDatabase(dsn, name string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("database url: want a postgres:// URL, got %q", u.Scheme)
	}
	u.Path = "/" + name
	if q := u.Query(); !q.Has("sslmode") {
		q.Set("sslmode", "disable")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

func createBenchDB(ctx context.Context, adminURL, name string) (*benchDB, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("database: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("database: create %s: %w", name, err)
	}
	dsn, err := withDatabase(adminURL, name)
	if err != nil {
		return nil, err
	}
	db := &benchDB{adminURL: adminURL, name: name, url: dsn}
	reg, err := shopRegistry()
	if err != nil {
		return db, err
	}
	sets, err := migrate.Sets(reg, []string{shop.HandlerStockReserve})
	if err != nil {
		return db, err
	}
	if err := migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return db, fmt.Errorf("database: migrate %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return db, err
	}
	cfg.MaxConns = 3
	cfg.ConnConfig.RuntimeParams["application_name"] = "platformd-bench"
	// The completion counts must not spawn parallel workers.
	cfg.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	if db.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return db, fmt.Errorf("database: pool: %w", err)
	}
	return db, nil
}

// drop drops the database, closing whatever sessions remain.
// It retries for a while: the shared server may be restarting.
func (d *benchDB) drop(ctx context.Context) error {
	if d.pool != nil {
		d.pool.Close()
	}
	var err error
	for range 30 {
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, d.adminURL); err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(2 * time.Second):
		}
	}
	return err
}

// reset empties the effect and dedup tables so every drain starts from the
// same state, then checkpoints so that no contender pays for the previous
// one's dirty pages.
func (d *benchDB) reset(ctx context.Context, checkpoint bool) error {
	if _, err := d.pool.Exec(ctx, "TRUNCATE reservation, processed_event"); err != nil {
		return fmt.Errorf("database: truncate: %w", err)
	}
	if checkpoint {
		if _, err := d.pool.Exec(ctx, "CHECKPOINT"); err != nil {
			return fmt.Errorf("database: checkpoint: %w", err)
		}
		// And the machine's dirty pages (the broker's queue files of the
		// previous phases): their writeback stalled the next phase's WAL
		// flushes by tens of milliseconds.
		syscall.Sync()
	}
	return nil
}

// reservations counts the reservation rows.
func (d *benchDB) reservations(ctx context.Context) (int, error) {
	return d.count(ctx, "SELECT count(*) FROM reservation")
}

func (d *benchDB) count(ctx context.Context, query string) (int, error) {
	var n int
	if err := d.pool.QueryRow(ctx, query).Scan(&n); err != nil {
		return 0, fmt.Errorf("database: %s: %w", query, err)
	}
	return n, nil
}

// effects are the counts the exactly-once check compares.
type effects struct {
	Reservations   int `json:"reservations"`
	DistinctOrders int `json:"distinct_orders"`
	ProcessedRows  int `json:"processed_event_rows"`
}

func (d *benchDB) effects(ctx context.Context) (effects, error) {
	var e effects
	err := d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM reservation),
		(SELECT count(DISTINCT order_id) FROM reservation),
		(SELECT count(*) FROM processed_event)`).Scan(&e.Reservations, &e.DistinctOrders, &e.ProcessedRows)
	if err != nil {
		return e, fmt.Errorf("database: effects: %w", err)
	}
	return e, nil
}

// Commit probes (the latency phase's way of seeing a reservation's commit).
const (
	// probePoll: a trigger copies each reservation's order id into
	// bench_commit (a bigserial key), and the bench reads the new rows
	// every 2 ms through that key's index. A row is visible exactly when
	// its transaction has committed; the bench stamps it when its read
	// returns, so the commit time is over-estimated by at most one period
	// plus one read. It adds one row insert per effect and no lock.
	probePoll = "poll"
	// probeNotify: the trigger NOTIFYs the order id; PostgreSQL delivers a
	// notification only after commit, and the bench stamps its arrival.
	// Precise, but a committing transaction that has notified holds a
	// database-wide lock until its commit is flushed, so it serialises the
	// contender's concurrent commits: it inflates what it measures.
	probeNotify = "notify"
)

// notifyChannel is the LISTEN channel of the notify probe.
const notifyChannel = "bench_commit"

// installProbe adds the trigger of the given probe on reservation. It
// exists only during the latency phase, for every contender alike.
func (d *benchDB) installProbe(ctx context.Context, probe string) error {
	body := "INSERT INTO bench_commit (order_id) VALUES (NEW.order_id);"
	if probe == probeNotify {
		body = "PERFORM pg_notify('" + notifyChannel + "', NEW.order_id::text);"
	}
	_, err := d.pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS bench_commit (seq bigserial PRIMARY KEY, order_id uuid NOT NULL);
TRUNCATE bench_commit RESTART IDENTITY;
CREATE OR REPLACE FUNCTION bench_commit_probe() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	`+body+`
	RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS bench_commit_probe ON reservation;
CREATE TRIGGER bench_commit_probe AFTER INSERT ON reservation FOR EACH ROW EXECUTE FUNCTION bench_commit_probe();`)
	if err != nil {
		return fmt.Errorf("database: install probe: %w", err)
	}
	return nil
}

func (d *benchDB) removeProbe(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `DROP TRIGGER IF EXISTS bench_commit_probe ON reservation; DROP FUNCTION IF EXISTS bench_commit_probe(); DROP TABLE IF EXISTS bench_commit`)
	return err
}
