package failure

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// database returns a scratch service database with the platform
// migrations.
func database(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, "failure_"+t.Name())
	require.NoError(t, migrate.Apply(ctx, dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}}, discardLog))
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 8
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

// row is a failure as a test stores it by SQL, as the workers would.
type row struct {
	Pool, EventName, Reason, Error, Handler, State, SequenceKey string
	EventID                                                     uuid.UUID // uuid.Nil: a fresh one
	Body                                                        []byte    // nil: an envelope of EventID
	Headers                                                     string    // "": {}
	FailedAt                                                    time.Time // zero: now
}

// insert stores r and returns its id (a UUID v7: ids are arrival order).
func insert(t testing.TB, db *pgxpool.Pool, r row) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	if r.EventID == uuid.Nil {
		r.EventID = uuid.Must(uuid.NewV7())
	}
	if r.Body == nil {
		r.Body = []byte(`{"event_id":"` + r.EventID.String() + `","event_name":"` + r.EventName + `","payload":{"n":1}}`)
	}
	if r.Pool == "" {
		r.Pool = "p"
	}
	if r.Reason == "" {
		r.Reason = "permanent"
	}
	if r.State == "" {
		r.State = StateFailed
	}
	if r.Headers == "" {
		r.Headers = "{}"
	}
	if r.FailedAt.IsZero() {
		r.FailedAt = time.Now()
	}
	var seq any
	if r.SequenceKey != "" {
		seq = r.SequenceKey
	}
	_, err := db.Exec(context.Background(), `INSERT INTO platform.failed_event (id, pool, failure_key, event_id, event_name,
		routing_key, headers, body, reason, error, fingerprint, handler, sequence_key, state, failed_at, first_failed_at)
		VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)`,
		id, r.Pool, r.EventID.String(), r.EventID, r.EventName, r.Headers, r.Body, r.Reason, r.Error, Fingerprint(r.Error),
		r.Handler, seq, r.State, r.FailedAt)
	require.NoError(t, err)
	return id
}

// stateOf returns a row's state.
func stateOf(t testing.TB, db *pgxpool.Pool, id uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT state FROM platform.failed_event WHERE id = $1`, id).Scan(&s))
	return s
}

// queue declares a fresh queue and returns its name and deliveries
// (acked on receipt).
func queue(t testing.TB) (string, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.Qos(2000, 0, false))
	d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return q.Name, d
}

// seed stores n failures of pool by SQL in one statement: reasons cycle
// through groups reasons, failed_at spread over the last n seconds, ids
// UUID v7-like in arrival order.
func seed(t testing.TB, db *pgxpool.Pool, pool string, n, groups int) {
	t.Helper()
	base := seedBase.Add(int64(n)) - int64(n)
	_, err := db.Exec(context.Background(), `INSERT INTO platform.failed_event (id, pool, failure_key, event_id, event_name,
		routing_key, headers, body, reason, error, fingerprint, handler, state, failed_at, first_failed_at)
		SELECT s.id, $1, s.eid::text, s.eid, 'stock.reserved', 'stock.reserved', '{"x-attempt": 3, "traceparent": "00-1-2-01"}',
			convert_to('{"event_id":"' || s.eid || '","event_name":"stock.reserved","payload":{"g":' || g % $3 || '}}', 'UTF8'),
			(ARRAY['permanent', 'decode', 'no_handler', 'retries_exhausted', 'beyond_horizon'])[1 + g % $3],
			'stock.reserve: product ' || s.eid || ': quantity ' || g || ' is negative',
			'stock.reserve: product <uuid>: quantity <n> is negative', 'h' || g % $3, 'failed',
			now() - make_interval(secs => $2 - g), now() - make_interval(secs => $2 - g)
		FROM generate_series(1, $2::int) g,
			LATERAL (SELECT (lpad(to_hex($4 + g), 12, '0') || '7000800000000000' || lpad(to_hex(g % 65536), 4, '0'))::uuid AS id,
				gen_random_uuid() AS eid) s`, pool, n, groups, base)
	require.NoError(t, err)
	_, err = db.Exec(context.Background(), `ANALYZE platform.failed_event`)
	require.NoError(t, err)
}

// seedBase keeps the seeded ids of one test binary distinct.
var seedBase atomic.Int64
