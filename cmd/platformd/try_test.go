package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/failure"
	"github.com/platformd/platformd/internal/testdb"
)

// tryReport is the part of `platformd try -o json`'s document the tests
// read (docs/remote-handlers.md describes it whole).
type tryReport struct {
	Service, Pool, Handler, Kind, Outcome string
	WouldApply                            bool `json:"would_apply"`
	RolledBack                            bool `json:"rolled_back"`
	Event                                 *struct {
		EventID   string `json:"event_id"`
		FailureID string `json:"failure_id"`
	}
	Error *struct {
		Class, Reason, Settlement, Handler, Message, SQLState string
	}
	Effects []struct {
		Handler, Statement, SQL, Command, Error string
		Args                                    []string
		Rows                                    int64
	}
	Outbox []struct {
		EventID   string          `json:"event_id"`
		EventName string          `json:"event_name"`
		Payload   json.RawMessage `json:"payload"`
	}
	Calls []struct {
		URL      string
		Status   int
		Request  json.RawMessage
		Answer   json.RawMessage
		Error    string
		Problems []string
	}
	Notes []string
}

// tryCmd runs `platformd try` with env and args; it returns stdout,
// stderr and the exit code.
func tryCmd(t *testing.T, env []string, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"try"}, args...)...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// tryBoth runs try with args twice, as text and as JSON, asserting that
// both exit with code; it returns the text and the decoded document.
func tryBoth(t *testing.T, env []string, stdin []byte, code int, args ...string) (string, tryReport) {
	t.Helper()
	text, stderr, got := tryCmd(t, env, stdin, args...)
	require.Equal(t, code, got, "text: %s\nstderr: %s", text, stderr)
	js, stderr, got := tryCmd(t, env, stdin, append(args, "-o", "json")...)
	require.Equal(t, code, got, "json: %s\nstderr: %s", js, stderr)
	var rep tryReport
	require.NoError(t, json.Unmarshal([]byte(js), &rep), js)
	require.True(t, rep.RolledBack)
	return text, rep
}

