package sqlhandler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/sqlhandler"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

// bundle is one test's database: the platform's tables, the test's own,
// and a processor running the given SQL handlers.
type bundle struct {
	t   *testing.T
	db  *pgxpool.Pool
	dsn string
}

func setup(t *testing.T, ddl string) *bundle {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.New(t, t.Name())
	require.NoError(t, migrate.Apply(ctx, dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}},
		slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	if ddl != "" {
		_, err = db.Exec(ctx, ddl)
		require.NoError(t, err)
	}
	return &bundle{t: t, db: db, dsn: dsn}
}

// processor returns a dedup processor whose only handler is a SQL handler
// of stmts, for events.
func (b *bundle) processor(name string, events []string, stmts ...string) *dedup.Processor {
	b.t.Helper()
	h, err := sqlhandler.New(name, stmts)
	require.NoError(b.t, err)
	routes := map[string][]dedup.Route{}
	for _, ev := range events {
		routes[ev] = []dedup.Route{{Name: name, Handler: h}}
	}
	return dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: routes})
}

func (b *bundle) count(q string, args ...any) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.db.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

func newEvent(t testing.TB, name string, payload any) consumer.Event {
	t.Helper()
	raw, ok := payload.(string)
	if !ok {
		b, err := json.Marshal(payload)
		require.NoError(t, err)
		raw = string(b)
	}
	return consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: name, OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Payload: json.RawMessage(raw), Delivery: consumer.Delivery{RoutingKey: name}}
}

const (
	placed  = "order.order.placed.v1"
	changed = "order.order.status_changed.v1"
)

const reservationDDL = `CREATE TABLE reservation (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(), order_id uuid NOT NULL, product_id uuid NOT NULL,
    quantity numeric(12,3) NOT NULL CHECK (quantity > 0), created_at timestamptz NOT NULL DEFAULT now())`

const reserveSQL = `INSERT INTO reservation (order_id, product_id, quantity)
SELECT (@payload->>'order_id')::uuid, (l->>'product_id')::uuid, (l->>'quantity')::numeric(12,3)
FROM jsonb_array_elements(@payload->'lines') AS l`

func order(lines int) map[string]any {
	var ls []map[string]string
	for range lines {
		ls = append(ls, map[string]string{"product_id": uuid.NewString(), "quantity": "1.500"})
	}
	return map[string]any{"order_id": uuid.NewString(), "customer_id": uuid.NewString(), "lines": ls}
}

// Every parameter reaches PostgreSQL with its type and value; @names in
// literals stay literal (PostgreSQL agrees with the tokeniser).
func TestParametersAndLiterals(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE seen (event_id uuid, event_name text, occurred_at timestamptz, payload jsonb,
		attempt int, routing_key text, lit text[])`)
	p := b.processor("t.seen", []string{placed}, `INSERT INTO seen VALUES (@event_id, @event_name, @occurred_at, @payload,
		@attempt, @routing_key, ARRAY['@payload', E'it\'s @attempt', $$ @event_id $$, $t$ "@x" $t$])
		-- a comment with @payload
		RETURNING /* @attempt */ 1`)
	ev := newEvent(t, placed, `{"a": [1, "x"]}`)
	ev.Attempt, ev.Delivery.RoutingKey = 3, "order.order.placed.v1"
	rs, err := p.Process(context.Background(), []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	var (
		id       uuid.UUID
		name, rk string
		at       time.Time
		payload  map[string]any
		attempt  int
		lit      []string
	)
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT * FROM seen`).Scan(&id, &name, &at, &payload, &attempt, &rk, &lit))
	require.Equal(t, ev.ID, id)
	require.Equal(t, placed, name)
	require.True(t, ev.OccurredAt.Equal(at))
	require.Equal(t, map[string]any{"a": []any{1.0, "x"}}, payload)
	require.Equal(t, 3, attempt)
	require.Equal(t, "order.order.placed.v1", rk)
	require.Equal(t, []string{"@payload", "it's @attempt", " @event_id ", ` "@x" `}, lit, "literals as written")
}

// countingTracer counts the queries and batches sent on a connection.
type countingTracer struct{ queries, batches, batchQueries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}

