package daemon

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/testdb"
)

// A database that drops the daemon's connection while its migrations run
// at start (a restart or pg_terminate_backend: SQLSTATE 57P01) is a
// database away, not a migration refused: the daemon starts and the
// service comes up by itself once a second attempt gets through. The soak
// found a daemon that exited instead, its start met by a pg-terminate
// fault. The first attempt terminates its own backend, counted by a
// sequence (nextval outlives the rolled-back migration).
func TestStartSurvivesAConnectionTerminatedDuringMigrations(t *testing.T) {
	t.Parallel()
	dsn := testdb.New(t, "start_terminated")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE SEQUENCE boom`)
	require.NoError(t, err)

	e := newReloadEnv(t, dsn)
	e.write(t, "", "")
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	require.NoError(t, reg.Register(consumer.Registration{Name: "test.terminated_once", Events: []string{shop.EventOrderPlaced},
		Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return nil }),
		Migrations: fstest.MapFS{"00001_terminate_once.sql": {Data: []byte(`-- +goose Up
SELECT CASE WHEN nextval('public.boom') = 1 THEN pg_terminate_backend(pg_backend_pid()) END;
`)}}}))
	cat := Catalog{Registry: reg}
	// The stock pool runs both handlers, so both sets migrate at start.
	cfg, err := config.Load(e.path, cat)
	require.NoError(t, err)
	for i := range cfg.Services[0].Pools {
		cfg.Services[0].Pools[i].Handlers = append(cfg.Services[0].Pools[i].Handlers, "test.terminated_once")
	}
	full, err := WithSQLHandlers(cfg, reg)
	require.NoError(t, err)

	sigs := e.signals(t)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	var started atomic.Pointer[Daemon]
	go func() {
		done <- Run(runCtx, cfg, full, Options{ConfigPath: e.path, Catalog: cat, testSignals: sigs,
			StartedFunc: func(d *Daemon) { started.Store(d) }},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	up := func() bool {
		d := started.Load()
		if d == nil {
			return false
		}
		for _, s := range d.serviceList() {
			if s.name == "stock" && s.up.Load() {
				return true
			}
		}
		return false
	}
	// Run returns at once when it takes the terminated connection for a
	// migration refused: nothing signals then, so the wait also ends on it.
	sigs.ServiceUp.WaitUntil("stock up, or the daemon stopped", func() bool { return len(done) > 0 || up() })
	select {
	case err := <-done:
		t.Fatalf("the daemon stopped at start: %v", err)
	default:
	}
	var calls int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT last_value FROM boom`).Scan(&calls))
	require.GreaterOrEqual(t, calls, int64(2), "the migration was tried again after the terminated attempt")
	cancel()
	require.NoError(t, <-done)
}
