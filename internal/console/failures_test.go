package console_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/console"
	"github.com/platformd/platformd/internal/failure"
)

// The failures pages render for every session: the groups of stock's
// failures by the chosen key with their counts and times, a group's
// failures with links to each, a failure with every field, its headers,
// its bodies and its edits, a retry with its counts; the overview, the
// service and the pool pages link to them. Bad ids and unknown names are
// 400 and 404.
func TestFailurePagesRender(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(readToken)
	unknown, decode := admintest.FailureUnknownProductID.String(), admintest.FailureDecodeID.String()
	for path, want := range map[string][]string{
		"/services/stock/failures": {`id="groups-table"`, `data-group="retries_exhausted"`, `data-group="decode"`,
			`data-figure="count">2<`, `data-figure="count">1<`, "2026-01-02 00:04:05 UTC", admintest.FailureRetryID.String()},
		"/services/stock/failures?group_by=fingerprint": {html.EscapeString(admintest.FingerprintUnknownProduct)},
		"/services/stock/failures?group_by=handler":     {`data-group="stock.reserve"`, "(none)"},
		"/services/stock/failures?state=resolved":       {`id="groups-empty"`},
		"/services/stock/failures?text=p-2":             {`data-figure="count">1<`},
		"/fragments/services/stock/failures/retries":    {`id="failure-retries-live"`, admintest.FailureRunningRetryID.String()},
		"/services/stock/failures/events?failure_reason=retries_exhausted&state=failed": {
			`href="/failures/` + unknown + `"`, admintest.FailureUnknownProduct2ID.String(), "edited"},
		"/failures/" + unknown: {"order.order.placed.v1", "stock.reserve", "retries_exhausted", "order-p-1",
			"x-attempt", `id="failure-edited-body"`, "typo in the product id", "&#34;/payload/product&#34;",
			"&#34;product&#34;: &#34;p-1&#34;", admintest.FailureRetryID.String(), `<dd data-field="copies">2</dd>`},
		"/failures/" + decode: {`data-kind="text"`, "{not json", "(undecodable)"},
		"/services/stock/failures/retries/" + admintest.FailureRunningRetryID.String(): {`id="retry-state">running<`,
			`data-figure="selected">4<`, `data-figure="sent">2<`, "hx-trigger=\"every 1s\"", "pool stock-events · reason permanent",
			`<span class="hint" id="retry-error">waiting: giving way to the backlog of stock2/stock2-events, at 5 copies/s</span>`},
		"/fragments/services/stock/failures/retries/" + admintest.FailureRetryID.String(): {`data-state="done"`, `<span class="bad" id="retry-error">1 copy failed again</span>`},
		"/":                                    {`href="/services/stock/failures"`},
		"/services/stock":                      {`id="failures-link"`},
		"/pools/stock-events":                  {`href="/services/stock/failures?pool=stock-events"`},
		"/fragments/pools/stock-events/failed": {`id="failed-queue-workbench"`},
	} {
		resp, body := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		for _, w := range want {
			require.Contains(t, body, w, path)
		}
		// A read session sees no action.
		for _, button := range []string{"Retry…", "Discard…", `id="edit-form"`, `id="retry-cancel"`, `name="id"`} {
			require.NotContains(t, body, button, path)
		}
	}
	// The pretty-printed body keeps the product's value escaped, never
	// markup.
	_, body := c.do(http.MethodGet, "/failures/"+unknown, nil)
	require.Contains(t, body, "&#34;payload&#34;: {\n")

	for path, code := range map[string]int{
		"/failures/nope": http.StatusBadRequest,
		"/failures/00000000-0000-0000-0000-000000000000":                           http.StatusBadRequest,
		"/failures/01900000-0000-7000-8000-0000000000ff":                           http.StatusNotFound,
		"/services/nope/failures":                                                  http.StatusNotFound,
		"/services/stock/failures?group_by=colour":                                 http.StatusBadRequest,
		"/services/stock/failures?state=sleeping":                                  http.StatusBadRequest,
		"/services/stock/failures?from=yesterday":                                  http.StatusBadRequest,
		"/services/stock/failures?from=2026-01-02T00:00Z&to=2026-01-01T00:00:00Z":  http.StatusBadRequest,
		"/services/stock/failures/events?id=nope":                                  http.StatusBadRequest,
		"/services/stock/failures/events?page_token=x":                             http.StatusBadRequest,
		"/services/nope/failures/events":                                           http.StatusNotFound,
		"/services/stock/failures/retries/nope":                                    http.StatusBadRequest,
		"/services/stock/failures/retries/" + admintest.FailureDecodeID.String():   http.StatusNotFound,
		"/services/shipping/failures/retries/" + admintest.FailureRetryID.String(): http.StatusNotFound,
		"/fragments/services/nope/failures/retries":                                http.StatusNotFound,
	} {
		resp, body := c.do(http.MethodGet, path, nil)
		require.Equal(t, code, resp.StatusCode, "%s: %s", path, body)
	}
}

