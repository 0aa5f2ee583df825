package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// The kill switch shows on every page while it holds, and not after; a
// pool's page shows its limits and an admin sets them there.
func TestKillSwitchBannerAndPoolLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	pages := []string{"/", "/pools/stock-events", "/services/stock", "/lookup", "/audit"}
	for _, p := range pages {
		_, body := c.do(http.MethodGet, p, nil)
		require.NotContains(t, body, "data-killswitch", p)
	}
	_, err := b.backend.PauseAll(context.Background(), "stock", "incident 42", "ops")
	require.NoError(t, err)
	for _, p := range pages {
		_, body := c.do(http.MethodGet, p, nil)
		require.Contains(t, body, `data-killswitch="stock"`, p)
		require.Contains(t, body, "incident 42", p)
	}
	_, err = b.backend.ResumeAll(context.Background(), "", "ops")
	require.NoError(t, err)
	_, body := c.do(http.MethodGet, "/", nil)
	require.NotContains(t, body, "data-killswitch")

	_, body = c.do(http.MethodGet, "/pools/stock-events", nil)
	require.Contains(t, body, `id="limits-form"`)
	require.Contains(t, body, "the config's")
	resp, body := c.post("/pools/stock-events/limits", url.Values{"rate": {"-3"}, "reason": {"x"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "rate must not be negative")
	resp, _ = c.post("/pools/stock-events/limits", url.Values{"rate": {"200"}, "concurrency": {"2"}, "reason": {"payment API"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = c.do(http.MethodGet, "/pools/stock-events", nil)
	require.Contains(t, body, "200/s")
	require.Contains(t, body, "payment API")
	l, err := b.backend.GetPoolLimits(context.Background(), "stock-events")
	require.NoError(t, err)
	require.Equal(t, 2, l.Concurrency)
	require.Equal(t, "ops", l.UpdatedBy)

	r := b.client(t)
	r.signIn(readToken)
	resp, _ = r.post("/pools/stock-events/limits", url.Values{"rate": {"1"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a read session sets nothing")
}
