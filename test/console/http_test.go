package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Against the real daemon over plain HTTP: nothing without a session, read
// sessions act on nothing, admin actions need the CSRF token and a
// same-origin request, and an accepted pause really stops consumption.
func TestConsoleAuthHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	pool := "/pools/" + e.stockPool

	// No session: a browser is sent to /login, anything else gets 401.
	anon := e.operator()
	for _, path := range []string{"/", pool, "/services/stock", "/lookup", "/audit", "/fragments/overview"} {
		resp, _ := anon.get(path)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, path)
		require.Equal(t, "/login", resp.Header.Get("Location"), path)
		resp, err := anon.http.Get(e.url(path))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "non-browser %s", path)
	}
	resp, _ := anon.do(http.MethodPost, pool+"/pause", url.Values{"reason": {"anonymous"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a browser's form without a session: sign in first")
	require.Equal(t, "/login", resp.Header.Get("Location"))
	resp, _ = anon.do(http.MethodPost, pool+"/pause", url.Values{"reason": {"anonymous"}}, http.Header{"Accept": {"*/*"}})
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	ops := e.operator().signIn(adminToken)
	e.waitPoolsRunning(ops)

	// The session cookie: HttpOnly, SameSite=Strict, not Secure on plain
	// HTTP, with an expiry.
	jarCookies := ops.http.Jar.Cookies(mustURL(t, e.url("/")))
	require.Len(t, jarCookies, 1)
	resp, _ = e.operator().do(http.MethodPost, "/login", url.Values{"token": {adminToken}}, nil)
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	require.Equal(t, "platformd_session", ck.Name)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.False(t, ck.Secure)
	require.Equal(t, int((8 * time.Hour).Seconds()), ck.MaxAge)

	// A read session sees everything and changes nothing.
	dash := e.operator().signIn(readToken)
	_, body := dash.get("/")
	require.Contains(t, body, e.stockPool)
	require.Contains(t, body, e.shipPool)
	require.Contains(t, body, "Read-only session")
	for path, form := range map[string]url.Values{
		pool + "/pause":           {"reason": {"read session"}},
		pool + "/retry":           {"all": {"1"}},
		"/services/stock/horizon": {"horizon": {"720h"}},
		"/services/stock/purge":   {"dry_run": {"1"}},
	} {
		resp, body := dash.post(path, form)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		require.Contains(t, body, "read-only", path)
	}

	// Admin actions need the session's own CSRF token and a same-origin
	// request.
	resp, body = ops.do(http.MethodPost, pool+"/pause", url.Values{"reason": {"forged"}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	require.Contains(t, body, "CSRF")
	resp, _ = ops.do(http.MethodPost, pool+"/pause", url.Values{"reason": {"forged"}, "csrf": {dash.csrf}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another session's token")
	resp, _ = ops.do(http.MethodPost, pool+"/pause", url.Values{"reason": {"forged"}, "csrf": {ops.csrf}},
		http.Header{"Origin": {"http://evil.example"}})
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-origin")
	_, consumers := queueState(t, e.stockQueue)
	require.Equal(t, 2, consumers, "nothing refused paused the pool")
	require.Empty(t, auditActions(t, e.stockDSN), "nothing refused was done")

	// The real thing.
	resp, _ = ops.post(pool+"/pause", url.Values{"reason": {"incident 42"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, pool, resp.Header.Get("Location"))
	_, body = ops.get(pool)
	require.Contains(t, body, "Paused "+e.stockPool+".")
	require.Contains(t, body, "Paused: incident 42")
	require.Contains(t, body, `data-state>paused<`)
	_, consumers = queueState(t, e.stockQueue)
	require.Equal(t, 0, consumers, "the pause answered once every worker had cancelled its consumer")
	resp, _ = ops.post(pool+"/resume", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Eventually(t, func() bool { _, c := queueState(t, e.stockQueue); return c == 2 }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"ops pool.pause " + e.stockPool, "ops pool.resume " + e.stockPool}, auditActions(t, e.stockDSN))

	// Sign out ends the session on the server.
	resp, _ = ops.post("/logout", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = ops.get("/")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
}

// Against the real daemon over TLS (the admin API's files): a Secure
// cookie, wrong tokens answered 401 then slowed down, and sessions that
// expire.
func TestConsoleAuthTLS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{tls: true, sessionTTL: "3s"})

	// Plain HTTP to the TLS listener gets nothing.
	plain := &http.Client{Timeout: 10 * time.Second}
	if resp, err := plain.Get("http://" + e.console + "/login"); err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	}

	guesser := e.operator()
	const wrong = "console-e2e-wrong-token-0123456789"
	resp, body := guesser.do(http.MethodPost, "/login", url.Values{"token": {wrong}}, nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, "Sign-in failed")
	require.Empty(t, resp.Cookies())
	// Slowed down: even the right token must wait.
	resp, _ = guesser.do(http.MethodPost, "/login", url.Values{"token": {adminToken}}, nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Empty(t, resp.Cookies())
	require.Contains(t, e.stderr.String(), "console: sign-in failed")
	require.NotContains(t, e.stderr.String(), wrong, "the presented token is never logged")

	// The wait after one failure is about a second.
	var signedIn time.Time
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, _ = guesser.do(http.MethodPost, "/login", url.Values{"token": {adminToken}}, nil)
		signedIn = time.Now()
		if resp.StatusCode == http.StatusSeeOther {
			break
		}
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		require.True(t, time.Now().Before(deadline), "still throttled after 10s")
		time.Sleep(100 * time.Millisecond) //nolint:forbidigo // the sign-in throttle's pace: retry until it lets us in, bounded by deadline
	}
	require.Len(t, resp.Cookies(), 1)
	ck := resp.Cookies()[0]
	require.Equal(t, "__Host-platformd_session", ck.Name)
	require.True(t, ck.Secure)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	require.Equal(t, 3, ck.MaxAge)

	resp, _ = guesser.get("/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// The server forgets the session at its expiry, whatever the browser
	// keeps: replay the cookie by hand until it is refused.
	c := guesser.http.Jar.Cookies(mustURL(t, e.url("/")))
	require.Len(t, c, 1)
	id := c[0].Value
	replay := func() int {
		req, err := http.NewRequest(http.MethodGet, e.url("/"), nil) //nolint:noctx // test
		require.NoError(t, err)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(&http.Cookie{Name: "__Host-platformd_session", Value: id})
		resp, err := e.httpClient().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Eventually(t, func() bool { return replay() == http.StatusSeeOther }, 15*time.Second, 100*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(signedIn), 2*time.Second, "not before the TTL")
	resp, _ = guesser.do(http.MethodGet, "/", nil, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/login", resp.Header.Get("Location"))
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}