func (c *countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.batchQueries.Add(1)
}
func (c *countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// A batch of 50 events with two statements each is one pipeline: one
// batch of 100 queries, not 100 round trips.
func TestHandleBatchIsOnePipeline(t *testing.T) {
	t.Parallel()
	b := setup(t, reservationDDL+`; CREATE TABLE placed (order_id uuid PRIMARY KEY)`)
	h, err := sqlhandler.New("stock.reserve_sql", []string{reserveSQL, `INSERT INTO placed VALUES ((@payload->>'order_id')::uuid)`})
	require.NoError(t, err)
	cc, err := pgx.ParseConfig(b.dsn)
	require.NoError(t, err)
	tr := &countingTracer{}
	cc.Tracer = tr
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var evs []consumer.Event
	for range 50 {
		evs = append(evs, newEvent(t, placed, order(2)))
	}
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tr.queries.Store(0)
	require.NoError(t, h.HandleBatch(ctx, tx, evs))
	require.EqualValues(t, 0, tr.queries.Load(), "no statement on its own")
	require.EqualValues(t, 1, tr.batches.Load(), "one pipeline")
	require.EqualValues(t, 100, tr.batchQueries.Load())
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 100, b.count(`SELECT count(*) FROM reservation`))
	require.Equal(t, 50, b.count(`SELECT count(*) FROM placed`))
}

// Statements run in order per event and event by event, in a batch as
// one by one (HandleBatch has exactly Handle's effects).
func TestStatementOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE log (seq bigserial PRIMARY KEY, event_id uuid, step int, seen bigint)`)
	stmts := []string{
		`INSERT INTO log (event_id, step, seen) SELECT @event_id, 1, count(*) FROM log`,
		`INSERT INTO log (event_id, step, seen) SELECT @event_id, 2, count(*) FROM log WHERE event_id = @event_id`,
	}
	p := b.processor("t.log", []string{placed}, stmts...)
	var evs []consumer.Event
	for range 10 {
		evs = append(evs, newEvent(t, placed, `{}`))
	}
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	for _, r := range rs {
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "%v", r.Err)
	}
	rows, err := b.db.Query(context.Background(), `SELECT event_id, step, seen FROM log ORDER BY seq`)
	require.NoError(t, err)
	type row struct {
		id         uuid.UUID
		step, seen int
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.step, &x.seen)
	})
	require.NoError(t, err)
	require.Len(t, got, 20)
	for i, ev := range evs {
		require.Equal(t, row{ev.ID, 1, 2 * i}, got[2*i])
		require.Equal(t, row{ev.ID, 2, 1}, got[2*i+1], "statement 2 sees statement 1 of the same event")
	}
}

// Bad payloads in a batch of 100: "quantity": "abc" (22P02) and lines not
// an array (22023) fail permanently with their SQLSTATE; a missing
// order_id (23502) and a zero quantity (23514) too; the 96 others commit.
func TestBadPayloadsArePermanentAndIsolated(t *testing.T) {
	t.Parallel()
	b := setup(t, reservationDDL)
	p := b.processor("stock.reserve_sql", []string{placed}, reserveSQL)
	bad := map[int]struct{ payload, code string }{
		10: {`{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "abc"}]}`, "22P02"},
		40: {`{"order_id": "` + uuid.NewString() + `", "lines": {"product_id": "` + uuid.NewString() + `"}}`, "22023"},
		70: {`{"lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`, "23502"},
		99: {`{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "0"}]}`, "23514"},
	}
	var evs []consumer.Event
	for i := range 100 {
		if bp, ok := bad[i]; ok {
			evs = append(evs, newEvent(t, placed, bp.payload))
			continue
		}
		evs = append(evs, newEvent(t, placed, order(2)))
	}
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	for i, r := range rs {
		bp, isBad := bad[i]
		if !isBad {
			require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
			continue
		}
		require.Equal(t, dedup.OutcomeFailed, r.Outcome, "event %d", i)
		require.True(t, r.Permanent, "event %d: %v", i, r.Err)
		require.Equal(t, "stock.reserve_sql", r.Handler)
		require.Contains(t, r.Err.Error(), "statement 1: "+bp.code+" ")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, r.Err, &pgErr)
		require.Equal(t, bp.code, pgErr.Code)
	}
	require.Equal(t, "statement 1: 22P02 invalid input syntax for type numeric: \"abc\"", rs[10].Err.Error())
	require.Equal(t, 192, b.count(`SELECT count(*) FROM reservation`))
	require.Equal(t, 96, b.count(`SELECT count(*) FROM processed_event`))
	for i := range bad {
		require.Zero(t, b.count(`SELECT count(*) FROM processed_event WHERE event_id = $1`, evs[i].ID), "event %d's row rolled back", i)
	}
}

