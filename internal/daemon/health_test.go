package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/platformd/platformd/internal/testlog"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/testdb"
)

// A service whose database refuses its connections says so: at warn in
// the log, with PostgreSQL's reason, and in ListServices; and at info once
// it answers again.
func TestServiceDatabaseRefusalIsLogged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.New(t, "health_refused")
	cc, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	e := newReloadEnv(t, dsn)
	e.write(t, "", "")
	cfg, full, cat := loadShop(t, e.path)
	logs := &testlog.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	require.NoError(t, Migrate(ctx, cfg, full, false, logger))
	sigs := e.signals(t)
	sigs.Health.Init(t)
	d, err := start(ctx, cfg, full, Options{ConfigPath: e.path, Catalog: cat, testSignals: sigs}, map[string]bool{"stock": true}, logger)
	require.NoError(t, err)
	defer d.Stop()
	sigs.ServiceUp.WaitUntil("stock up", func() bool { return d.serviceList()[0].up.Load() })

	admin, err := pgx.Connect(ctx, testdb.AdminURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	db := pgx.Identifier{cc.Database}.Sanitize()
	_, err = admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS false")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true") })
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, cc.Database)
	require.NoError(t, err)

	const warn = "daemon: service database health check failed"
	sigs.Health.WaitUntil("a warn with the database's reason", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, warn) && strings.Contains(l, "not currently accepting connections") {
				return true
			}
		}
		return false
	})
	svcs, err := (&backend{d: d}).ListServices(ctx)
	require.NoError(t, err)
	require.Len(t, svcs, 1)
	require.Contains(t, svcs[0].Error, "not currently accepting connections")

	_, err = admin.Exec(ctx, "ALTER DATABASE "+db+" ALLOW_CONNECTIONS true")
	require.NoError(t, err)
	sigs.Health.WaitUntil("the recovery logged", func() bool {
		return strings.Contains(logs.String(), "daemon: service database answers again")
	})
}

// A failing health check warns once per reason: again at once when the
// reason changes (the session killed, then the database refusing new
// ones), not again while it stays the same, and its recovery at info.
func TestHealthWarnsAgainWhenTheReasonChanges(t *testing.T) {
	logs := &testlog.Buffer{}
	s := &service{name: "stock", d: &Daemon{log: slog.New(slog.NewTextHandler(logs, nil))}}
	ctx := context.Background()
	killed := errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	refused := errors.New(`FATAL: database "stock" is not currently accepting connections (SQLSTATE 55000)`)
	const warn = "service database health check failed"
	w := s.reportHealth(ctx, killed, healthWarned{})
	w = s.reportHealth(ctx, killed, w)
	require.Equal(t, 1, logs.Count(warn), "the same reason: once")
	w = s.reportHealth(ctx, refused, w)
	w = s.reportHealth(ctx, refused, w)
	require.Equal(t, 2, logs.Count(warn), "a new reason: at once, then once")
	require.Equal(t, 1, logs.Count("not currently accepting connections"))
	w = s.reportHealth(ctx, nil, w)
	require.Equal(t, 1, logs.Count("service database answers again"))
	require.True(t, w.at.IsZero())
}
