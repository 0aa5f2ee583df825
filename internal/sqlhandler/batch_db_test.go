package sqlhandler_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/sqlhandler"
)

// prepared returns a handler of stmts prepared against the bundle's
// database (its batch form on when it may) and a processor running it.
func (b *bundle) prepared(name string, stmts ...string) (*sqlhandler.Handler, *dedup.Processor) {
	b.t.Helper()
	h, err := sqlhandler.New(name, stmts)
	require.NoError(b.t, err)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(b.t, err)
	defer conn.Close(ctx)
	require.NoError(b.t, h.Prepare(ctx, conn.PgConn()))
	return h, dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: map[string][]dedup.Route{placed: {{Name: name, Handler: h}}}})
}

func (b *bundle) exec(sql string) {
	b.t.Helper()
	_, err := b.db.Exec(context.Background(), sql)
	require.NoError(b.t, err)
}

func (b *bundle) processAll(p *dedup.Processor, evs []consumer.Event) {
	b.t.Helper()
	rs, err := p.Process(context.Background(), evs)
	require.NoError(b.t, err)
	for i, r := range rs {
		require.Equal(b.t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
	}
}

func events(t *testing.T, n int, payload func(i int) any) []consumer.Event {
	evs := make([]consumer.Event, n)
	for i := range evs {
		evs[i] = newEvent(t, placed, payload(i))
	}
	return evs
}

// The shop's statement runs once per batch: one statement, no pipeline,
// rows in event order, the same rows as statement by statement.
func TestBatchFormRunsOncePerBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, reservationDDL+`; ALTER TABLE reservation ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY`)
	h, p := b.prepared("stock.reserve_sql", reserveSQL)
	on, why := h.BatchMode()
	require.True(t, on, why)

	cc, err := pgx.ParseConfig(b.dsn)
	require.NoError(t, err)
	tr := &countingTracer{}
	cc.Tracer = tr
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, cc)
	require.NoError(t, err)
	defer conn.Close(ctx)
	evs := events(t, 50, func(int) any { return order(3) })
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	tr.queries.Store(0)
	require.NoError(t, h.HandleBatch(ctx, tx, evs))
	require.EqualValues(t, 1, tr.queries.Load(), "one statement for the batch")
	require.EqualValues(t, 0, tr.batches.Load())
	require.NoError(t, tx.Commit(ctx))

	// Rows in delivery order, each event's lines in payload order, as
	// statement by statement would number them.
	rows, err := b.db.Query(ctx, `SELECT order_id, product_id FROM reservation ORDER BY seq`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Order, Product uuid.UUID }])
	require.NoError(t, err)
	require.Len(t, got, 150)
	for i, ev := range evs {
		var o struct {
			OrderID uuid.UUID `json:"order_id"`
			Lines   []struct {
				ProductID uuid.UUID `json:"product_id"`
			} `json:"lines"`
		}
		require.NoError(t, jsonUnmarshal(ev.Payload, &o))
		for k, l := range o.Lines {
			require.Equal(t, o.OrderID, got[3*i+k].Order)
			require.Equal(t, l.ProductID, got[3*i+k].Product)
		}
	}

	// Through the dedup step with bad payloads: the batch form fails, the
	// batch is replayed event by event, the bad ones alone fail.
	evs = events(t, 20, func(i int) any {
		if i == 7 {
			return `{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "abc"}]}`
		}
		return order(1)
	})
	rs, err := p.Process(ctx, evs)
	require.NoError(t, err)
	for i, r := range rs {
		if i == 7 {
			require.Equal(t, dedup.OutcomeFailed, r.Outcome)
			require.True(t, r.Permanent)
			require.Equal(t, `statement 1: 22P02 invalid input syntax for type numeric: "abc"`, r.Err.Error())
			continue
		}
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
	}
	require.Equal(t, 169, b.count(`SELECT count(*) FROM reservation`))
}