// Errors outside classes 22 and 23 are retried: a table dropped under a
// running handler (42P01), a lock timeout, a serialization failure.
func TestOtherErrorsAreRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE gone (x int)`)
	p := b.processor("t.gone", []string{placed}, `INSERT INTO gone VALUES (@attempt)`)
	_, err := b.db.Exec(context.Background(), `DROP TABLE gone`)
	require.NoError(t, err)
	rs, err := p.Process(context.Background(), []consumer.Event{newEvent(t, placed, `{}`)})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
	require.False(t, rs[0].Permanent, "%v", rs[0].Err)
	require.Contains(t, rs[0].Err.Error(), "statement 1: 42P01 ")

	// An error the statement raises itself: its SQLSTATE class decides.
	_, err = b.db.Exec(context.Background(), `CREATE FUNCTION fail(code text) RETURNS int LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'failed with %', code USING ERRCODE = code; END$$`)
	require.NoError(t, err)
	for code, permanent := range map[string]bool{"55P03": false, "40001": false, "P0001": false, "22023": true, "23505": true} {
		p = b.processor("t.raise", []string{placed}, `SELECT 1`, `SELECT fail(@payload->>'code')`)
		rs, err = p.Process(context.Background(), []consumer.Event{newEvent(t, placed, `{"code": "`+code+`"}`)})
		require.NoError(t, err)
		require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
		require.Equal(t, permanent, rs[0].Permanent, "%s: %v", code, rs[0].Err)
		require.Equal(t, "statement 2: "+code+" failed with "+code, rs[0].Err.Error())
	}
}

// The seed's versioned upsert as a SQL handler: versions 1..5 of many
// orders, shuffled, every one sent two or three times across batches of
// random sizes, keep each order at its newest version, each event once.
func TestVersionedUpsertUnderShuffledDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE order_status (order_id uuid PRIMARY KEY, status text NOT NULL, version integer NOT NULL,
		updated_at timestamptz NOT NULL DEFAULT now())`)
	p := b.processor("shipping.track_status_sql", []string{changed}, `INSERT INTO order_status (order_id, status, version, updated_at)
VALUES ((@payload->>'order_id')::uuid, @payload->>'status', (@payload->>'version')::int, now())
ON CONFLICT (order_id) DO UPDATE
SET status = EXCLUDED.status, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
WHERE order_status.version < EXCLUDED.version`)
	r := rand.New(rand.NewPCG(1, 2))
	const orders, versions = 40, 5
	ids := make([]uuid.UUID, orders)
	var deliveries []consumer.Event
	for o := range orders {
		ids[o] = uuid.New()
		for v := 1; v <= versions; v++ {
			ev := newEvent(t, changed, map[string]any{"order_id": ids[o], "status": fmt.Sprintf("s%d", v), "version": v})
			for range 2 + r.IntN(2) {
				deliveries = append(deliveries, ev)
			}
		}
	}
	r.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	processed, duplicates := 0, 0
	for len(deliveries) > 0 {
		n := min(len(deliveries), 1+r.IntN(60))
		rs, err := p.Process(context.Background(), deliveries[:n])
		require.NoError(t, err)
		for _, res := range rs {
			switch res.Outcome {
			case dedup.OutcomeProcessed:
				processed++
			case dedup.OutcomeDuplicate:
				duplicates++
			default:
				t.Fatalf("unexpected %v: %v", res.Outcome, res.Err)
			}
		}
		deliveries = deliveries[n:]
	}
	require.Equal(t, orders*versions, processed, "each event once")
	require.Positive(t, duplicates)
	require.Equal(t, orders, b.count(`SELECT count(*) FROM order_status WHERE version = $1 AND status = $2 AND order_id = ANY($3)`, versions, fmt.Sprintf("s%d", versions), ids))
	require.Equal(t, orders*versions, b.count(`SELECT count(*) FROM processed_event`))
}

