package shop_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
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

func newProcessor(t *testing.T, handler string) (*dedup.Processor, func(q string, args ...any) []any) {
	t.Helper()
	ctx := context.Background()
	reg := consumer.NewRegistry()
	require.NoError(t, shop.Register(reg))
	dsn := testdb.New(t, t.Name())
	sets, err := migrate.Sets(reg, []string{handler})
	require.NoError(t, err)
	require.NoError(t, migrate.Apply(ctx, dsn, sets, slog.New(slog.NewTextHandler(io.Discard, nil))))
	db, err := dedup.Connect(ctx, dsn, dedup.PoolConfig{})
	require.NoError(t, err)
	t.Cleanup(db.Close)
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
	} {
		ev := consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: shop.EventOrderPlaced, Payload: json.RawMessage(raw)}
		rs, err := p.Process(context.Background(), []consumer.Event{ev})
		require.NoError(t, err)
		require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome, raw)
		require.True(t, rs[0].Permanent, raw)
	}
}
