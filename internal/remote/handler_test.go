package remote_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/remote"
	"github.com/platformd/platformd/internal/sqlhandler"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/migrations"
)

func TestMain(m *testing.M) {
	if runBenchHandler() { // the benchmark's handler process
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

const placed = "order.order.placed.v1"

const invoiceDDL = `CREATE TABLE invoice (
    order_id uuid PRIMARY KEY, customer_id uuid, total numeric NOT NULL, note text,
    event_id uuid NOT NULL, opened_at timestamptz NOT NULL)`

// statements are the billing handler's.
var statements = map[string]string{
	"open_invoice": `INSERT INTO invoice (order_id, customer_id, total, event_id, opened_at)
VALUES (@order_id::uuid, @customer_id::uuid, @total::numeric, @event_id, @occurred_at)`,
	"note": `UPDATE invoice SET note = @note WHERE order_id = @order_id::uuid`,
}

// call is one request the test server received.
type call struct {
	body    []byte
	header  http.Header
	remote  string // the client's address: one per connection
	request struct {
		Service string `json:"service"`
		Handler string `json:"handler"`
		Events  []struct {
			EventID    string          `json:"event_id"`
			EventName  string          `json:"event_name"`
			OccurredAt string          `json:"occurred_at"`
			Payload    json.RawMessage `json:"payload"`
			Attempt    int             `json:"attempt"`
			RoutingKey string          `json:"routing_key"`
			Replay     bool            `json:"replay"`
		} `json:"events"`
	}
}

// bundle is a test's database, handler process and processor.
type bundle struct {
	t   *testing.T
	dsn string
	db  *pgxpool.Pool
	srv *httptest.Server

	mu    sync.Mutex
	calls []call
	// answer writes the answer to one call (default: answerAll).
	answer func(w http.ResponseWriter, c call)
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	b := &bundle{t: t, dsn: testdb.New(t, t.Name())}
	require.NoError(t, migrate.Apply(ctx, b.dsn, []migrate.Set{{Name: migrate.PlatformSetName, FS: migrations.Platform()}},
		slog.New(slog.DiscardHandler)))
	db, err := dedup.Connect(ctx, b.dsn, dedup.ConnectConfig{})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	b.db = db
	_, err = db.Exec(ctx, invoiceDDL)
	require.NoError(t, err)
	b.answer = b.answerAll
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c call
		c.body, _ = io.ReadAll(r.Body)
		c.header = r.Header.Clone()
		c.remote = r.RemoteAddr
		if err := json.Unmarshal(c.body, &c.request); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.calls = append(b.calls, c)
		answer := b.answer
		b.mu.Unlock()
		answer(w, c)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

// answerAll opens an invoice for every event, its total as the payload
// has it (a number or a string), and publishes one message.
func (b *bundle) answerAll(w http.ResponseWriter, c call) {
	var results []string
	for _, ev := range c.request.Events {
		results = append(results, b.okResult(ev.EventID, ev.Payload))
	}
	_, _ = io.WriteString(w, `{"results": [`+strings.Join(results, ",")+`]}`)
}

// okResult is the result that opens the invoice of payload.
func (b *bundle) okResult(id string, payload json.RawMessage) string {
	var p struct {
		OrderID    string          `json:"order_id"`
		CustomerID string          `json:"customer_id"`
		Total      json.RawMessage `json:"total"`
	}
	require.NoError(b.t, json.Unmarshal(payload, &p))
	return `{"event_id": "` + id + `", "effects": [{"statement": "open_invoice", "args": {"order_id": "` + p.OrderID +
		`", "customer_id": "` + p.CustomerID + `", "total": ` + string(p.Total) + `}}],
		"publish": [{"event_name": "billing.invoice.opened.v1", "payload": {"order_id": "` + p.OrderID + `", "total": ` + string(p.Total) + `}, "headers": {"x-team": "billing"}}]}`
}

func (b *bundle) handler(mut ...func(*remote.Config)) *remote.Handler {
	b.t.Helper()
	cfg := remote.Config{Service: "billing", Name: "billing.open_invoice", URL: b.srv.URL + "/handle", Timeout: 2 * time.Second,
		Headers: map[string]string{"Authorization": "Bearer secret"}, Statements: statements}
	for _, m := range mut {
		m(&cfg)
	}
	h, err := remote.New(cfg)
	require.NoError(b.t, err)
	b.t.Cleanup(h.Close)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(b.t, err)
	defer conn.Close(ctx)
	require.NoError(b.t, h.Prepare(ctx, conn.PgConn()))
	return h
}

func (b *bundle) processor(hs ...dedup.Route) *dedup.Processor {
	return dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: map[string][]dedup.Route{placed: hs}})
}

func (b *bundle) callCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func (b *bundle) lastCall() call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[len(b.calls)-1]
}

