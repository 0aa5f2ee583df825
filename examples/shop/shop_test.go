package shop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/migrate"
	"github.com/platformd/platformd/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// shopDB returns a pool on a scratch database migrated for handler.
func shopDB(t *testing.T, handler string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	dsn := testdb.New(t, t.Name())
	sets, err := migrate.Sets(reg, []string{handler})
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{})
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func newProcessor(t *testing.T, handler string) (*dedup.Processor, func(q string, args ...any) []any) {
	t.Helper()
	ctx := context.Background()
	db := shopDB(t, handler)
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	routes, err := dedup.RoutesFor(reg, []string{handler})
	require.NoError(t, err)
	row := func(q string, args ...any) []any {
		rows, err := db.Query(ctx, q, args...)
		require.NoError(t, err)
		defer rows.Close()
		require.True(t, rows.Next())
		v, err := rows.Values()
		require.NoError(t, err)
		return v
	}
	return dedup.NewProcessor(db, dedup.ProcessorConfig{Routes: routes}), row
}

func event(t *testing.T, name string, payload any) consumer.Event {
	b, err := json.Marshal(payload)
	require.NoError(t, err)
	return consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: name, OccurredAt: time.Now(), Payload: b}
}

// Shipping versions arriving 3, 1, 2, 3: version 3 kept (seed, step 6).
func TestTrackStatusAppliesOnlyNewerVersions(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerShippingTrack)
	order := uuid.New()
	statuses := map[int32]string{1: "placed", 2: "paid", 3: "shipped"}
	for _, v := range []int32{3, 1, 2, 3} {
		// Each is a distinct event (a new id): the version check, not the
		// dedup table, keeps the newest state.
		ev := event(t, shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: order, Status: statuses[v], Version: v})
		rs, err := p.Process(context.Background(), []consumer.Event{ev})
		require.NoError(t, err)
		require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
	}
	got := row(`SELECT status, version FROM order_status WHERE order_id = $1`, order)
	require.Equal(t, "shipped", got[0])
	require.EqualValues(t, 3, got[1])
}

func TestReserveInsertsOneRowPerLine(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerStockReserve)
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{
		{ProductID: uuid.New(), Quantity: "2.000"}, {ProductID: uuid.New(), Quantity: "0.5"},
	}}
	rs, err := p.Process(context.Background(), []consumer.Event{event(t, shop.EventOrderPlaced, o)})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	got := row(`SELECT count(*), sum(quantity)::text FROM reservation WHERE order_id = $1`, o.OrderID)
	require.EqualValues(t, 2, got[0])
	require.Equal(t, "2.500", got[1])
	// Reservation ids are time-ordered UUID v7: the key's index grows at
	// its right edge.
	got = row(`SELECT count(*) FILTER (WHERE substr(id::text, 15, 1) = '7') FROM reservation WHERE order_id = $1`, o.OrderID)
	require.EqualValues(t, 2, got[0])
}

// Payloads of the wrong shape are permanent failures: no retry can fix them.
func TestPayloadErrorsArePermanent(t *testing.T) {
	t.Parallel()
	p, _ := newProcessor(t, shop.HandlerStockReserve)
	for _, raw := range []string{
		`{"order_id": 12, "customer_id": "x", "lines": []}`,
		`{"order_id": "` + uuid.NewString() + `", "customer_id": "` + uuid.NewString() + `", "lines": []}`,
		`{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "-1"}]}`,
		`{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": 2}]}`,
		`{"order_id": "` + uuid.NewString() + `", "extra": 1, "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`,
		`{"Order_ID": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`,
		`{"order_id": "` + uuid.NewString() + `", "order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`,
		`{"order_id": "` + uuid.NewString() + `", "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]} {}`,
		`{"order_id": null, "lines": [{"product_id": "` + uuid.NewString() + `", "quantity": "1"}]}`,
	} {
		ev := consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, Payload: json.RawMessage(raw)}
		rs, err := p.Process(context.Background(), []consumer.Event{ev})
		require.NoError(t, err)
		require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome, raw)
		require.True(t, rs[0].Permanent, raw)
	}
}

