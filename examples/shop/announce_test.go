package shop_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/examples/shop"
	"github.com/platformd/platformd/internal/dedup"
)

// The announcement is written once per event, in the batch's transaction:
// a duplicate delivery writes no second row.
func TestAnnounceReservedWritesTheOutboxOnce(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerStockAnnounce)
	o := shop.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{{ProductID: uuid.New(), Quantity: "2.500"}}}
	ev := event(t, shop.EventOrderPlaced, o)
	for _, want := range []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeDuplicate} {
		rs, err := p.Process(context.Background(), []consumer.Event{ev})
		require.NoError(t, err)
		require.Equal(t, want, rs[0].Outcome)
	}
	got := row(`SELECT count(*), min(event_name), min(payload::text) FROM platform.outbox`)
	require.EqualValues(t, 1, got[0])
	require.Equal(t, shop.EventStockReserved, got[1])
	var r shop.StockReserved
	require.NoError(t, json.Unmarshal([]byte(got[2].(string)), &r))
	require.Equal(t, shop.StockReserved(o), r)

	bad := event(t, shop.EventOrderPlaced, map[string]any{"order_id": uuid.New()})
	rs, err := p.Process(context.Background(), []consumer.Event{bad})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeFailed, rs[0].Outcome)
	require.True(t, consumer.IsPermanent(rs[0].Err))
	require.EqualValues(t, 1, row(`SELECT count(*) FROM platform.outbox`)[0], "a failed handler writes nothing")
}

func TestPrepareParcelOncePerEvent(t *testing.T) {
	t.Parallel()
	p, row := newProcessor(t, shop.HandlerShippingParcel)
	r := shop.StockReserved{OrderID: uuid.New(), CustomerID: uuid.New(), Lines: []shop.OrderLine{
		{ProductID: uuid.New(), Quantity: "1"}, {ProductID: uuid.New(), Quantity: "3.000"},
	}}
	ev := event(t, shop.EventStockReserved, r)
	rs, err := p.Process(context.Background(), []consumer.Event{ev, ev})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
	require.Equal(t, dedup.OutcomeDuplicate, rs[1].Outcome)
	got := row(`SELECT count(*), min(items) FROM parcel WHERE order_id = $1`, r.OrderID)
	require.EqualValues(t, 1, got[0])
	require.EqualValues(t, 2, got[1])
}
