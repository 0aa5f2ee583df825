package replay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestDryRunMixedState: over events applied by one service and not the
// other, some beyond one service's horizon, by name pattern, the counts
// per pool are exact, and a targeted dry run counts everything selected
// for the one pool.
func TestDryRunMixedState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	producer := database(t, "replay_prod")
	stock := database(t, "replay_stock")
	ship := database(t, "replay_ship")
	now := time.Now()
	var placed, status, old []uuid.UUID
	for i := range 10 {
		id := v7At(t, now.Add(-time.Duration(i+1)*time.Minute))
		archive(t, producer, id, "order.order.placed.v1", now.Add(-time.Hour))
		placed = append(placed, id)
	}
	for i := range 6 {
		id := v7At(t, now.Add(-time.Duration(i+1)*time.Minute))
		archive(t, producer, id, "order.order.status_changed.v1", now.Add(-time.Hour))
		status = append(status, id)
	}
	// Three placed events from 3 days ago: beyond stock's 48h horizon.
	for range 3 {
		id := v7At(t, now.Add(-72*time.Hour))
		archive(t, producer, id, "order.order.placed.v1", now.Add(-time.Hour))
		old = append(old, id)
	}
	// Another name, not selected; and an event outside the range.
	archive(t, producer, v7At(t, now), "order.invoice.sent.v1", now.Add(-time.Hour))
	archive(t, producer, v7At(t, now), "order.order.placed.v1", now.Add(-48*time.Hour))

	processed(t, stock, placed[:4]...) // stock applied 4 placed
	processed(t, stock, old[0])        // and one old one, still in its table
	processed(t, ship, status[:1]...)  // shipping applied 1 status change
	processed(t, ship, placed[:2]...)  // shipping's table knows ids it never gets: not counted
	targets := []Target{
		{Pool: "stock-events", Service: "stock", Queue: "stock.events", Bindings: []string{"order.order.placed.v1"}, DB: stock, Horizon: 48 * time.Hour, Quarantine: true},
		{Pool: "shipping-events", Service: "shipping", Queue: "shipping.events", Bindings: []string{"order.*.status_changed.v1"}, DB: ship, Horizon: 336 * time.Hour, Quarantine: true},
		{Pool: "audit-all", Service: "shipping", Queue: "audit", Bindings: []string{"order.invoice.#"}, DB: ship},
	}
	sel := Selection{EventNames: []string{"order.order.placed.v1", "order.*.status_changed.v1"}, From: now.Add(-2 * time.Hour), To: now}
	require.NoError(t, sel.Check())
	items, perName, err := Select(ctx, producer, sel, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, items, 19)
	require.Equal(t, []int{13, 6}, perName)
	got := Targets(items, targets)
	require.Len(t, got, 2, "the invoice pool receives none of the selection")
	counts, err := DryRun(ctx, items, got, false, now)
	require.NoError(t, err)
	require.Equal(t, []PoolCount{
		{Pool: "shipping-events", Service: "shipping", WouldApply: 5, AlreadyProcessed: 1},
		{Pool: "stock-events", Service: "stock", WouldApply: 6, AlreadyProcessed: 4, BeyondHorizon: 3},
	}, counts)

	// Targeted at stock: every selected event goes to its queue.
	counts, err = DryRun(ctx, items, targets[:1], true, now)
	require.NoError(t, err)
	require.Equal(t, []PoolCount{{Pool: "stock-events", Service: "stock", WouldApply: 12, AlreadyProcessed: 4, BeyondHorizon: 3}}, counts)

	// An event published before the archive's period is not replayed,
	// even while its day's partition waits to be dropped.
	stale := v7At(t, now.Add(-time.Minute))
	archive(t, producer, stale, "order.order.placed.v1", now.Add(-time.Hour))
	_, err = producer.Exec(ctx, `UPDATE platform.outbox_archive SET published_at = now() - interval '25 hours' WHERE event_id = $1`, stale)
	require.NoError(t, err)
	again, _, err := Select(ctx, producer, sel, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, again, 19, "the stale event is past the period")

	// By ids: one of each state for stock.
	items, _, err = Select(ctx, producer, Selection{EventIDs: []uuid.UUID{placed[0], placed[9], old[1], uuid.New()}}, 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, items, 3)
	counts, err = DryRun(ctx, items, targets[:1], false, now)
	require.NoError(t, err)
	require.Equal(t, PoolCount{Pool: "stock-events", Service: "stock", WouldApply: 1, AlreadyProcessed: 1, BeyondHorizon: 1}, counts[0])
}

func TestSelectionCheck(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name string
		sel  Selection
		msg  string
	}{
		{"Empty", Selection{}, "from/to or event_ids"},
		{"Both", Selection{From: now, EventIDs: []uuid.UUID{uuid.New()}}, "give one or the other"},
		{"FromAfterTo", Selection{From: now, To: now.Add(-time.Second)}, "from:"},
		{"Pattern", Selection{From: now, EventNames: []string{"order.#x"}}, "event_names[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.sel.Check()
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tc.msg)
		})
	}
	require.NoError(t, Selection{From: now}.Check())
}