// Prepare finds what only the database knows: a missing column or table,
// a wrong type, and says where in the statement.
func TestPrepare(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE invoice (order_id uuid PRIMARY KEY, total numeric, opened_at timestamptz)`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)

	good, err := sqlhandler.New("billing.open_invoice", []string{
		`INSERT INTO invoice (order_id, opened_at) VALUES ((@payload->>'order_id')::uuid, @occurred_at)`,
	})
	require.NoError(t, err)
	require.NoError(t, good.Prepare(ctx, conn.PgConn()))

	for _, tc := range []struct {
		stmts []string
		k     int
		want  string
	}{
		{[]string{`SELECT 1`, "INSERT INTO invoice (order_id, totl)\nVALUES ((@payload->>'order_id')::uuid, 1)"}, 1,
			`does not prepare: 42703 column "totl" of relation "invoice" does not exist, at line 1, column 32`},
		{[]string{`INSERT INTO invoices (order_id) VALUES (@event_id)`}, 0, `does not prepare: 42P01 relation "invoices" does not exist, at line 1, column 13`},
		{[]string{`INSERT INTO invoice (order_id) VALUES (@attempt)`}, 0, `42804 column "order_id" is of type uuid but expression is of type integer`},
	} {
		h, err := sqlhandler.New("billing.bad", tc.stmts)
		require.NoError(t, err)
		err = h.Prepare(ctx, conn.PgConn())
		var perr *sqlhandler.PrepareError
		require.ErrorAs(t, err, &perr)
		require.Equal(t, tc.k, perr.Statement)
		require.Contains(t, err.Error(), tc.want)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "the PostgreSQL error is kept")
	}
}

// @traceparent is the delivery span's W3C traceparent (only the sampled
// flag), NULL without a span context: platform.publish's headers carry it
// into the event's trace. In the per-event pipeline and in the batch form.
func TestTraceParentParameter(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE seen (event_id uuid, tp text)`)
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x00, 0xf0, 2},
		TraceFlags: trace.FlagsSampled | 0x02})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}})
	want := map[uuid.UUID]*string{}
	mk := func(sc trace.SpanContext, tp string) consumer.Event {
		ev := newEvent(t, placed, `{}`)
		ev.SpanContext = sc
		if tp != "" {
			want[ev.ID] = &tp
		} else {
			want[ev.ID] = nil
		}
		return ev
	}
	for _, form := range []struct {
		name, sql string
		batch     bool
	}{
		{"pipeline", `INSERT INTO seen VALUES (@event_id, @traceparent); SELECT 1`, false},
		{"batch", `INSERT INTO seen (event_id, tp) SELECT @event_id, @traceparent`, true},
	} {
		h, p := b.prepared("t.tp_"+form.name, strings.Split(form.sql, "; ")...)
		on, why := h.BatchMode()
		require.Equal(t, form.batch, on, "%s: %s", form.name, why)
		evs := []consumer.Event{
			mk(sampled, "00-4bf90100000000000000000000000000-00f0020000000000-01"),
			mk(unsampled, "00-09000000000000000000000000000000-0800000000000000-00"),
			mk(trace.SpanContext{}, ""),
		}
		rs, err := p.Process(context.Background(), evs)
		require.NoError(t, err)
		for _, r := range rs {
			require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "%s: %v", form.name, r.Err)
		}
	}
	rows, err := b.db.Query(context.Background(), `SELECT event_id, tp FROM seen`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
		ID uuid.UUID
		TP *string
	}])
	require.NoError(t, err)
	require.Len(t, got, 6)
	for _, g := range got {
		require.Equal(t, want[g.ID], g.TP, "event %s", g.ID)
	}
}
