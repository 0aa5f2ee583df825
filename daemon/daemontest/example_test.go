package daemontest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon/daemontest"
)

// panicTB is the testing.TB an example hands to Work: it has no test, so
// a failure panics.
type panicTB struct{ testing.TB }

func (panicTB) Helper()                           {}
func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// reserve is a handler under test: one reservation per order, refused
// for good when the quantity is not positive.
func reserve(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
	var order struct {
		OrderID  uuid.UUID `json:"order_id"`
		Quantity int       `json:"quantity"`
	}
	if err := json.Unmarshal(ev.Payload, &order); err != nil {
		return consumer.Permanent(fmt.Errorf("payload: %w", err))
	}
	if order.Quantity <= 0 {
		return consumer.Permanent(errors.New("quantity must be positive"))
	}
	_, err := tx.Exec(ctx, `INSERT INTO reservation (order_id, quantity) VALUES ($1, $2)`, order.OrderID, order.Quantity)
	return err
}

// Work runs the real dedup step over one event in the test's own
// transaction: the test sees the handler's effects, a second delivery of
// the same event is a duplicate that never reaches the handler, a
// failing event is rolled back alone, and the test rolls everything back.
func Example_work() {
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		panic(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The service's tables; a real test runs against a database migrated
	// by `platformd migrate` (temporary tables here, gone with the
	// session).
	for _, ddl := range []string{
		`CREATE TEMP TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL)`,
		`CREATE TEMP TABLE reservation (order_id uuid NOT NULL, quantity int NOT NULL)`,
	} {
		if _, err := tx.Exec(ctx, ddl); err != nil {
			panic(err)
		}
	}
	reg := consumer.NewRegistry()
	reg.MustRegister(consumer.Registration{Name: "stock.reserve", Events: []string{"order.order.placed.v1"},
		Handler: consumer.HandlerFunc(reserve)})

	placed := func(id, payload string) consumer.Event {
		return consumer.Event{ID: uuid.MustParse(id), Name: "order.order.placed.v1",
			OccurredAt: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), Payload: json.RawMessage(payload)}
	}
	good := placed("01938f3e-1111-7aaa-8bbb-0123456789ab", `{"order_id": "11111111-1111-4111-8111-111111111111", "quantity": 2}`)
	bad := placed("01938f3e-2222-7aaa-8bbb-0123456789ab", `{"order_id": "11111111-1111-4111-8111-111111111111", "quantity": 0}`)
	reservations := func() int {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM reservation`).Scan(&n); err != nil {
			panic(err)
		}
		return n
	}

	res, err := daemontest.Work(panicTB{}, tx, reg, "stock.reserve", good)
	fmt.Println(res.Outcome, err, "reservations:", reservations())
	res, err = daemontest.Work(panicTB{}, tx, reg, "stock.reserve", good)
	fmt.Println(res.Outcome, err, "reservations:", reservations())
	res, err = daemontest.Work(panicTB{}, tx, reg, "stock.reserve", bad)
	fmt.Println(res.Outcome, err, "permanent:", res.Permanent, "error:", res.Err, "reservations:", reservations())
	// Output:
	// processed <nil> reservations: 1
	// duplicate <nil> reservations: 1
	// failed <nil> permanent: true error: quantity must be positive reservations: 1
}