// dbState is every row of some tables, as one fingerprint per table
// (row count and an md5 of the rows in order): a try must leave it equal.
func dbState(t *testing.T, dsn string, tables ...string) map[string]string {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dsn)
	require.NoError(t, err)
	defer db.Close()
	out := map[string]string{}
	for _, table := range tables {
		var n int
		var sum *string
		require.NoError(t, db.QueryRow(context.Background(),
			fmt.Sprintf(`SELECT count(*), md5(string_agg(r::text, '|' ORDER BY r::text)) FROM %s r`, table)).Scan(&n, &sum))
		out[table] = fmt.Sprintf("%d rows, md5 %v", n, deref(sum))
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// orderPlaced is an order.order.placed.v1 envelope with a fresh UUID v7
// id and the given payload.
func orderPlaced(t *testing.T, payload string) (uuid.UUID, []byte) {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	return id, []byte(fmt.Sprintf(`{"event_id":%q,"event_name":"order.order.placed.v1","occurred_at":%q,"payload":%s}`,
		id, time.Now().UTC().Format(time.RFC3339Nano), payload))
}

func writeFile(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "event.json")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

const goodOrder = `{"order_id":"11111111-1111-4111-8111-111111111111","customer_id":"22222222-2222-4222-8222-222222222222",` +
	`"lines":[{"product_id":"33333333-3333-4333-8333-333333333333","quantity":"2.000"},{"product_id":"44444444-4444-4444-8444-444444444444","quantity":"1.500"}]}`

// platformd try over examples/shop-sql's SQL handlers, against a migrated
// stock database holding rows of its own: a good event would insert two
// reservations (and the announcing handler one outbox row), a payload
// missing order_id fails the NOT NULL constraint (23502: permanent), a
// duplicate is skipped unless -ignore-processed, a stored failure is
// tried by its id, and the database is the same after each try.
func TestTrySQLHandlers(t *testing.T) {
	t.Parallel()
	cfg, err := filepath.Abs(filepath.Join("..", "..", "examples", "shop-sql", "platformd.yaml"))
	require.NoError(t, err)
	stock := testdb.New(t, "e2e_try_stock")
	env := append(os.Environ(), "PLATFORMD_ORDER_DB="+testdb.New(t, "e2e_try_order"), "PLATFORMD_STOCK_DB="+stock,
		"PLATFORMD_SHIPPING_DB="+testdb.New(t, "e2e_try_shipping"))
	out, err := runWithEnv(env, "migrate", "-config", cfg)
	require.NoError(t, err, out)
	// Rows of its own, which a try must leave as they are.
	seenID, seen := orderPlaced(t, goodOrder)
	db, err := pgxpool.New(context.Background(), stock)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(context.Background(), `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())`, seenID)
	require.NoError(t, err)
	_, err = db.Exec(context.Background(), `SELECT platform.publish('stock.stock.reserved.v1', '{"order_id":"x"}')`)
	require.NoError(t, err)
	_, poison := orderPlaced(t, `{"customer_id":"22222222-2222-4222-8222-222222222222","lines":[{"product_id":"33333333-3333-4333-8333-333333333333","quantity":"1"}]}`)
	stored, err := failure.NewStore(db).Write(context.Background(), []failure.Entry{{Pool: "stock-events", EventID: uuid.New(),
		EventName: "order.order.placed.v1", RoutingKey: "order.order.placed.v1", Body: poison, Reason: "permanent",
		State: failure.StateFailed, Error: "stock.reserve_sql: statement 1: 23502", Handler: "stock.reserve_sql"}})
	require.NoError(t, err)
	tables := []string{"reservation", "processed_event", "platform.outbox", "platform.failed_event"}
	before := dbState(t, stock, tables...)
	unchanged := func() { require.Equal(t, before, dbState(t, stock, tables...), "the try changed the database") }

	t.Run("good", func(t *testing.T) {
		id, good := orderPlaced(t, goodOrder)
		text, rep := tryBoth(t, env, nil, 0, "-config", cfg, "-handler", "stock.reserve_sql", "-event", writeFile(t, good))
		require.Contains(t, text, "handler  stock.reserve_sql (sql handler of service stock, as pool stock-events runs it)")
		require.Contains(t, text, "1. stock.reserve_sql statement 1: INSERT 0 2 (2 rows)")
		require.Contains(t, text, "result   WOULD APPLY")
		require.Contains(t, text, "rolled back: nothing was written")
		require.Equal(t, "processed", rep.Outcome)
		require.True(t, rep.WouldApply)
		require.Equal(t, id.String(), rep.Event.EventID)
		require.Len(t, rep.Effects, 1)
		require.Equal(t, int64(2), rep.Effects[0].Rows)
		require.Equal(t, "INSERT 0 2", rep.Effects[0].Command)
		require.Empty(t, rep.Outbox)
		unchanged()

		// The announcing handler writes through platform.publish: its row
		// is listed, and only its (not the row already there).
		text, rep = tryBoth(t, env, good, 0, "-config", cfg, "-handler", "stock.announce_reserved_sql", "-event", "-")
		require.Contains(t, text, "outbox   1\n  1. stock.stock.reserved.v1 ")
		require.Len(t, rep.Outbox, 1)
		require.Equal(t, "stock.stock.reserved.v1", rep.Outbox[0].EventName)
		require.JSONEq(t, `{"order_id":"11111111-1111-4111-8111-111111111111","customer_id":"22222222-2222-4222-8222-222222222222",`+
			`"lines":[{"product_id":"33333333-3333-4333-8333-333333333333","quantity":"2.000"},{"product_id":"44444444-4444-4444-8444-444444444444","quantity":"1.500"}]}`,
			string(rep.Outbox[0].Payload))
		unchanged()
	})

	t.Run("pool", func(t *testing.T) {
		// The pool's handlers in its order: the reservation, then the
		// announcement; a reservation that fails announces nothing.
		_, good := orderPlaced(t, goodOrder)
		text, rep := tryBoth(t, env, good, 0, "-config", cfg, "-pool", "stock-events", "-event", "-")
		require.Contains(t, text, "handlers stock.reserve_sql, stock.announce_reserved_sql (sql handlers of service stock, as pool stock-events runs them)")
		require.Contains(t, text, "  1. stock.reserve_sql statement 1: INSERT 0 2 (2 rows)\n")
		require.Contains(t, text, "  2. stock.announce_reserved_sql statement 1: SELECT 1 (1 row)\n")
		require.Len(t, rep.Outbox, 1)
		text, rep = tryBoth(t, env, poison, 1, "-config", cfg, "-handler", "stock.reserve_sql,stock.announce_reserved_sql", "-event", "-")
		require.Contains(t, text, "sqlstate 23502")
		require.Len(t, rep.Effects, 1, "the announcement did not run")
		require.Empty(t, rep.Outbox)
		unchanged()
	})

	t.Run("missing field is permanent", func(t *testing.T) {
		text, rep := tryBoth(t, env, nil, 1, "-config", cfg, "-handler", "stock.reserve_sql", "-event", writeFile(t, poison))
		require.Contains(t, text, "result   FAILS (permanent, reason permanent): the pool would store it in platform.failed_event at once")
		require.Contains(t, text, "sqlstate 23502")
		require.Contains(t, text, `1. stock.reserve_sql statement 1: ERROR `)
		require.Equal(t, "failed", rep.Outcome)
		require.False(t, rep.WouldApply)
		require.Equal(t, "permanent", rep.Error.Class)
		require.Equal(t, "permanent", rep.Error.Reason)
		require.Equal(t, "23502", rep.Error.SQLState)
		require.Equal(t, "stock.reserve_sql", rep.Error.Handler)
		require.Contains(t, rep.Error.Message, `stock.reserve_sql: statement 1: 23502 null value in column "order_id"`)
		require.Len(t, rep.Effects, 1)
		require.Contains(t, rep.Effects[0].Error, "23502")
		require.Empty(t, rep.Outbox)
		unchanged()
	})

	t.Run("duplicate", func(t *testing.T) {
		path := writeFile(t, seen)
		text, rep := tryBoth(t, env, nil, 0, "-config", cfg, "-handler", "stock.reserve_sql", "-event", path)
		require.Contains(t, text, "result   DUPLICATE")
		require.Equal(t, "duplicate", rep.Outcome)
		require.Empty(t, rep.Effects, "the handler did not run")
		text, rep = tryBoth(t, env, nil, 0, "-config", cfg, "-handler", "stock.reserve_sql", "-event", path, "-ignore-processed")
		require.Contains(t, text, "its processed_event row was deleted inside the transaction")
		require.Equal(t, "processed", rep.Outcome)
		require.Equal(t, int64(2), rep.Effects[0].Rows)
		unchanged()
	})

	t.Run("stored failure", func(t *testing.T) {
		_, rep := tryBoth(t, env, nil, 1, "-config", cfg, "-handler", "stock.reserve_sql", "-failure", stored[0].ID.String())
		require.Equal(t, stored[0].ID.String(), rep.Event.FailureID)
		require.Equal(t, "23502", rep.Error.SQLState)
		unchanged()
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"-config", cfg, "-event", "-"},                                                                // no handler
			{"-config", cfg, "-handler", "stock.reserve_sql"},                                              // no event
			{"-config", cfg, "-handler", "stock.reserve_sql", "-event", "-", "-failure", uuid.NewString()}, // both
			{"-config", cfg, "-handler", "nope", "-event", "-"},                                            // unknown handler
			{"-config", cfg, "-handler", "stock.reserve_sql", "-failure", uuid.NewString()},                // no such failure
			{"-config", cfg, "-handler", "stock.reserve_sql", "-event", "-", "-o", "yaml"},
		} {
			out, stderr, code := tryCmd(t, env, seen, args...)
			require.Equal(t, 2, code, "%v: %s %s", args, out, stderr)
			require.True(t, strings.HasPrefix(stderr, "platformd try: "), stderr)
		}
		unchanged()
	})
}

