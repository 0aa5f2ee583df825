package console_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/fixture/shop"
)

// TestFailuresInBrowser: two bad messages of two causes reach stock's pool
// and become rows of its failure store; the operator finds them grouped
// by reason on the failures page, drills into one group, opens the
// failure and reads its body, fixes its payload (the edit then in its
// history), retries the group with a canary of one and watches the retry
// reach done (the row resolved, the event applied), and discards the
// other with a reason (the row discarded).
func TestFailuresInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, 1280, 900)
	e := newEnv(t, options{})
	ctx := b.ctx

	bad := order()
	bad.Lines[0].Quantity = "-1"
	badID := e.publish(shop.EventOrderPlaced, bad, uuid.Nil)
	e.publishRaw(shop.EventOrderPlaced, []byte("this is not an envelope"))
	rows := e.waitFailedEvents(e.stockDSN, 2, "failed")
	var permanent, decode failedEvent
	for _, r := range rows {
		switch r.Reason {
		case "permanent":
			permanent = r
		case "decode":
			decode = r
		}
	}
	require.Equal(t, badID, permanent.EventID, "%+v", rows)
	require.Equal(t, uuid.Nil, decode.EventID, "%+v", rows)

	// The failures page, from the service page: two groups by reason.
	signIn(t, ctx, e, adminToken)
	do(t, ctx, chromedp.Navigate(e.url("/services/stock")))
	waitFor(t, ctx, "document.querySelector('#failures-link')", "the service page's failures link")
	do(t, ctx, chromedp.Click(chromedp.CSS("#failures-link")))
	permGroup, decodeGroup := "#groups-table tr[data-group=permanent]", "#groups-table tr[data-group=decode]"
	waitFor(t, ctx, "document.querySelectorAll('#groups-table tr[data-group]').length === 2 && "+
		textOf(permGroup+" [data-figure=count]")+" === '1' && "+textOf(decodeGroup+" [data-figure=count]")+" === '1'",
		"two groups of one failure each")

	// Drill into the permanent group, open its failure, read its body.
	do(t, ctx, chromedp.Click(chromedp.CSS(permGroup+" a.group-link")))
	row := "#failures-table tr[data-failure=" + js(permanent.ID.String()) + "]"
	waitFor(t, ctx, "document.querySelectorAll('#failures-table tr[data-failure]').length === 1 && document.querySelector("+js(row)+")",
		"the group's one failure")
	do(t, ctx, chromedp.Click(chromedp.CSS(row+" a.failure-link")))
	waitFor(t, ctx, textOf("#failure-body")+".includes('\"quantity\": \"-1\"') && "+textOf("#failure-fields")+".includes('stock.reserve')",
		"the failure's body, indented, and its handler")

	// Fix the payload: the quantity's sign.
	current, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.querySelector('#payload').value"))
	require.NoError(t, err)
	require.Contains(t, current, `"quantity": "-1"`)
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS("#payload"), strings.Replace(current, `"quantity": "-1"`, `"quantity": "1.000"`, 1)),
		chromedp.SendKeys(chromedp.CSS("#edit-reason"), "sign typo in the quantity"),
		chromedp.Click(chromedp.CSS("#edit-save")),
	)
	waitFor(t, ctx, textOf("#flash")+".includes('Edited.') && "+textOf("#failure-edits [data-edit-reason]")+" === 'sign typo in the quantity' && "+
		textOf("#failure-edits")+".includes('/payload/lines/0/quantity') && "+textOf("#failure-edited-body")+".includes('\"quantity\": \"1.000\"')",
		"the edit in the failure's history, with its diff")
	edited := failedEvents(t, e.stockDSN)
	for _, r := range edited {
		if r.ID == permanent.ID {
			require.True(t, r.Edited)
			require.Contains(t, string(r.EditedBody), `"1.000"`)
			require.Contains(t, string(r.OriginalBody), `"-1"`, "the original body is kept")
		}
	}

	// Retry the group with a canary of one.
	do(t, ctx, chromedp.Navigate(e.url("/services/stock/failures")))
	waitFor(t, ctx, "document.querySelector("+js(permGroup+" [data-retry-group]")+")", "the group's retry button")
	do(t, ctx,
		chromedp.SetValue(chromedp.CSS(permGroup+" input[name=canary]"), "1"),
		chromedp.Click(chromedp.CSS(permGroup+" [data-retry-group]")),
	)
	waitFor(t, ctx, textOf("#failure-confirm [data-figure=count]")+" === '1' && document.querySelector('#canary').value === '1'",
		"the retry's dry run: one failure, a canary of one")
	require.False(t, processed(t, e.stockDSN, badID), "a dry run sends nothing")
	do(t, ctx, chromedp.Click(chromedp.CSS("#confirm-retry")))
	waitFor(t, ctx, textOf("#flash")+".includes('a canary of 1 first')", "the retry's page")
	waitFor(t, ctx, textOf("#retry-state")+" === 'done' && "+textOf("#failure-retry-live [data-figure=resolved]")+" === '1' && "+
		textOf("#failure-retry-live [data-figure=sent]")+" === '1' && "+textOf("#failure-retry-live [data-figure=failed-again]")+" === '0'",
		"the retry done, refreshed in place, its failure resolved")
	require.True(t, processed(t, e.stockDSN, badID), "the edited event applied")
	e.waitFailedEvents(e.stockDSN, 1, "resolved")
	for _, r := range failedEvents(t, e.stockDSN) {
		if r.ID == permanent.ID {
			require.Equal(t, "resolved", r.State)
		}
	}

	// Discard the undecodable one, with a reason.
	do(t, ctx, chromedp.Navigate(e.url("/services/stock/failures")))
	waitFor(t, ctx, "document.querySelectorAll('#groups-table tr[data-group]').length === 1 && document.querySelector("+
		js(decodeGroup+" [data-discard-group]")+")", "the one group left, failed")
	do(t, ctx, chromedp.Click(chromedp.CSS(decodeGroup+" [data-discard-group]")))
	waitFor(t, ctx, textOf("#failure-confirm [data-figure=count]")+" === '1'", "the discard's confirmation")
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#discard-reason"), "not an envelope: a test publisher's garbage"),
		chromedp.Click(chromedp.CSS("#confirm-discard")),
	)
	waitFor(t, ctx, textOf("#flash")+".includes('Discarded 1 failures.')", "the discard's notice")
	after := failedEvents(t, e.stockDSN)
	require.Len(t, after, 2)
	for _, r := range after {
		switch r.ID {
		case decode.ID:
			require.Equal(t, "discarded", r.State)
			require.Equal(t, "ops", r.ResolvedBy)
		case permanent.ID:
			require.Equal(t, "resolved", r.State)
		}
	}
	do(t, ctx, chromedp.Navigate(e.url("/failures/"+decode.ID.String())))
	waitFor(t, ctx, textOf("#failure-state")+" === 'discarded' && "+textOf("#failure-history [data-field=resolved]")+".includes('ops')",
		"the failure shown discarded, by whom")
}
