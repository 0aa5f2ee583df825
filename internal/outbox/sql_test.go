package outbox

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
)

// v7Time returns the 60 time bits of a UUID v7 minted by platform.uuid_v7
// (48 bits of ms, 12 bits of sub-ms fraction).
func v7Time(id uuid.UUID) uint64 {
	hi := binary.BigEndian.Uint64(id[:8])
	return (hi>>16)<<12 | hi&0x0fff
}

func TestUUIDv7SQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("version, variant and time", func(t *testing.T) {
		before := time.Now().Add(-time.Second)
		var id uuid.UUID
		require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.uuid_v7()`).Scan(&id))
		after := time.Now().Add(time.Second)
		require.EqualValues(t, 7, id.Version())
		require.Equal(t, uuid.RFC4122, id.Variant())
		ms := int64(binary.BigEndian.Uint64(id[:8]) >> 16)
		require.GreaterOrEqual(t, ms, before.UnixMilli())
		require.LessOrEqual(t, ms, after.UnixMilli())
	})

	t.Run("ordered within a session", func(t *testing.T) {
		// One call per statement: each reads clock_timestamp() anew.
		conn, err := b.check.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		var prev uint64
		for i := range 500 {
			var id uuid.UUID
			require.NoError(t, conn.QueryRow(ctx, `SELECT platform.uuid_v7()`).Scan(&id))
			ts := v7Time(id)
			require.GreaterOrEqual(t, ts, prev, "call %d went back in time", i)
			prev = ts
		}
	})

	t.Run("unique under concurrency", func(t *testing.T) {
		const sessions, per = 6, 5000
		var mu sync.Mutex
		seen := make(map[uuid.UUID]bool, sessions*per)
		var wg sync.WaitGroup
		for range sessions {
			wg.Go(func() {
				rows, err := b.check.Query(ctx, `SELECT platform.uuid_v7() FROM generate_series(1, $1)`, per)
				if !assertNoErr(t, err) {
					return
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
				if !assertNoErr(t, err) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					if seen[id] {
						t.Errorf("duplicate id %s", id)
					}
					seen[id] = true
				}
			})
		}
		wg.Wait()
		require.Len(t, seen, sessions*per)
	})
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

func TestPublishFunction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	var id uuid.UUID
	require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.thing.done.v1', '{"n": 1}')`).Scan(&id))
	require.EqualValues(t, 7, id.Version())
	var name, payload, headers string
	require.NoError(t, b.check.QueryRow(ctx, `SELECT event_name, payload::text, headers::text FROM platform.outbox WHERE event_id = $1`, id).
		Scan(&name, &payload, &headers))
	require.Equal(t, "test.thing.done.v1", name)
	require.JSONEq(t, `{"n": 1}`, payload)
	require.JSONEq(t, `{}`, headers)

	require.NoError(t, b.check.QueryRow(ctx, `SELECT platform.publish('test.x', '{}', '{"h": "v"}')`).Scan(&id))
	require.NoError(t, b.check.QueryRow(ctx, `SELECT headers::text FROM platform.outbox WHERE event_id = $1`, id).Scan(&headers))
	require.JSONEq(t, `{"h": "v"}`, headers)

	for _, bad := range []struct{ sql, msg string }{
		{`SELECT platform.publish('has space', '{}')`, "invalid event name"},
		{`SELECT platform.publish('a..b', '{}')`, "invalid event name"},
		{`SELECT platform.publish('', '{}')`, "invalid event name"},
		{`SELECT platform.publish(NULL, '{}')`, "invalid event name"},
		{`SELECT platform.publish(repeat('a', 256), '{}')`, "invalid event name"},
		{`SELECT platform.publish('a.b', '[1]')`, "payload must be a JSON object"},
		{`SELECT platform.publish('a.b', NULL)`, "payload must be a JSON object"},
		{`SELECT platform.publish('a.b', '{}', '"x"')`, "headers must be a JSON object"},
	} {
		_, err := b.check.Exec(ctx, bad.sql)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, bad.sql)
		require.Equal(t, "22023", pgErr.Code, bad.sql)
		require.Contains(t, pgErr.Message, bad.msg, bad.sql)
	}
	require.Equal(t, 2, b.pending())
}

func TestConsumerPublishInCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	tx, err := b.check.Begin(ctx)
	require.NoError(t, err)
	id, err := consumer.Publish(ctx, tx, consumer.Message{
		Name: "test.go.published.v1", Payload: map[string]any{"a": "b"}, Headers: map[string]any{"k": 1},
	})
	require.NoError(t, err)
	require.EqualValues(t, 7, id.Version())
	require.Equal(t, 0, b.pending(), "not visible before the commit")
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, b.pending())

	tx, err = b.check.Begin(ctx)
	require.NoError(t, err)
	_, err = consumer.Publish(ctx, tx, consumer.Message{Name: "test.go.rolled_back.v1", Payload: []byte(`{"x":1}`)})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, b.pending(), "a rolled-back transaction leaves no row")

	tx, err = b.check.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = consumer.Publish(ctx, tx, consumer.Message{Name: "bad name", Payload: []byte(`{}`)})
	require.ErrorIs(t, err, consumer.ErrInvalidMessage)
	require.True(t, consumer.IsPermanent(err))

	// Valid JSON that jsonb refuses (22P05): the database says no every
	// time, so the handler's event goes to the failure queue at once.
	tx2, err := b.check.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx2.Rollback(ctx) }()
	_, err = consumer.Publish(ctx, tx2, consumer.Message{Name: "test.nul", Payload: json.RawMessage(`{"a":"\u0000"}`)})
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "22P05", pe.Code)
	require.True(t, consumer.IsPermanent(err))
}
