package console_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
)

// The service page shows the horizon advice beside the horizon, with its
// cost; the live refresh does not read it; an advice that fails leaves the
// rest of the page.
func TestServicePageShowsHorizonAdvice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	resp, body := c.do(http.MethodGet, "/services/stock", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	for _, want := range []string{`id="horizon-advice"`, `data-figure="advised">31d<`, `data-figure="advised-rows">3,100,000<`,
		`data-figure="advised-bytes">310.0 MiB<`, "now 1,400,000 rows, 140.0 MiB", "replay 3d (p99.9 3d, 3)", "The archive of producer order keeps 30 days"} {
		require.Contains(t, body, want)
	}
	_, body = c.do(http.MethodGet, "/fragments/services/stock", nil)
	require.NotContains(t, body, "horizon-advice")
	require.Len(t, b.backend.CallsTo("AdviseHorizon"), 1)

	b.backend.SetHook("AdviseHorizon", func(context.Context) error { return errors.Join(admin.ErrUnavailable, errors.New("database away")) })
	resp, body = c.do(http.MethodGet, "/services/stock", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "No horizon advice:")
	require.Contains(t, body, "Purge history")
}