// platformd try over examples/billing-php's remote handler, served for
// real by PHP and by the Python example, against a migrated billing
// database: a good order's answer is shown raw, its statement applied
// (one invoice) and its outbox row listed; a poison order (a negative
// quantity) is the handler's permanent error; a statement that needs an
// arg the handler does not send is a permanent failure whose answer
// problems name the arg; the handler down is "unavailable" (connection
// refused: requeued, no attempt counted). The database is the same after
// each try.
func TestTryRemoteHandlers(t *testing.T) {
	t.Parallel()
	for _, lang := range []string{"php", "python"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			testTryRemote(t, lang)
		})
	}
}

func testTryRemote(t *testing.T, lang string) {
	url := startHandler(t, lang, filepath.Join(t.TempDir(), "asks.log"))
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "billing-php"))
	require.NoError(t, err)
	cfg := filepath.Join(dir, "platformd.yaml")
	dsn := testdb.New(t, "e2e_try_billing")
	env := append(os.Environ(), "PLATFORMD_BILLING_DB="+dsn, "BILLING_HANDLER_URL="+url)
	out, err := runWithEnv(env, "migrate", "-config", cfg)
	require.NoError(t, err, out)
	tables := []string{"invoice", "processed_event", "platform.outbox", "platform.failed_event"}
	before := dbState(t, dsn, tables...)
	unchanged := func() { require.Equal(t, before, dbState(t, dsn, tables...), "the try changed the database") }

	t.Run("good", func(t *testing.T) {
		id, good := orderPlaced(t, goodOrder)
		text, rep := tryBoth(t, env, good, 0, "-config", cfg, "-handler", "billing.open_invoice", "-event", "-")
		require.Contains(t, text, "handler  billing.open_invoice (remote handler of service billing, as pool billing-events runs it)")
		require.Contains(t, text, "call     POST "+url+" -> 200 in ")
		require.Regexp(t, `\n  answer  \{"results": ?\[\{"event_id": ?"`+id.String()+`"`, text, "the raw answer")
		require.Contains(t, text, "answer problems: none")
		require.Contains(t, text, "1. billing.open_invoice statement open_invoice: INSERT 0 1 (1 row)")
		require.Contains(t, text, "2. billing.open_invoice outbox: INSERT 0 1 (1 row)")
		require.Contains(t, text, "outbox   1\n  1. billing.invoice.opened.v1 ")
		require.Contains(t, text, "result   WOULD APPLY")
		require.Equal(t, "remote", rep.Kind)
		require.Equal(t, "processed", rep.Outcome)
		require.Len(t, rep.Calls, 1)
		require.Equal(t, 200, rep.Calls[0].Status)
		require.Empty(t, rep.Calls[0].Problems)
		require.Contains(t, string(rep.Calls[0].Request), id.String())
		var answer struct {
			Results []struct {
				EventID string `json:"event_id"`
			}
		}
		require.NoError(t, json.Unmarshal(rep.Calls[0].Answer, &answer))
		require.Len(t, answer.Results, 1)
		require.Equal(t, id.String(), answer.Results[0].EventID)
		require.Len(t, rep.Effects, 2)
		require.Equal(t, "statement open_invoice", rep.Effects[0].Statement)
		require.Equal(t, int64(1), rep.Effects[0].Rows)
		require.Equal(t, "outbox", rep.Effects[1].Statement)
		require.Len(t, rep.Outbox, 1)
		require.Equal(t, "billing.invoice.opened.v1", rep.Outbox[0].EventName)
		require.JSONEq(t, `{"order_id":"11111111-1111-4111-8111-111111111111","lines":2}`, string(rep.Outbox[0].Payload))
		unchanged()
	})

	t.Run("poison", func(t *testing.T) {
		_, poison := orderPlaced(t, `{"order_id":"11111111-1111-4111-8111-111111111111","customer_id":"22222222-2222-4222-8222-222222222222",`+
			`"lines":[{"product_id":"33333333-3333-4333-8333-333333333333","quantity":"-1"}]}`)
		text, rep := tryBoth(t, env, poison, 1, "-config", cfg, "-handler", "billing.open_invoice", "-event", "-")
		require.Contains(t, text, "result   FAILS (permanent, reason permanent)")
		require.Contains(t, text, "error    billing.open_invoice: quantity must be a positive decimal string")
		require.Equal(t, "permanent", rep.Error.Class)
		require.Equal(t, "billing.open_invoice: quantity must be a positive decimal string", rep.Error.Message)
		require.Empty(t, rep.Calls[0].Problems, "a result with its own error is of the contract's shape")
		require.Empty(t, rep.Effects)
		require.Empty(t, rep.Outbox)
		unchanged()
	})

	t.Run("statement missing an arg", func(t *testing.T) {
		src, err := os.ReadFile(cfg)
		require.NoError(t, err)
		const from = "            FROM jsonb_array_elements_text(@quantities::jsonb) AS q\n"
		require.Contains(t, string(src), from)
		edited := strings.Replace(string(src), from, from+"            WHERE @currency::text IS NOT NULL\n", 1)
		edited = strings.Replace(edited, "migrations: migrations\n", "migrations: "+filepath.Join(dir, "migrations")+"\n", 1)
		cfg2 := filepath.Join(t.TempDir(), "platformd.yaml")
		require.NoError(t, os.WriteFile(cfg2, []byte(edited), 0o600))
		_, good := orderPlaced(t, goodOrder)
		text, rep := tryBoth(t, env, good, 1, "-config", cfg2, "-handler", "billing.open_invoice", "-event", "-")
		require.Contains(t, text, `answer problem: results[0].effects[0]: statement open_invoice needs arg "currency"`)
		require.Contains(t, text, "result   FAILS (permanent, reason permanent)")
		require.Equal(t, []string{`results[0].effects[0]: statement open_invoice needs arg "currency"`}, rep.Calls[0].Problems)
		require.Equal(t, "permanent", rep.Error.Class)
		require.Contains(t, rep.Error.Message, `statement open_invoice needs arg "currency"`)
		unchanged()
	})

	t.Run("handler down", func(t *testing.T) {
		down := "http://" + freePort(t) + "/handle"
		env := append(os.Environ(), "PLATFORMD_BILLING_DB="+dsn, "BILLING_HANDLER_URL="+down)
		_, good := orderPlaced(t, goodOrder)
		text, rep := tryBoth(t, env, good, 1, "-config", cfg, "-handler", "billing.open_invoice", "-event", "-")
		require.Contains(t, text, "call     POST "+down+" -> no answer in ")
		require.Contains(t, text, "result   FAILS (unavailable): nothing applied and no attempt counted")
		require.Contains(t, text, "connection refused")
		require.Equal(t, "unavailable", rep.Error.Class)
		require.Empty(t, rep.Error.Reason)
		require.Len(t, rep.Calls, 1)
		require.Zero(t, rep.Calls[0].Status)
		require.Contains(t, rep.Calls[0].Error, "connection refused")
		require.Empty(t, rep.Effects)
		unchanged()
	})
}
