package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin/admintest"
)

// The replay page: a dry run shows the per-pool table and a button that
// starts exactly that replay (admin session and CSRF); the replay is then
// listed with its progress and a cancel button; a read session may look,
// not act; a malformed selection is refused naming the field.
func TestReplayPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	adm, reader := b.client(t), b.client(t)
	adm.signIn(adminToken)
	reader.signIn(readToken)

	resp, body := adm.do(http.MethodGet, "/replays/stock", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, admintest.ReplayID.String())
	require.Contains(t, body, `id="replay-form"`)
	resp, body = adm.do(http.MethodGet, "/fragments/replays/stock", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `id="replay-live"`)
	_, body = adm.do(http.MethodGet, "/services/stock", nil)
	require.Contains(t, body, `href="/replays/stock"`)

	sel := url.Values{"event_names": {"order.#"}, "from": {"2026-01-01T00:00:00Z"}, "to": {"2026-01-02T00:00:00Z"}, "dry_run": {"1"}}
	resp, body = reader.post("/replays/stock", sel)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "read-only")
	resp, _ = adm.do(http.MethodPost, "/replays/stock", sel)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Empty(t, b.backend.CallsTo("ReplayEvents"))

	for _, bad := range []url.Values{
		{"from": {"yesterday"}},
		{"from": {"2026-01-02T00:00:00Z"}, "to": {"2026-01-01T00:00:00Z"}},
		{"from": {"2026-01-01T00:00:00Z"}, "rate": {"0"}},
		{"event_ids": {"nope"}},
	} {
		resp, body = adm.post("/replays/stock", bad)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v", bad)
		require.Contains(t, body, "Replay refused", "%v", bad)
	}
	require.Empty(t, b.backend.CallsTo("ReplayEvents"))

	resp, body = adm.post("/replays/stock", sel)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="replay-table"`)
	require.Contains(t, body, `data-pool="stock-events"`)
	require.Contains(t, body, `data-figure="would-apply">7<`)
	require.Contains(t, body, `id="replay-start"`)
	calls := b.backend.CallsTo("ReplayEvents")
	require.Len(t, calls, 1)
	require.True(t, calls[0].DryRun)

	start := url.Values{"confirm": {"1"}, "event_names": {"order.#"}, "from": {"2026-01-01T00:00:00Z"}, "to": {"2026-01-02T00:00:00Z"}}
	resp, _ = adm.post("/replays/stock", start)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/replays/stock", resp.Header.Get("Location"))
	calls = b.backend.CallsTo("ReplayEvents")
	require.Len(t, calls, 2)
	require.False(t, calls[1].DryRun)
	require.Equal(t, "ops", calls[1].Actor)
	list, err := b.backend.ListReplays(t.Context(), "stock", 1)
	require.NoError(t, err)
	id := list[0].ID
	_, body = adm.do(http.MethodGet, "/replays/stock", nil)
	require.Contains(t, body, "Replay "+id+" started")
	require.Contains(t, body, `data-cancel="`+id+`"`)

	resp, _ = reader.post("/replays/stock/"+id+"/cancel", nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = adm.post("/replays/stock/"+id+"/cancel", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = adm.do(http.MethodGet, "/replays/stock", nil)
	require.Contains(t, body, "cancelled")
	require.NotContains(t, body, `data-cancel="`+id+`"`)
}
