package console_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// TestReplayInBrowser: an operator restores an event whose effects stock
// lost: the replay page's dry run shows, per pool, one to apply and the
// others already processed; one click starts the replay to stock's pool,
// whose progress refreshes in place until done, and stock has the event
// again. A slow replay through the exchange is cancelled from the page.
func TestReplayInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, 1280, 900)
	e := newEnv(t, options{producer: true})
	ctx := b.ctx
	bg := context.Background()
	orderDB, err := pgxpool.New(bg, e.orderDSN)
	require.NoError(t, err)
	defer orderDB.Close()
	stockDB, err := pgxpool.New(bg, e.stockDSN)
	require.NoError(t, err)
	defer stockDB.Close()

	from := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	var ids []uuid.UUID
	for range 3 {
		payload, err := json.Marshal(order())
		require.NoError(t, err)
		var id uuid.UUID
		require.NoError(t, orderDB.QueryRow(bg, `SELECT platform.publish('order.order.placed.v1', $1::jsonb)`, string(payload)).Scan(&id))
		ids = append(ids, id)
	}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if !processed(t, e.stockDSN, id) {
				return false
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "stock applied the three orders")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, orderDB.QueryRow(bg, `SELECT count(*) FROM platform.outbox_archive`).Scan(&n))
		return n == 3
	}, 30*time.Second, 50*time.Millisecond, "archived")
	// The incident: stock lost the first order's effects and dedup row.
	_, err = stockDB.Exec(bg, `DELETE FROM processed_event WHERE event_id = $1`, ids[0])
	require.NoError(t, err)

	signIn(t, ctx, e, adminToken)
	do(t, ctx, chromedp.Navigate(e.url("/services/stock")))
	waitFor(t, ctx, "document.querySelector('#replay-link')", "the service page's replay link")
	do(t, ctx, chromedp.Navigate(e.url("/replays/order")))
	waitFor(t, ctx, "document.querySelector('#replay-form')", "the replay page")
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#from"), from),
		chromedp.SetValue(chromedp.CSS("#target_pool"), e.stockPool),
		chromedp.Click(chromedp.CSS("#replay-dry-run")),
	)
	row := "#replay-table tr[data-pool=" + js(e.stockPool) + "]"
	waitFor(t, ctx, textOf(row+" [data-figure=would-apply]")+" === '1' && "+textOf(row+" [data-figure=already-processed]")+" === '2'",
		"the dry run's table")
	require.False(t, processed(t, e.stockDSN, ids[0]), "a dry run publishes nothing")

	do(t, ctx, chromedp.Click(chromedp.CSS("#replay-start")))
	waitFor(t, ctx, textOf("#flash")+".includes('started')", "the replay's notice")
	waitFor(t, ctx, "document.querySelector('#replay-list tr[data-state=done] [data-figure=published]')?.textContent === '3'",
		"the replay done, its progress refreshed in place")
	require.Eventually(t, func() bool { return processed(t, e.stockDSN, ids[0]) }, 30*time.Second, 50*time.Millisecond,
		"stock applied the lost order again")

	// A slow replay through the exchange (1/s), cancelled from the page.
	do(t, ctx, chromedp.Navigate(e.url("/replays/order")))
	waitFor(t, ctx, "document.querySelector('#replay-form')", "the replay page")
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#from"), from),
		chromedp.SendKeys(chromedp.CSS("#rate"), "1"),
		chromedp.Click(chromedp.CSS("#replay-dry-run")),
	)
	waitFor(t, ctx, "document.querySelector('#replay-start')", "the second dry run")
	do(t, ctx, chromedp.Click(chromedp.CSS("#replay-start")))
	waitFor(t, ctx, "document.querySelector('#replay-list tr[data-state=running] button[data-cancel]')", "the running replay's cancel button")
	do(t, ctx, chromedp.Click(chromedp.CSS("#replay-list tr[data-state=running] button[data-cancel]")))
	waitFor(t, ctx, "document.querySelector('#replay-list tr[data-state=cancelled]')", "the replay cancelled")
	require.Equal(t, []string{"ops replay.start order", "ops replay.start order", "ops replay.cancel order"}, auditActions(t, e.orderDSN))
}
