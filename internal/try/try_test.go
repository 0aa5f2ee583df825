package try_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/internal/try"
	"github.com/platformd/platformd/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

const placed = "order.order.placed.v1"

// bundle is a migrated service database with a table of its own, and a
// Go handler that writes to it every way a pgx.Tx allows.
type bundle struct {
	dsn string
	db  *pgxpool.Pool
	cfg *config.Config
	reg *consumer.Registry
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{dsn: testdb.New(t, t.Name()), reg: consumer.NewRegistry()}
	require.NoError(t, migrate.Apply(ctx, b.dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}},
		slog.New(slog.DiscardHandler)))
	db, err := pgxpool.New(ctx, b.dsn)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	b.db = db
	_, err = db.Exec(ctx, `CREATE TABLE note (id int PRIMARY KEY, body text NOT NULL)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `INSERT INTO note VALUES (0, 'kept')`)
	require.NoError(t, err)
	b.reg.MustRegister(consumer.Registration{Name: "notes.write", Events: []string{placed}, Handler: consumer.HandlerFunc(b.write)})
	b.reg.MustRegister(consumer.Registration{Name: "notes.flaky", Events: []string{placed},
		Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error { return errors.New("try later") })})
	b.cfg = &config.Config{Services: []config.ServiceConfig{{Name: "notes", Database: b.dsn, Horizon: 336 * time.Hour,
		Pools: []config.PoolConfig{{Name: "notes-events", Queue: "notes.events", Handlers: []string{"notes.write", "notes.flaky"},
			Retry: config.RetryConfig{Delays: []time.Duration{time.Second, time.Minute}}}}}}}
	return b
}

// write runs a statement through each of pgx.Tx's ways, and publishes.
func (b *bundle) write(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	if _, err := tx.Exec(ctx, `INSERT INTO note VALUES (1, 'exec'), (2, 'exec')`); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, `UPDATE note SET body = 'query' WHERE id IN (1, 2) RETURNING id`)
	if err != nil {
		return err
	}
	if _, err := pgx.CollectRows(rows, pgx.RowTo[int]); err != nil {
		return err
	}
	var id int
	if err := tx.QueryRow(ctx, `INSERT INTO note VALUES (3, $1) RETURNING id`, ev.ID.String()).Scan(&id); err != nil {
		return err
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO note VALUES (4, 'batch')`)
	batch.Queue(`DELETE FROM note WHERE id = 4`)
	if err := sp.SendBatch(ctx, batch).Close(); err != nil {
		return err
	}
	if _, err := sp.CopyFrom(ctx, pgx.Identifier{"note"}, []string{"id", "body"}, pgx.CopyFromRows([][]any{{5, "copy"}, {6, "copy"}})); err != nil {
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return err
	}
	_, err = consumer.Publish(ctx, tx, consumer.Message{Name: "notes.note.written.v1", Payload: map[string]int{"n": 5}})
	return err
}

func (b *bundle) envelope(t *testing.T) (uuid.UUID, []byte) {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	return id, fmt.Appendf(nil, `{"event_id":%q,"event_name":%q,"occurred_at":%q,"payload":{"n":1}}`, id, placed, time.Now().UTC().Format(time.RFC3339Nano))
}

