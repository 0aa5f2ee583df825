package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	adminpkg "github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

func TestNoSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	for _, path := range []string{"/", "/pools/stock-events", "/services/stock", "/lookup", "/audit", "/fragments/overview", "/nope"} {
		resp, _ := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
		require.Equal(t, "/login", resp.Header.Get("Location"), path)

		req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil) //nolint:noctx // test
		require.NoError(t, err)
		plain, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		plain.Body.Close()
		require.Equal(t, http.StatusUnauthorized, plain.StatusCode, "a non-browser gets 401: %s", path)

		req.Header.Set("HX-Request", "true")
		hx, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		hx.Body.Close()
		require.Equal(t, http.StatusUnauthorized, hx.StatusCode, path)
		require.Equal(t, "/login", hx.Header.Get("HX-Redirect"), path)
	}
	// A form posted after the session ended: the browser signs in again.
	resp, _ := c.do(http.MethodPost, "/pools/stock-events/pause", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login", resp.Header.Get("Location"))
	plain, err := http.Post(b.srv.URL+"/pools/stock-events/pause", "application/x-www-form-urlencoded", //nolint:noctx // test
		strings.NewReader("reason=x"))
	require.NoError(t, err)
	plain.Body.Close()
	require.Equal(t, http.StatusUnauthorized, plain.StatusCode, "a non-browser's POST gets 401")
	resp, body := c.do(http.MethodGet, "/login", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 1, strings.Count(body, `type="password"`))
	require.Contains(t, body, `name="token"`)
	require.Empty(t, b.backend.Calls())
}

func TestSignInCookieAndSignOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	resp, _ := c.do(http.MethodPost, "/login", url.Values{"token": {adminToken}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	require.Equal(t, "platformd_session", ck.Name)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.False(t, ck.Secure, "plain HTTP")
	require.Equal(t, "/", ck.Path)
	require.Equal(t, int(time.Hour.Seconds()), ck.MaxAge)
	require.GreaterOrEqual(t, len(ck.Value), 43, "a 256-bit random id")

	_, body := c.do(http.MethodGet, "/", nil)
	require.Contains(t, body, "ops")
	resp, _ = c.post("/logout", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login", resp.Header.Get("Location"))
	resp, _ = c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed out")
	// The old id no longer works even if replayed.
	replay := b.client(t)
	replay.http.Jar.SetCookies(resp.Request.URL, []*http.Cookie{{Name: ck.Name, Value: ck.Value}})
	resp, _ = replay.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(readToken)
	b.clock.add(59 * time.Minute)
	resp, _ := c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b.clock.add(time.Minute)
	resp, _ = c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "expired after the TTL, cookie or not")
}

func TestWrongTokenIsThrottled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	resp, body := c.do(http.MethodPost, "/login", url.Values{"token": {"guess-0123456789"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, "Sign-in failed")
	require.Empty(t, resp.Cookies())
	// Even the right token waits out the backoff.
	resp, _ = c.do(http.MethodPost, "/login", url.Values{"token": {adminToken}})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	b.clock.add(time.Second)
	resp, _ = c.do(http.MethodPost, "/login", url.Values{"token": {"guess-0123456789"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = c.do(http.MethodPost, "/login", url.Values{"token": {adminToken}})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"), "doubled")
	b.clock.add(2 * time.Second)
	c.signIn(adminToken)
	// A success forgets the failures: the next failure is the first again,
	// its wait 1 s (4 s had the count gone on).
	resp, _ = b.client(t).do(http.MethodPost, "/login", url.Values{"token": {""}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = b.client(t).do(http.MethodPost, "/login", url.Values{"token": {adminToken}})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
}

// Attempts sent together are checked one at a time: with every request's
// body held back until all are sent (so that none can fail first), one
// guess is checked and the others are told to wait.
func TestSignInAttemptsTogetherAreCheckedOneByOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20
	type answer struct {
		code  int
		retry string
	}
	answers := make(chan answer, n)
	release := make(chan struct{})
	var started sync.WaitGroup
	for range n {
		started.Add(1)
		go func() {
			pr, pw := io.Pipe()
			go func() {
				started.Done()
				<-release
				_, _ = pw.Write([]byte("token=guess-0123456789"))
				_ = pw.Close()
			}()
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+"/login", pr)
			if err != nil {
				answers <- answer{}
				return
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Accept", "text/html")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{}
				return
			}
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After")}
		}()
	}
	started.Wait()
	close(release)
	codes := map[int]int{}
	for range n {
		a := <-answers
		codes[a.code]++
		if a.code == http.StatusTooManyRequests {
			require.NotEmpty(t, a.retry)
		}
	}
	require.Equal(t, 1, codes[http.StatusUnauthorized], "one guess checked: %v", codes)
	require.Equal(t, n-1, codes[http.StatusTooManyRequests], "%v", codes)
}

func TestActionsNeedAdminAndCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin, reader := b.client(t), b.client(t)
	admin.signIn(adminToken)
	reader.signIn(readToken)

	resp, body := reader.post("/pools/stock-events/pause", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "read-only")

	resp, body = admin.do(http.MethodPost, "/pools/stock-events/pause", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Contains(t, body, "CSRF")
	resp, _ = admin.do(http.MethodPost, "/pools/stock-events/pause", url.Values{"reason": {"x"}, "csrf": {reader.csrf}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another session's CSRF token")
	require.Empty(t, b.backend.CallsTo("PausePool"))

	req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/pools/stock-events/pause", //nolint:noctx // test
		strings.NewReader(url.Values{"reason": {"x"}, "csrf": {admin.csrf}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	resp, err = admin.http.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-origin, even with the token")
	require.Empty(t, b.backend.CallsTo("PausePool"))

	// A reason PostgreSQL's text would refuse is a bad request here.
	for _, bad := range []string{"a\x00b", "bad \xff utf8", strings.Repeat("r", adminpkg.MaxReasonBytes+1)} {
		resp, body = admin.post("/pools/stock-events/pause", url.Values{"reason": {bad}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%q", bad)
		require.Contains(t, body, "Pause refused")
	}
	require.Empty(t, b.backend.CallsTo("PausePool"))

	resp, _ = admin.post("/pools/stock-events/pause", url.Values{"reason": {"incident 42"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	calls := b.backend.CallsTo("PausePool")
	require.Len(t, calls, 1)
	require.Equal(t, "ops", calls[0].Actor)
	require.Equal(t, "incident 42", calls[0].Reason)
	_, body = admin.do(http.MethodGet, "/pools/stock-events", nil)
	require.Contains(t, body, "Paused stock-events.")
	require.Contains(t, body, "Paused: incident 42")
	_, body = admin.do(http.MethodGet, "/pools/stock-events", nil)
	require.NotContains(t, body, "Paused stock-events.", "a flash shows once")
}

func TestRetryOverrideNeedsConfirmation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	id := admintest.FailedEventID.String()
	resp, body := c.post("/pools/stock-events/retry", url.Values{"event_id": {id}, "override": {"1"}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "beyond-horizon guard")
	require.Contains(t, body, `name="confirm" value="override"`)
	require.Empty(t, b.backend.CallsTo("RetryFailedMessages"), "nothing happens before the confirmation")

	resp, _ = c.post("/pools/stock-events/retry", url.Values{"event_id": {id}, "override": {"1"}, "confirm": {"override"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	calls := b.backend.CallsTo("RetryFailedMessages")
	require.Len(t, calls, 1)
	require.Equal(t, id, calls[0].IDs[0].String())
	_, body = c.do(http.MethodGet, "/pools/stock-events", nil)
	require.Contains(t, body, "Moved 1 messages back")
	require.Contains(t, body, "No failed message.")

	resp, _ = c.post("/pools/stock-events/retry", url.Values{})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "nothing selected")
	resp, _ = c.post("/pools/stock-events/retry", url.Values{"event_id": {"nope"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = c.post("/pools/stock-events/retry", url.Values{"all": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, b.backend.CallsTo("RetryFailedMessages")[1].All)
}

func TestHorizonAndPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	resp, body := c.post("/services/stock/horizon", url.Values{"horizon": {"12h"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "Horizon not changed")
	require.Contains(t, body, `value="12h"`, "the input is kept")
	resp, _ = c.post("/services/stock/horizon", url.Values{"horizon": {"5s"}, "force": {"1"}})
	require.Equal(t, http.StatusConflict, resp.StatusCode, "never at or below the retry span")
	resp, _ = c.post("/services/stock/horizon", url.Values{"horizon": {"soon"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = c.post("/services/stock/horizon", url.Values{"horizon": {"12h"}, "force": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = c.post("/services/stock/horizon", url.Values{"horizon": {"30d"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = c.do(http.MethodGet, "/services/stock", nil)
	require.Contains(t, body, "set to 30d (was 12h)")

	resp, _ = c.post("/services/stock/horizon", url.Values{"horizon": {"12h"}, "force": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = c.post("/services/stock/purge", url.Values{})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a dry run first")
	resp, body = c.post("/services/stock/purge", url.Values{"dry_run": {"1"}})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Dry run:")
	require.Contains(t, body, `data-figure="would-delete">1<`)
	require.Contains(t, body, `name="confirm" value="1"`)
	resp, _ = c.post("/services/stock/purge", url.Values{"confirm": {"1"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	runs := b.backend.CallsTo("RunPurge")
	require.Len(t, runs, 2)
	require.True(t, runs[0].DryRun)
	require.False(t, runs[1].DryRun)

	_, body = c.do(http.MethodGet, "/audit", nil)
	for _, w := range []string{"purge.run", "horizon.set", "dry_run: true", "forced: true"} {
		require.Contains(t, body, w)
	}
}

// What browsers send decides: Sec-Fetch-Site first, else Origin.
func TestSameOriginCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	host := strings.TrimPrefix(b.srv.URL, "http://")
	for _, tc := range []struct {
		name   string
		header map[string]string
		code   int
	}{
		{"SameOriginFetch", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "null"}, http.StatusSeeOther},
		{"SameSiteOtherPort", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"}, http.StatusForbidden},
		{"CrossSite", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"OriginMatches", map[string]string{"Origin": "http://" + host}, http.StatusSeeOther},
		{"OriginNull", map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"NoHeaders", nil, http.StatusSeeOther},
	} {
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+"/pools/stock-events/resume", //nolint:noctx // test
			strings.NewReader(url.Values{"csrf": {c.csrf}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := c.http.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, tc.code, resp.StatusCode, tc.name)
	}
}