// A group's failures are listed a page at a time, the next page's link
// carrying the backend's token and the group's filter.
func TestFailureEventsPaginate(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *console.HandlerConfig) { c.FailurePageSize = 2 })
	c := b.client(t)
	c.signIn(adminToken)
	_, body := c.do(http.MethodGet, "/services/stock/failures", nil)
	require.Contains(t, body, `href="/services/stock/failures/events?failure_reason=retries_exhausted&amp;state=failed"`)

	_, body = c.do(http.MethodGet, "/services/stock/failures/events?state=any&pool=stock-events", nil)
	require.Equal(t, 2, strings.Count(body, `class="failure-link"`))
	require.NotContains(t, body, `id="first-page"`)
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`).FindStringSubmatch(body)
	require.NotNil(t, next, body)
	require.Equal(t, "/services/stock/failures/events?page_token=2&amp;pool=stock-events&amp;state=any", next[1])
	last := b.backend.CallsTo("ListFailedEvents")
	require.Equal(t, 2, last[len(last)-1].Limit)

	resp, body := c.do(http.MethodGet, html.UnescapeString(next[1]), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, 1, strings.Count(body, `class="failure-link"`))
	require.Contains(t, body, admintest.FailureUnknownProductID.String(), "the oldest, last")
	require.NotContains(t, body, `id="next-page"`)
	require.Contains(t, body, `href="/services/stock/failures/events?pool=stock-events&amp;state=any" id="first-page"`)
	last = b.backend.CallsTo("ListFailedEvents")
	require.Equal(t, "2", last[len(last)-1].PageToken)
	require.Equal(t, failure.Filter{Pool: "stock-events"}, last[len(last)-1].Filter)
}

// Retrying a group: a dry run counts it and asks for the canary and the
// rate, the confirmed retry is created with them and the browser is sent
// to its page, which polls it and offers the cancel; a read session and
// a request without the CSRF token are refused before the backend.
func TestRetryFailureGroup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm, reader := b.client(t), b.client(t)
	adm.signIn(adminToken)
	reader.signIn(readToken)
	group := url.Values{"failure_reason": {"retries_exhausted"}, "state": {"failed"}, "canary": {"1"}, "rate": {"5"}}

	resp, body := reader.post("/services/stock/failures/retry", group)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "read-only")
	resp, _ = adm.do(http.MethodPost, "/services/stock/failures/retry", group)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Empty(t, b.backend.CallsTo("RetryFailedEvents"))

	for _, bad := range []url.Values{{"canary": {"-1"}}, {"rate": {"0"}}, {"rate": {"fast"}}, {"id": {"nope"}}, {"state": {"odd"}}} {
		resp, body = adm.post("/services/stock/failures/retry", bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v", bad)
		require.Contains(t, body, "Retry refused", "%v", bad)
	}
	require.Empty(t, b.backend.CallsTo("RetryFailedEvents"))

	_, body = adm.post("/services/stock/failures/retry", cloneValues(group))
	require.Contains(t, body, `data-figure="count">2<`)
	require.Contains(t, body, `id="confirm-retry"`)
	require.Contains(t, body, `name="canary" min="0" value="1"`)
	calls := b.backend.CallsTo("RetryFailedEvents")
	require.Len(t, calls, 1)
	require.True(t, calls[0].DryRun)
	require.Equal(t, failure.Filter{Reason: "retries_exhausted", State: failure.StateFailed}, calls[0].Filter)

	confirm := cloneValues(group)
	confirm.Set("confirm", "1")
	resp, _ = adm.post("/services/stock/failures/retry", confirm)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	calls = b.backend.CallsTo("RetryFailedEvents")
	require.Len(t, calls, 2)
	require.False(t, calls[1].DryRun)
	require.Equal(t, "ops", calls[1].Actor)
	require.Equal(t, 1, calls[1].Retry.Canary)
	require.Equal(t, 5, calls[1].Retry.Rate)
	list, err := b.backend.ListFailureRetries(t.Context(), "stock", 1)
	require.NoError(t, err)
	id := list[0].ID.String()
	require.Equal(t, "/services/stock/failures/retries/"+id, resp.Header.Get("Location"))
	_, body = adm.do(http.MethodGet, resp.Header.Get("Location"), nil)
	require.Contains(t, body, "Retry "+id+" started: 2 failures selected, a canary of 1 first.")
	require.Contains(t, body, `id="retry-state">canary<`)
	require.Contains(t, body, `id="retry-cancel"`)
	_, body = reader.do(http.MethodGet, "/services/stock/failures/retries/"+id, nil)
	require.NotContains(t, body, `id="retry-cancel"`)

	// Nothing failed is left in the group: the backend's refusal, 409.
	resp, body = adm.post("/services/stock/failures/retry", cloneValues(group))
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "selects no failed failure")

	// Cancel: a read session may not; the admin's stops it; a second
	// cancel is refused (409); bad and unknown ids 400 and 404.
	resp, _ = reader.post("/services/stock/failures/retries/"+id+"/cancel", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = adm.post("/services/stock/failures/retries/"+id+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = adm.do(http.MethodGet, resp.Header.Get("Location"), nil)
	require.Contains(t, body, `id="retry-state">cancelled<`)
	require.Contains(t, body, "cancelled by <strong>ops</strong>")
	require.NotContains(t, body, "hx-trigger", "a finished retry is not polled")
	resp, body = adm.post("/services/stock/failures/retries/"+id+"/cancel", nil)
	require.Equal(t, http.StatusConflict, resp.StatusCode, body)
	resp, _ = adm.post("/services/stock/failures/retries/nope/cancel", nil)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = adm.post("/services/stock/failures/retries/"+admintest.FailureDecodeID.String()+"/cancel", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// A selection of failures (ids) is retried as such.
func TestRetryFailureSelection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm := b.client(t)
	adm.signIn(adminToken)
	_, body := adm.do(http.MethodGet, "/services/stock/failures/events?state=failed", nil)
	require.Contains(t, body, `name="id" value="`+admintest.FailureDecodeID.String()+`"`)
	sel := url.Values{"state": {"any"}, "id": {admintest.FailureDecodeID.String(), admintest.FailureUnknownProduct2ID.String()}, "confirm": {"1"}}
	resp, _ := adm.post("/services/stock/failures/retry", sel)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	calls := b.backend.CallsTo("RetryFailedEvents")
	require.Len(t, calls, 1)
	require.ElementsMatch(t, []string{admintest.FailureDecodeID.String(), admintest.FailureUnknownProduct2ID.String()},
		[]string{calls[0].Filter.IDs[0].String(), calls[0].Filter.IDs[1].String()})
	require.Empty(t, calls[0].Filter.State)
	require.Equal(t, failure.RetryRateDefault, calls[0].Retry.Rate)
}

// Discarding: a first step counts the selection and asks for a reason,
// which is required; the backend's refusal about parked events asks the
// choice release|discard, which is then passed on.
func TestDiscardFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm, reader := b.client(t), b.client(t)
	adm.signIn(adminToken)
	reader.signIn(readToken)
	group := url.Values{"failure_reason": {"decode"}, "state": {"failed"}}

	resp, _ := reader.post("/services/stock/failures/discard", cloneValues(group))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp, body := adm.post("/services/stock/failures/discard", cloneValues(group))
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `data-figure="count">1<`)
	require.Contains(t, body, `id="discard-reason"`)
	require.NotContains(t, body, `id="parked-choice"`)
	require.Empty(t, b.backend.CallsTo("DiscardFailedEvents"), "the first step discards nothing")

	confirm := cloneValues(group)
	confirm.Set("confirm", "1")
	resp, body = adm.post("/services/stock/failures/discard", cloneValues(confirm))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "say why")
	require.Empty(t, b.backend.CallsTo("DiscardFailedEvents"))

	// The backend refuses: events are parked behind the head.
	b.backend.SetHook("DiscardFailedEvents", func(context.Context) error {
		return fmt.Errorf("%w: 2 parked events wait behind the failures to discard: choose release or discard", failure.ErrPrecondition)
	})
	confirm.Set("reason", "poison <message>")
	resp, body = adm.post("/services/stock/failures/discard", cloneValues(confirm))
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "2 parked events wait")
	require.Contains(t, body, `id="parked-choice"`)
	require.Contains(t, body, `value="poison &lt;message&gt;"`, "the reason is kept, escaped")
	b.backend.SetHook("DiscardFailedEvents", nil)

	confirm.Set("parked", "sideways")
	resp, _ = adm.post("/services/stock/failures/discard", cloneValues(confirm))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	confirm.Set("parked", "release")
	resp, _ = adm.post("/services/stock/failures/discard", cloneValues(confirm))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	calls := b.backend.CallsTo("DiscardFailedEvents")
	require.Len(t, calls, 2)
	require.Equal(t, failure.ParkedUnspecified, calls[0].Parked)
	require.Equal(t, failure.ParkedRelease, calls[1].Parked)
	require.Equal(t, "poison <message>", calls[1].Reason)
	require.Equal(t, "ops", calls[1].Actor)
	require.Equal(t, failure.Filter{Reason: "decode", State: failure.StateFailed}, calls[1].Filter)
	_, body = adm.do(http.MethodGet, resp.Header.Get("Location"), nil)
	require.Contains(t, body, "Discarded 1 failures.")

	// A single failure, from its page: back to it, shown discarded.
	one := url.Values{"state": {"any"}, "id": {admintest.FailureUnknownProduct2ID.String()}, "confirm": {"1"}, "reason": {"duplicate order"}}
	resp, _ = adm.post("/services/stock/failures/discard", one)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/failures/"+admintest.FailureUnknownProduct2ID.String(), resp.Header.Get("Location"))
	_, body = adm.do(http.MethodGet, resp.Header.Get("Location"), nil)
	require.Contains(t, body, `id="failure-state">discarded<`)
	require.Contains(t, body, "by <strong>ops</strong>")
	require.NotContains(t, body, `id="edit-form"`, "a discarded failure is not edited")
}

// Editing a failure's payload: the form holds the body a retry would
// send; a payload the backend refuses is shown beside the form with its
// message (400), the text typed kept; an accepted edit shows in the
// failure's history.
func TestEditFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm, reader := b.client(t), b.client(t)
	adm.signIn(adminToken)
	reader.signIn(readToken)
	id := admintest.FailureUnknownProduct2ID.String()
	path := "/failures/" + id + "/edit"

	_, body := adm.do(http.MethodGet, "/failures/"+id, nil)
	require.Contains(t, body, `id="edit-form"`)
	require.Contains(t, body, "&#34;product&#34;: &#34;p-2&#34;")

	resp, _ := reader.post(path, url.Values{"payload": {`{}`}, "reason": {"x"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = adm.do(http.MethodPost, path, url.Values{"payload": {`{}`}, "reason": {"x"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")

	resp, body = adm.post(path, url.Values{"payload": {`{"product": <script>`}, "reason": {"fix"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `id="edit-error">Edit refused: payload: not JSON: failure: invalid<`)
	require.Contains(t, body, "{&#34;product&#34;: &lt;script&gt;</textarea>", "the text typed is kept, escaped")
	resp, body = adm.post(path, url.Values{"payload": {`{"a":1}`}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "say why")
	resp, _ = adm.post("/failures/nope/edit", url.Values{"payload": {`{}`}, "reason": {"x"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = adm.post("/failures/01900000-0000-7000-8000-0000000000ff/edit", url.Values{"payload": {`{}`}, "reason": {"x"}})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// The body is the sender's: markup in it is shown as text.
	resp, _ = adm.post(path, url.Values{"payload": {`{"payload":{"product":"p-22</pre><script>alert(1)</script>"}}`}, "reason": {"wrong product id"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/failures/"+id, resp.Header.Get("Location"))
	_, body = adm.do(http.MethodGet, "/failures/"+id, nil)
	require.Contains(t, body, "Edited.")
	require.Contains(t, body, `<span data-edit-reason>wrong product id</span>`)
	require.Contains(t, body, `id="failure-edited-body"`)
	require.Contains(t, body, "p-22&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
	require.NotContains(t, body, "<script>alert")
	calls := b.backend.CallsTo("EditFailedEvent")
	require.Len(t, calls, 3, "the refused one, the unknown one and this one")
	require.Equal(t, "ops", calls[2].Actor)
	require.JSONEq(t, `{"payload":{"product":"p-22</pre><script>alert(1)</script>"}}`, string(calls[2].Payload))
}

// A backend error reaches the operator with the status it means: an
// unreachable database 503, anything unknown 500 without its text.
func TestFailurePagesBackendErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	id := admintest.FailureUnknownProductID.String()
	for _, tc := range []struct {
		err  error
		code int
		text string
	}{
		{fmt.Errorf("stock database: %w", admin.ErrUnavailable), http.StatusServiceUnavailable, "stock database: unavailable"},
		{errors.New("secret detail"), http.StatusInternalServerError, "internal error"},
		{fmt.Errorf("failure x: %w", failure.ErrNotFound), http.StatusNotFound, "failure x"},
	} {
		hook := func(context.Context) error { return tc.err }
		for _, m := range []string{"GetFailedEvent", "ListFailedEvents", "GetFailureRetry"} {
			b.backend.SetHook(m, hook)
		}
		for _, path := range []string{"/failures/" + id, "/services/stock/failures/events",
			"/services/stock/failures/retries/" + admintest.FailureRetryID.String()} {
			resp, body := c.do(http.MethodGet, path, nil)
			require.Equal(t, tc.code, resp.StatusCode, "%s: %v", path, tc.err)
			require.Contains(t, body, tc.text, path)
			require.NotContains(t, body, "secret detail", path)
		}
	}
	// On the groups page the groups' error is a banner in the page.
	b.backend.SetHook("ListFailureGroups", func(context.Context) error { return fmt.Errorf("x: %w", admin.ErrUnavailable) })
	resp, body := c.do(http.MethodGet, "/services/stock/failures", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, body, "x: unavailable")
	require.Contains(t, body, `id="failure-retries-live"`)
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}