// The same versions arriving in ONE batch (the batch upsert): version 3
// kept, and the first of equal versions wins as it would one by one.
func TestTrackStatusBatch(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerShippingTrack)
	order, other := uuid.New(), uuid.New()
	var evs []consumer.Event
	for _, v := range []int32{3, 1, 2, 3} {
		evs = append(evs, event(t, shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: order, Status: fmt.Sprintf("s%d-%d", v, len(evs)), Version: v}))
	}
	evs = append(evs, event(t, shop.EventOrderStatusChanged, shop.OrderStatusChanged{OrderID: other, Status: "placed", Version: 1}))
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	for _, r := range rs {
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "%v", r.Err)
	}
	got := row(`SELECT status, version FROM order_status WHERE order_id = $1`, order)
	require.Equal(t, "s3-0", got[0])
	require.EqualValues(t, 3, got[1])
	got = row(`SELECT status FROM order_status WHERE order_id = $1`, other)
	require.Equal(t, "placed", got[0])
}

// One bad payload in a batch of 100 makes the batch insert fail; the batch
// is replayed event by event and only that event fails, permanently.
func TestReserveBatchWithOneBadPayload(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerStockReserve)
	var evs []consumer.Event
	for i := range 100 {
		if i == 50 {
			evs = append(evs, consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, Payload: json.RawMessage(`{"order_id": 1}`)})
			continue
		}
		evs = append(evs, event(t, shop.EventOrderPlaced, shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(),
			Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "1"}, {ProductID: uuid.New(), Quantity: "2"}}}))
	}
	rs, err := p.Process(context.Background(), evs)
	require.NoError(t, err)
	for i, r := range rs {
		if i == 50 {
			require.Equal(t, dedup.OutcomeFailed, r.Outcome)
			require.True(t, r.Permanent)
			continue
		}
		require.Equal(t, dedup.OutcomeProcessed, r.Outcome, "event %d: %v", i, r.Err)
	}
	require.EqualValues(t, 198, row(`SELECT count(*) FROM reservation`)[0])
	require.EqualValues(t, 99, row(`SELECT count(*) FROM processed_event`)[0])
	require.EqualValues(t, 0, row(`SELECT count(*) FROM processed_event WHERE event_id = $1`, evs[50].ID)[0])
}

// Quantities are what numeric(12,3) holds: 1 to 9 digits, then optionally
// a dot and 1 to 3 digits, and not zero.
func TestOrderPlacedValidateQuantity(t *testing.T) {
	t.Parallel()
	for q, ok := range map[string]bool{
		"1": true, "2.000": true, "0.5": true, "123456789.123": true, "0.001": true,
		"": false, "0": false, "0.000": false, "-1": false, "+1": false, ".5": false, "1.": false,
		"1.2345": false, "1234567890": false, "1e3": false, " 1": false, "1,5": false, "1.2.3": false,
	} {
		o := shop.OrderPlaced{OrderID: uuid.New(), Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: q}}}
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("quantity %q: Validate() = %v, want valid=%v", q, err, ok)
		}
	}
}

// HandleBatch has exactly the effects of Handle applied event by event in
// order, on batches full of repeated orders: versions up and down, equal
// versions with different statuses (the first of them wins), against rows
// that are already newer or older.
func TestTrackStatusBatchEqualsOneByOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	byBatch, oneByOne := shopDB(t, shop.HandlerShippingTrack), shopDB(t, shop.HandlerShippingTrack)
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	r, err := reg.Lookup(shop.HandlerShippingTrack)
	require.NoError(t, err)
	h := r.Handler.(consumer.BatchHandler)
	rng := rand.New(rand.NewPCG(1, 2))
	orders := make([]uuid.UUID, 7)
	for i := range orders {
		orders[i] = uuid.New()
	}
	for batch := range 40 {
		evs := make([]consumer.Event, 1+rng.IntN(30))
		for i := range evs {
			evs[i] = event(t, shop.EventOrderStatusChanged, shop.OrderStatusChanged{
				OrderID: orders[rng.IntN(len(orders))], Status: fmt.Sprintf("s%d-%d", batch, i), Version: int32(1 + rng.IntN(12)),
			})
		}
		require.NoError(t, pgx.BeginFunc(ctx, byBatch, func(tx pgx.Tx) error { return h.HandleBatch(ctx, tx, evs) }))
		require.NoError(t, pgx.BeginFunc(ctx, oneByOne, func(tx pgx.Tx) error {
			for _, ev := range evs {
				if err := h.Handle(ctx, tx, ev); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	dump := func(db *pgxpool.Pool) []string {
		rows, err := db.Query(ctx, `SELECT order_id::text || ' ' || status || ' ' || version FROM order_status ORDER BY order_id`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	require.Len(t, dump(byBatch), len(orders))
	require.Equal(t, dump(oneByOne), dump(byBatch))
}
