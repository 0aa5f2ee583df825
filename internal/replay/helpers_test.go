package replay

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/outbox"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// database returns a scratch service database with the platform
// migrations and the archive's partitions.
func database(t testing.TB, prefix string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, prefix)
	require.NoError(t, migrate.Apply(ctx, dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}}, discard))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	_, err = outbox.EnsureArchivePartitions(ctx, db, 1)
	require.NoError(t, err)
	return db
}

// v7At returns a fresh UUID v7 carrying time at.
func v7At(t testing.TB, at time.Time) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[0:6], ms[2:8])
	return id
}

// archive writes one archived event (published now).
func archive(t testing.TB, db *pgxpool.Pool, id uuid.UUID, name string, occurredAt time.Time) {
	t.Helper()
	_, err := db.Exec(context.Background(), `INSERT INTO platform.outbox_archive (event_id, event_name, occurred_at, payload, headers, created_at, published_at)
		VALUES ($1, $2, $3, '{"n": 1}', '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}', $3, now())`, id, name, occurredAt)
	require.NoError(t, err)
}

// processed marks ids processed in a consumer database.
func processed(t testing.TB, db *pgxpool.Pool, ids ...uuid.UUID) {
	t.Helper()
	for _, id := range ids {
		_, err := db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())`, id)
		require.NoError(t, err)
	}
}

// tap declares an exclusive queue bound to exchange with key (the default
// exchange: none) and returns its deliveries.
func tap(t testing.TB, exchange, key string) (string, <-chan amqp.Delivery) {
	t.Helper()
	conn, err := amqp.Dial(testenv.AMQPURL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	if exchange != "" {
		require.NoError(t, ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, true, false, false, nil))
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	require.NoError(t, err)
	if exchange != "" {
		require.NoError(t, ch.QueueBind(q.Name, key, exchange, false, nil))
	}
	d, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	require.NoError(t, err)
	return q.Name, d
}