func (b *bundle) count(q string, args ...any) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.db.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

// event returns an order.order.placed.v1 event whose payload is raw
// JSON, total as given.
func event(total string) consumer.Event {
	raw := `{"order_id": "` + uuid.NewString() + `", "customer_id":"` + uuid.NewString() + `" , "total": ` + total + `}`
	return consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: placed, OccurredAt: time.Now().UTC().Truncate(time.Microsecond),
		Payload: json.RawMessage(raw), Delivery: consumer.Delivery{RoutingKey: placed}}
}

func orderID(t *testing.T, ev consumer.Event) string {
	var p struct {
		OrderID string `json:"order_id"`
	}
	require.NoError(t, json.Unmarshal(ev.Payload, &p))
	return p.OrderID
}

// One call per batch with its new events, payloads byte for byte; the
// effects and outbox rows commit with the processed_event rows; numbers
// keep their text; a duplicate never reaches the handler.
func TestBatchCallAppliesEffects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.handler()
	require.Equal(t, []string{"open_invoice"}, h.BatchStatements(), "an INSERT of VALUES runs once per batch; the UPDATE event by event")
	p := b.processor(dedup.Route{Name: h.Name(), Handler: h})
	evs := []consumer.Event{event(`12.50`), event(`"0.10"`), event(`1e2`), event(`123456789012345678901234567890.000000001`)}
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	for i, r := range rs {
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
	}
	require.Equal(t, 1, b.callCount(), "one call for the batch")
	c := b.lastCall()
	require.Equal(t, "billing", c.request.Service)
	require.Equal(t, "billing.open_invoice", c.request.Handler)
	require.Equal(t, "Bearer secret", c.header.Get("Authorization"))
	require.Equal(t, "application/json", c.header.Get("Content-Type"))
	require.Len(t, c.request.Events, len(evs))
	for i, ev := range c.request.Events {
		require.Equal(t, evs[i].ID.String(), ev.EventID, "delivery order")
		require.Equal(t, string(evs[i].Payload), string(ev.Payload), "payload byte for byte")
		require.Contains(t, string(c.body), string(evs[i].Payload))
		require.Equal(t, placed, ev.EventName)
		require.Equal(t, placed, ev.RoutingKey)
		require.Equal(t, 0, ev.Attempt)
		occurred, err := time.Parse(time.RFC3339Nano, ev.OccurredAt)
		require.NoError(t, err)
		require.True(t, occurred.Equal(evs[i].OccurredAt))
	}
	for i, want := range []string{"12.50", "0.10", "1e2", "123456789012345678901234567890.000000001"} {
		var total, eventID string
		require.NoError(t, b.db.QueryRow(context.Background(), `SELECT total::text, event_id::text FROM invoice WHERE order_id = $1`,
			orderID(t, evs[i])).Scan(&total, &eventID))
		if want == "1e2" {
			want = "100"
		}
		require.Equal(t, want, total, "the number's text reaches PostgreSQL")
		require.Equal(t, evs[i].ID.String(), eventID, "@event_id is the event's")
	}
	require.Equal(t, len(evs), b.count(`SELECT count(*) FROM platform.outbox WHERE event_name = 'billing.invoice.opened.v1' AND headers->>'x-team' = 'billing'`))
	var payload string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT payload->>'total' FROM platform.outbox WHERE payload->>'order_id' = $1`, orderID(t, evs[0])).Scan(&payload))
	require.Equal(t, "12.50", payload, "the published payload keeps its digits")

	// The same events again, with a new one: only the new one is asked.
	fresh := event(`7`)
	rs, err = p.Process(context.Background(), append(evs, fresh))
	require.NoError(t, err)
	for i := range evs {
		require.Equal(t, dedup.OutcomeDuplicate, rs[i].Outcome)
	}
	require.Equal(t, dedup.OutcomeProcessed, rs[len(evs)].Outcome)
	require.Equal(t, 2, b.callCount())
	require.Len(t, b.lastCall().request.Events, 1, "a duplicate never reaches the handler")
	require.Equal(t, fresh.ID.String(), b.lastCall().request.Events[0].EventID)

	// All duplicates: no call at all.
	_, err = p.Process(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, 2, b.callCount())
}

// A result's error fails its event alone: permanent when it says so,
// retried otherwise; the replay applies the others from the same answer,
// without asking again.
func TestPerEventErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := []consumer.Event{event(`1`), event(`2`), event(`3`)}
	b.answer = func(w http.ResponseWriter, c call) {
		var results []string
		for _, ev := range c.request.Events {
			switch ev.EventID {
			case evs[1].ID.String():
				results = append(results, `{"event_id": "`+ev.EventID+`", "error": "quantity must be positive", "permanent": true}`)
			case evs[2].ID.String():
				results = append(results, `{"event_id": "`+ev.EventID+`", "error": "stock service busy"}`)
			default:
				results = append(results, b.okResult(ev.EventID, ev.Payload))
			}
		}
		_, _ = io.WriteString(w, `{"results": [`+strings.Join(results, ",")+`]}`)
	}
	h := b.handler()
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	require.Equal(t, dedup.OutcomeFailed, rs[1].Outcome)
	require.True(t, rs[1].Permanent)
	require.EqualError(t, rs[1].Err, "quantity must be positive")
	require.Equal(t, dedup.OutcomeFailed, rs[2].Outcome)
	require.False(t, rs[2].Permanent)
	require.EqualError(t, rs[2].Err, "stock service busy")
	require.Equal(t, 1, b.callCount(), "the replay reuses the answer")
	require.Equal(t, 1, b.count(`SELECT count(*) FROM invoice`))
	require.Equal(t, 1, b.count(`SELECT count(*) FROM processed_event`))
	require.Equal(t, 1, b.count(`SELECT count(*) FROM platform.outbox`))
}

// A handler after the remote one failing makes the dedup step replay the
// batch event by event: the remote handler's answers are applied again
// from the batch's scope, never asked twice.
func TestReplayReusesAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.handler()
	evs := []consumer.Event{event(`1`), event(`2`), event(`3`)}
	failing := consumer.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev consumer.Event) error {
		if ev.ID == evs[1].ID {
			return consumer.Permanent(io.ErrUnexpectedEOF)
		}
		return nil
	})
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}, dedup.Route{Name: "after", Handler: failing}).Process(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
	require.Equal(t, dedup.OutcomeFailed, rs[1].Outcome)
	require.Equal(t, dedup.OutcomeProcessed, rs[2].Outcome)
	require.Equal(t, 1, b.callCount(), "one answer per event per attempt")
	require.Equal(t, 2, b.count(`SELECT count(*) FROM invoice`))
	require.Equal(t, 2, b.count(`SELECT count(*) FROM platform.outbox`))
}

// Every bad answer with the contract's outcome: a poison event fails
// alone, the other event of its batch commits.
func TestBadAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		// poison is the poison event's result, or (whole) the whole body of
		// a call that holds it.
		poison    func(id string) string
		whole     bool
		permanent bool
		err       string
		calls     int
	}{
		{"NotJSON", func(string) string { return `<html>oops</html>` }, true, false, "bad answer: not the contract's JSON", 3},
		{"MissingResult", func(string) string { return `{"results": []}` }, true, false, "bad answer: no result for event", 3},
		{"ExtraResult", func(id string) string {
			return `{"results": [{"event_id": "` + id + `", "effects": []}, {"event_id": "` + uuid.NewString() + `", "effects": []}]}`
		}, true, false, "was not in the call", 3},
		{"NoResults", func(string) string { return `{"answers": []}` }, true, false, `bad answer: no "results" array`, 3},
		{"Status500", nil, true, false, "bad answer: status 500", 3},
		{"UnknownStatement", func(id string) string {
			return `{"event_id": "` + id + `", "effects": [{"statement": "drop_all", "args": {}}]}`
		}, false, true, `unknown statement "drop_all"`, 1},
		{"MissingArg", func(id string) string {
			return `{"event_id": "` + id + `", "effects": [{"statement": "note", "args": {"order_id": "` + uuid.NewString() + `"}}]}`
		}, false, true, `statement note needs arg "note"`, 1},
		{"ExtraArg", func(id string) string {
			return `{"event_id": "` + id + `", "effects": [{"statement": "note", "args": {"order_id": "` + uuid.NewString() + `", "note": "x", "event_id": "` + uuid.NewString() + `"}}]}`
		}, false, true, `statement note takes no arg "event_id"`, 1},
		{"DataException22", func(id string) string {
			return `{"event_id": "` + id + `", "effects": [{"statement": "open_invoice", "args": {"order_id": "` + uuid.NewString() + `", "customer_id": null, "total": "twelve"}}]}`
		}, false, true, "22P02", 1},
		{"IntegrityViolation23", func(id string) string {
			return `{"event_id": "` + id + `", "effects": [{"statement": "open_invoice", "args": {"order_id": "` + uuid.NewString() + `", "customer_id": null, "total": null}}]}`
		}, false, true, "23502", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			good, poison := event(`5`), event(`6`)
			b.answer = func(w http.ResponseWriter, c call) {
				var results []string
				for _, ev := range c.request.Events {
					if ev.EventID != poison.ID.String() {
						results = append(results, b.okResult(ev.EventID, ev.Payload))
						continue
					}
					if tt.name == "Status500" {
						http.Error(w, "boom", http.StatusInternalServerError)
						return
					}
					if tt.whole {
						_, _ = io.WriteString(w, tt.poison(ev.EventID))
						return
					}
					results = append(results, tt.poison(ev.EventID))
				}
				_, _ = io.WriteString(w, `{"results": [`+strings.Join(results, ",")+`]}`)
			}
			h := b.handler()
			rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{good, poison})
			require.NoError(t, err)
			require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
			require.Equal(t, dedup.OutcomeFailed, rs[1].Outcome)
			require.Equal(t, tt.permanent, rs[1].Permanent, "%v", rs[1].Err)
			require.ErrorContains(t, rs[1].Err, tt.err)
			require.Equal(t, tt.calls, b.callCount())
			if tt.whole {
				require.Len(t, b.lastCall().request.Events, 1, "after a bad answer, one event per call")
			}
			require.Equal(t, 1, b.count(`SELECT count(*) FROM invoice`))
			require.Equal(t, 1, b.count(`SELECT count(*) FROM processed_event`))
		})
	}
}

// Args bind as the contract says: strings as their value, numbers and
// booleans as their text, objects and arrays as their JSON text, null as
// NULL; the event's own fields keep their types.
func TestArgBinding(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.db.Exec(context.Background(), `CREATE TABLE seen (s text, n text, t text, o jsonb, a jsonb, z text, ev uuid, att int, rk text)`)
	require.NoError(t, err)
	b.answer = func(w http.ResponseWriter, c call) {
		_, _ = io.WriteString(w, `{"results": [{"event_id": "`+c.request.Events[0].EventID+`", "effects": [{"statement": "seen",
			"args": {"s": "a \"quoted\" é", "n": -0.500e+3, "t": true, "o": {"k": [1, 2.50]}, "a": [], "z": null}}]}]}`)
	}
	h := b.handler(func(c *remote.Config) {
		c.Statements = map[string]string{"seen": `INSERT INTO seen VALUES (@s, @n, @t, @o::jsonb, @a::jsonb, @z, @event_id, @attempt, @routing_key)`}
	})
	ev := event(`1`)
	ev.Attempt = 2
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	var s, n, tt, o, a, rk string
	var z *string
	var id uuid.UUID
	var att int
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT s, n, t, o->'k'->>1, a::text, z, ev, att, rk FROM seen`).Scan(&s, &n, &tt, &o, &a, &z, &id, &att, &rk))
	require.Equal(t, `a "quoted" é`, s)
	require.Equal(t, "-0.500e+3", n)
	require.Equal(t, "true", tt)
	require.Equal(t, "2.50", o, "an object's JSON text, numbers as written")
	require.Equal(t, "[]", a)
	require.Nil(t, z)
	require.Equal(t, ev.ID, id)
	require.Equal(t, 2, att)
	require.Equal(t, placed, rk)
	require.Equal(t, 2, b.lastCall().request.Events[0].Attempt)
}

