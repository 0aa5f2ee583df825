package dedup_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/fixture/shop"
)

// A Processor in a caller's transaction runs the same step, in savepoints:
// the caller's transaction holds the effects of the processed events and
// none of the failed one's (its processed_event row rolled back with
// them), stays usable, and nothing reaches the database until it
// commits; rolled back, it leaves nothing.
func TestProcessorInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	routes, err := dedup.RoutesFor(b.reg, []string{shop.HandlerStockReserve, "test.flaky"})
	require.NoError(t, err)
	good, bad, seen := orderEvent(t, 2), orderEvent(t, 1), orderEvent(t, 1)
	b.failOn.Store(bad.ID, consumer.Permanent(errors.New("poison")))
	_, err = b.processor(t, shop.HandlerStockReserve).Process(ctx, []consumer.Event{seen})
	require.NoError(t, err)

	tx, err := b.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	p := dedup.NewProcessorInTx(tx, dedup.ProcessorConfig{Routes: routes})
	res, err := p.Process(ctx, []consumer.Event{good, bad, seen})
	require.NoError(t, err)
	require.Equal(t, []dedup.Outcome{dedup.OutcomeProcessed, dedup.OutcomeFailed, dedup.OutcomeDuplicate}, outcomes(res))
	require.True(t, res[1].Permanent)
	require.Equal(t, "test.flaky", res[1].Handler)

	inTx := func(q string, args ...any) int {
		var n int
		require.NoError(t, tx.QueryRow(ctx, q, args...).Scan(&n))
		return n
	}
	require.Equal(t, 2, inTx(`SELECT count(*) FROM reservation WHERE order_id = (SELECT (payload->>'order_id')::uuid FROM (SELECT $1::jsonb AS payload) p)`, string(good.Payload)))
	require.Equal(t, 1, inTx(`SELECT count(*) FROM processed_event WHERE event_id = $1`, good.ID))
	require.Zero(t, inTx(`SELECT count(*) FROM processed_event WHERE event_id = $1`, bad.ID), "the failed event's row rolled back")
	require.Zero(t, b.reservations(t, good), "nothing outside the caller's transaction")
	require.Zero(t, b.processedRows(t, good.ID))

	require.NoError(t, tx.Rollback(ctx))
	require.Zero(t, b.reservations(t, good))
	require.Zero(t, b.processedRows(t, good.ID))
	require.Equal(t, 1, b.processedRows(t, seen.ID))
}