// state fingerprints the tables a try must leave as they are.
func (b *bundle) state(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT concat_ws(' | ',
		(SELECT string_agg(n::text, ',' ORDER BY n::text) FROM note n),
		(SELECT count(*) FROM processed_event), (SELECT count(*) FROM platform.outbox), (SELECT count(*) FROM platform.failed_event))`).Scan(&s))
	return s
}

// A Go handler's every statement is recorded with its rows affected,
// whichever way it ran it (Exec, Query, QueryRow, a batch in a
// savepoint, COPY), its outbox message is listed, and nothing stays.
func TestRunRecordsAGoHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.state(t)
	id, body := b.envelope(t)
	rep, err := try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.write"}, Body: body})
	require.NoError(t, err)
	require.Equal(t, before, b.state(t))
	require.Equal(t, try.OutcomeProcessed, rep.Outcome)
	require.Zero(t, rep.ExitCode())
	require.Equal(t, "go", rep.Kind)
	require.Equal(t, "notes-events", rep.Pool)
	require.Equal(t, id.String(), rep.Event.ID)
	type seen struct {
		command string
		rows    int64
	}
	var got []seen
	for _, e := range rep.Effects {
		require.Equal(t, "notes.write", e.Handler)
		require.Empty(t, e.Error)
		got = append(got, seen{e.Command, e.Rows})
	}
	require.Equal(t, []seen{{"INSERT 0 2", 2}, {"UPDATE 2", 2}, {"INSERT 0 1", 1}, {"INSERT 0 1", 1}, {"DELETE 1", 1}, {"COPY 2", 2}, {"INSERT 0 1", 1}}, got)
	require.Equal(t, []string{id.String()}, rep.Effects[2].Args)
	require.Equal(t, "outbox", rep.Effects[6].Statement)
	require.Len(t, rep.Outbox, 1)
	require.Equal(t, "notes.note.written.v1", rep.Outbox[0].EventName)
	require.JSONEq(t, `{"n": 5}`, string(rep.Outbox[0].Payload))
	require.Empty(t, rep.Notes)

	var text bytes.Buffer
	require.NoError(t, rep.WriteText(&text))
	require.Contains(t, text.String(), "  6. notes.write: COPY 2 (2 rows)\n     COPY \"note\" (id, body) FROM STDIN\n")
	require.Contains(t, text.String(), "result   WOULD APPLY")
}

// A retryable error says when the pool would retry, by the event's
// attempt and the pool's delays; a body that is not the envelope, and an
// event the handler does not handle, are permanent with their reasons.
func TestRunClassifiesFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.state(t)
	_, body := b.envelope(t)
	rep, err := try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.flaky"}, Body: body})
	require.NoError(t, err)
	require.Equal(t, 1, rep.ExitCode())
	require.Equal(t, &try.Failure{Class: "retryable", Handler: "notes.flaky", Message: "notes.flaky: try later",
		Settlement: "the pool would retry it in 1s (attempt 2 of 3)"}, rep.Error)

	rep, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.flaky"}, Body: body, Attempt: 2})
	require.NoError(t, err)
	require.Equal(t, "retries_exhausted", rep.Error.Reason)
	require.Equal(t, "attempt 3 was the last (2 retry delays): the pool would store it in platform.failed_event (reason retries_exhausted)", rep.Error.Settlement)

	// The pool's handlers in order: the second fails, the first's effects
	// are recorded and undone with it.
	rep, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Pool: "notes-events", Body: body})
	require.NoError(t, err)
	require.Equal(t, "notes.write, notes.flaky", rep.Handler)
	require.Equal(t, "go", rep.Kind)
	require.Equal(t, "notes.flaky", rep.Error.Handler)
	require.Len(t, rep.Effects, 7)
	require.Empty(t, rep.Outbox, "rolled back with the failing event")

	rep, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.write"}, Body: []byte(`{"event_id": 1}`)})
	require.NoError(t, err)
	require.Equal(t, 1, rep.ExitCode())
	require.Equal(t, "permanent", rep.Error.Class)
	require.Equal(t, "decode", rep.Error.Reason)
	require.Nil(t, rep.Event)

	other := bytes.Replace(body, []byte(placed), []byte("order.order.cancelled.v1"), 1)
	rep, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.write"}, Body: other})
	require.NoError(t, err)
	require.Equal(t, "no_handler", rep.Error.Reason)
	require.Empty(t, rep.Effects)

	_, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.none"}, Body: body})
	require.ErrorContains(t, err, `unknown handler "notes.none" (handlers: notes.write, notes.flaky)`)
	_, err = try.Run(context.Background(), try.Params{Config: b.cfg, Registry: b.reg, Handlers: []string{"notes.write"}, Service: "nope", Body: body})
	require.ErrorContains(t, err, `no service "nope"`)
	require.Equal(t, before, b.state(t))
}