// A statement naming a missing column does not prepare: the error names
// the statement and carries PostgreSQL's message.
func TestPrepareRefusesWrongColumn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h, err := remote.New(remote.Config{Service: "billing", Name: "billing.x", URL: b.srv.URL,
		Statements: map[string]string{"good": statements["note"], "open": `INSERT INTO invoice (order_id, totl) VALUES (@order_id::uuid, @total::numeric)`}})
	require.NoError(t, err)
	defer h.Close()
	conn, err := pgx.Connect(context.Background(), b.dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	err = h.Prepare(context.Background(), conn.PgConn())
	var serr *remote.StatementError
	require.ErrorAs(t, err, &serr)
	require.Equal(t, "open", serr.Name)
	require.ErrorContains(t, err, `42703 column "totl" of relation "invoice" does not exist`)
}

// Go, SQL and remote handlers mix in one pool and run in its order: a
// SQL handler opens the invoice, the remote handler's statement notes it
// (it sees the SQL handler's row), a Go handler after them fails one
// event, which alone rolls back: the others keep all three effects.
func TestMixedHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	evs := []consumer.Event{event(`1`), event(`2`), event(`3`)}
	b.answer = func(w http.ResponseWriter, c call) {
		var results []string
		for _, ev := range c.request.Events {
			var p struct {
				OrderID string `json:"order_id"`
			}
			require.NoError(t, json.Unmarshal(ev.Payload, &p))
			results = append(results, `{"event_id": "`+ev.EventID+`", "effects": [{"statement": "note", "args": {"order_id": "`+p.OrderID+`", "note": "noted"}}]}`)
		}
		_, _ = io.WriteString(w, `{"results": [`+strings.Join(results, ",")+`]}`)
	}
	open, err := sqlhandler.New("billing.open_sql", []string{`INSERT INTO invoice (order_id, customer_id, total, event_id, opened_at)
VALUES ((@payload->>'order_id')::uuid, (@payload->>'customer_id')::uuid, (@payload->>'total')::numeric, @event_id, @occurred_at)`})
	require.NoError(t, err)
	remoteH := b.handler()
	last := consumer.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev consumer.Event) error {
		if ev.ID == evs[1].ID {
			return consumer.Permanent(io.ErrUnexpectedEOF)
		}
		return nil
	})
	p := b.processor(dedup.Route{Name: "billing.open_sql", Handler: open}, dedup.Route{Name: remoteH.Name(), Handler: remoteH},
		dedup.Route{Name: "billing.last", Handler: last})
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	require.Equal(t, dedup.OutcomeFailed, rs[1].Outcome)
	require.Equal(t, "billing.last", rs[1].Handler)
	require.Equal(t, dedup.OutcomeProcessed, rs[2].Outcome)
	require.Equal(t, 2, b.count(`SELECT count(*) FROM invoice WHERE note = 'noted'`), "the remote statement ran after the SQL handler's")
	require.Equal(t, 2, b.count(`SELECT count(*) FROM invoice`))
	require.Equal(t, 1, b.callCount(), "asked once, replay included")
}

// A table changed since start (a trigger added) fails the batch form's
// guard: the batch is replayed event by event with the same answers,
// every effect applied once, and the statement runs event by event for a
// while.
func TestBatchFormGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.handler()
	require.Equal(t, []string{"open_invoice"}, h.BatchStatements())
	_, err := b.db.Exec(context.Background(), `CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER audit BEFORE INSERT ON invoice FOR EACH ROW EXECUTE FUNCTION audit()`)
	require.NoError(t, err)
	evs := []consumer.Event{event(`1`), event(`2`), event(`3`)}
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), evs)
	require.NoError(t, err)
	for _, r := range rs {
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "%v", r.Err)
	}
	require.Equal(t, 3, b.count(`SELECT count(*) FROM invoice`))
	require.Equal(t, 1, b.callCount())
	require.Empty(t, h.BatchStatements(), "off for a while after its guard failed")
}