// Statements whose batch form could differ from running them one by one
// keep running one by one: the reason is reported at start.
func TestBatchFormRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ddl, stmt, why string
	}{
		{"reads its own table", `CREATE TABLE log (event_id uuid, seen bigint)`,
			`INSERT INTO log SELECT @event_id, count(*) FROM log`, "its query uses table log"},
		{"reads another table", `CREATE TABLE log (event_id uuid); CREATE TABLE other (x int)`,
			`INSERT INTO log SELECT @event_id FROM other`, "its query uses table other"},
		{"a function of the database's own", `CREATE TABLE log (event_id uuid, n int); CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'`,
			`INSERT INTO log VALUES (@event_id, f())`, "its query uses function f()"},
		{"a function that runs SQL", `CREATE TABLE log (event_id uuid, x xml)`,
			`INSERT INTO log VALUES (@event_id, query_to_xml('SELECT count(*) FROM log', false, false, ''))`, "it calls query_to_xml"},
		{"statement_timestamp", `CREATE TABLE log (event_id uuid, at timestamptz)`,
			`INSERT INTO log VALUES (@event_id, statement_timestamp())`, "it calls statement_timestamp"},
		{"a trigger", `CREATE TABLE log (event_id uuid); CREATE FUNCTION t() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
			CREATE TRIGGER t BEFORE INSERT ON log FOR EACH ROW EXECUTE FUNCTION t()`,
			`INSERT INTO log VALUES (@event_id)`, "its table does not qualify"},
		{"a foreign key to itself", `CREATE TABLE log (event_id uuid PRIMARY KEY, parent uuid REFERENCES log)`,
			`INSERT INTO log VALUES (@event_id, (@payload->>'parent')::uuid)`, "its table does not qualify"},
		{"row security", `CREATE TABLE log (event_id uuid); ALTER TABLE log ENABLE ROW LEVEL SECURITY`,
			`INSERT INTO log VALUES (@event_id)`, "its table does not qualify"},
		{"a default of the database's own", `CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'; CREATE TABLE log (event_id uuid, n int DEFAULT f())`,
			`INSERT INTO log (event_id) VALUES (@event_id)`, "its table does not qualify"},
		{"an index on a function of the database's own", `CREATE FUNCTION f(uuid) RETURNS uuid IMMUTABLE LANGUAGE sql AS 'SELECT $1';
			CREATE TABLE log (event_id uuid); CREATE INDEX ON log (f(event_id))`,
			`INSERT INTO log VALUES (@event_id)`, "its table does not qualify"},
		{"a check on a function of the database's own", `CREATE FUNCTION ok(uuid) RETURNS bool IMMUTABLE LANGUAGE sql AS 'SELECT true';
			CREATE TABLE log (event_id uuid CHECK (ok(event_id)))`,
			`INSERT INTO log VALUES (@event_id)`, "its table does not qualify"},
		{"a domain", `CREATE DOMAIN pos AS int CHECK (VALUE > 0); CREATE TABLE log (event_id uuid, n pos)`,
			`INSERT INTO log VALUES (@event_id, @attempt + 1)`, "its table does not qualify"},
		{"a view", `CREATE TABLE log (event_id uuid); CREATE VIEW v AS SELECT * FROM log`,
			`INSERT INTO v VALUES (@event_id)`, "its table does not qualify"},
		{"an untyped literal the subquery cannot assign", `CREATE TABLE log (event_id uuid, at timestamptz)`,
			`INSERT INTO log VALUES (@event_id, '2024-01-01')`, "its batch form does not prepare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tc.ddl)
			h, p := b.prepared("t.log", tc.stmt)
			on, why := h.BatchMode()
			require.False(t, on)
			require.Contains(t, why, tc.why)
			b.processAll(p, events(t, 3, func(int) any { return `{}` }))
		})
	}
	// Enumerations, foreign keys to other tables, sequences and built-in
	// defaults are fine.
	b := setup(t, `CREATE TYPE st AS ENUM ('new', 'old'); CREATE TABLE parent (id int PRIMARY KEY); INSERT INTO parent VALUES (1);
		CREATE TABLE log (id bigserial PRIMARY KEY, event_id uuid NOT NULL DEFAULT gen_random_uuid(), s st NOT NULL DEFAULT 'new',
		p int REFERENCES parent, at timestamptz DEFAULT now(), CHECK (p > 0))`)
	h, p := b.prepared("t.log", `INSERT INTO log (event_id, p) VALUES (@event_id, 1)`)
	on, why := h.BatchMode()
	require.True(t, on, why)
	b.processAll(p, events(t, 5, func(int) any { return `{}` }))
	require.Equal(t, 5, b.count(`SELECT count(*) FROM log`))
}

// A table changed under a running handler (a statement trigger added, a
// default of the database's own) fails the batch form's guard at the next
// batch: that batch is replayed event by event and the next ones run
// statement by statement, so the trigger fires once per event, as it
// would have without the batch form.
func TestBatchFormGuard(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE log (event_id uuid); CREATE TABLE fired (n int);
		CREATE FUNCTION count_statement() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO fired VALUES (1); RETURN NULL; END$$`)
	h, p := b.prepared("t.log", `INSERT INTO log VALUES (@event_id)`)
	on, why := h.BatchMode()
	require.True(t, on, why)
	b.processAll(p, events(t, 10, func(int) any { return `{}` }))
	require.Equal(t, 10, b.count(`SELECT count(*) FROM log`))

	b.exec(`CREATE TRIGGER c AFTER INSERT ON log FOR EACH STATEMENT EXECUTE FUNCTION count_statement()`)
	b.processAll(p, events(t, 10, func(int) any { return `{}` })) // guard fails: replayed event by event
	require.Equal(t, 20, b.count(`SELECT count(*) FROM log`))
	require.Equal(t, 10, b.count(`SELECT count(*) FROM fired`), "one statement per event")
	b.processAll(p, events(t, 10, func(int) any { return `{}` })) // statement by statement
	require.Equal(t, 20, b.count(`SELECT count(*) FROM fired`))
}

func TestBatchFormGuardDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE log (event_id uuid); CREATE TABLE calls (n int);
		CREATE FUNCTION next_n() RETURNS int LANGUAGE sql AS 'INSERT INTO calls VALUES (1) RETURNING (SELECT count(*)::int FROM log)'`)
	h, p := b.prepared("t.log", `INSERT INTO log (event_id) VALUES (@event_id)`)
	on, why := h.BatchMode()
	require.True(t, on, why)
	b.exec(`ALTER TABLE log ADD COLUMN n int DEFAULT next_n()`)
	b.processAll(p, events(t, 5, func(int) any { return `{}` }))
	// Statement by statement each default sees the rows before it.
	require.Equal(t, 5, b.count(`SELECT count(DISTINCT n) FROM log`))
}

func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }
