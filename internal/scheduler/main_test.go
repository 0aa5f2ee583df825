package scheduler_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/scheduler"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// testBundle is one scratch service database with the platform migrations
// (and, on request, the shop's stock migrations).
type testBundle struct {
	dsn string
	db  *pgxpool.Pool
	reg *consumer.Registry
}

func setup(t testing.TB, handlers ...string) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{reg: consumer.NewRegistry()}
	require.NoError(t, shop.Register(b.reg))
	b.dsn = testdb.New(t, t.Name())
	sets, err := migrate.Sets(b.reg, handlers)
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, b.dsn, sets, discard()))
	b.db = b.pool(t, 4)
	return b
}

// pool opens another pool on the bundle's database, closed when t ends.
func (b *testBundle) pool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	db, err := dedup.Connect(context.Background(), b.dsn, dedup.ConnectConfig{MaxConns: maxConns})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// logRecorder is a slog.Handler keeping every record's level and message.
type logRecorder struct {
	mu      sync.Mutex
	records []logRecord
}

type logRecord struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{Level: rec.Level, Msg: rec.Message, Attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		lr.Attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, lr)
	return nil
}

// find returns the records whose message is msg.
func (r *logRecorder) find(msg string) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, lr := range r.records {
		if lr.Msg == msg {
			out = append(out, lr)
		}
	}
	return out
}

// atLeast returns the records at level or above.
func (r *logRecorder) atLeast(level slog.Level) []logRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logRecord
	for _, lr := range r.records {
		if lr.Level >= level {
			out = append(out, lr)
		}
	}
	return out
}

// service returns a Service named "stock" on db with horizon h (and
// a min horizon of a minute).
func service(db *pgxpool.Pool, h time.Duration) scheduler.Service {
	return scheduler.Service{Name: "stock", DB: db, DefaultHorizon: h, MinHorizon: time.Minute, Every: -1}
}

// newScheduler returns a Scheduler stopped when t ends.
func newScheduler(t testing.TB, cfg scheduler.Config) *scheduler.Scheduler {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = discard()
	}
	s, err := scheduler.New(cfg)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s
}

// seed inserts n rows processed age ago, by the database clock.
func (b *testBundle) seed(t testing.TB, n int, age time.Duration) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at)
		SELECT gen_random_uuid(), now() - make_interval(secs => $2::float8 / 1e6) FROM generate_series(1, $1)`,
		n, age.Microseconds())
	require.NoError(t, err)
}

// seedSpread inserts n rows whose ages are spread evenly from oldest down
// to youngest, by the database clock.
func (b *testBundle) seedSpread(t testing.TB, n int, oldest, youngest time.Duration) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at)
		SELECT gen_random_uuid(), now() - make_interval(secs => ($2::float8 - ($2::float8 - $3::float8) * i / $1) / 1e6)
		FROM generate_series(1, $1) AS i`, n, oldest.Microseconds(), youngest.Microseconds())
	require.NoError(t, err)
}

func (b *testBundle) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

func (b *testBundle) rows(t testing.TB) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM processed_event`)
}

func (b *testBundle) dbNow(t testing.TB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT now()`).Scan(&now))
	return now
}

// advisoryLocks counts the advisory locks held in the bundle's database
// (pg_locks shows the whole server's).
func (b *testBundle) advisoryLocks(t testing.TB) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
}
