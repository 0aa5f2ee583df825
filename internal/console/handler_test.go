package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/console"
)

const (
	adminToken = "console-admin-token-0123456789"
	readToken  = "console-read-token-0123456789"
)

// clock is a settable clock for session expiry and throttling.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

type bundle struct {
	backend *admintest.Backend
	handler *console.Handler
	srv     *httptest.Server
	clock   *clock
}

// setup returns a Handler over the admintest fake, its config adjusted by
// opts.
func setup(t *testing.T, opts ...func(*console.HandlerConfig)) *bundle {
	t.Helper()
	b := &bundle{backend: admintest.New(), clock: &clock{t: admintest.Now}}
	cfg := console.HandlerConfig{
		Tokens: []admin.Token{
			{Name: "ops", Role: admin.RoleAdmin, Value: adminToken},
			{Name: "dashboards", Role: admin.RoleRead, Value: readToken},
		},
		SessionTTL: time.Hour, LoginBackoff: time.Second, NowFunc: b.clock.now,
	}
	for _, o := range opts {
		o(&cfg)
	}
	h, err := console.NewHandler(cfg, b.backend, nil)
	require.NoError(t, err)
	b.handler = h
	b.srv = httptest.NewServer(h)
	t.Cleanup(b.srv.Close)
	return b
}

// client is a browser-like client: cookies, no redirects followed, HTML
// accepted.
type client struct {
	t    *testing.T
	b    *bundle
	http *http.Client
	csrf string
}

func (b *bundle) client(t *testing.T) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, b: b, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) do(method, path string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.b.srv.URL+path, body)
	require.NoError(c.t, err)
	req.Header.Set("Accept", "text/html")
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	if m := csrfRE.FindSubmatch(data); m != nil {
		c.csrf = string(m[1])
	}
	return resp, string(data)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) signIn(token string) {
	c.t.Helper()
	resp, _ := c.do(http.MethodPost, "/login", url.Values{"token": {token}})
	require.Equal(c.t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(c.t, "/", resp.Header.Get("Location"))
	_, _ = c.do(http.MethodGet, "/", nil) // picks up the CSRF token
	require.NotEmpty(c.t, c.csrf)
}

func (c *client) post(path string, form url.Values) (*http.Response, string) {
	c.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("csrf", c.csrf)
	return c.do(http.MethodPost, path, form)
}

func TestPagesRender(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.client(t)
	c.signIn(adminToken)
	for path, want := range map[string][]string{
		"/":                                    {"stock-events", "shipping-events", "maintenance", "Processed", "1,200", "Dedup rows"},
		"/fragments/overview":                  {`id="overview-live"`, "stock-events", `data-delay-queue="platformd.retry.10s"`, "queue not declared yet"},
		"/pools/stock-events":                  {"Pause stock-events", admintest.FailedEventID.String(), "stock.reserve: unknown product"},
		"/pools/shipping-events":               {"Resume shipping-events", "No failed message."},
		"/fragments/pools/stock-events":        {`id="pool-live"`, "1,200"},
		"/fragments/pools/stock-events/failed": {`id="failed-queue"`, admintest.FailedEventID.String()},
		"/services/stock":                      {"14d", "Retry span", "11s", "Purge history", "42"},
		"/fragments/services/stock":            {`id="service-live"`},
		"/lookup":                              {"Event id"},
		"/lookup?event_id=" + admintest.SharedEventID.String(): {"processed", "shipping", "stock"},
		"/audit":               {"Nothing recorded yet."},
		"/fragments/audit":     {`id="audit-live"`},
		"/audit?service=stock": {"every service"},
	} {
		resp, body := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		for _, w := range want {
			require.Contains(t, body, w, path)
		}
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), path)
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'", path)
	}
	for path, code := range map[string]int{
		"/pools/nope":                 http.StatusNotFound,
		"/services/nope":              http.StatusNotFound,
		"/nope":                       http.StatusNotFound,
		"/lookup?event_id=not-a-uuid": http.StatusBadRequest,
		"/lookup?event_id=" + "00000000-0000-0000-0000-000000000000": http.StatusBadRequest,
		"/audit?service=nope": http.StatusNotFound,
	} {
		resp, _ := c.do(http.MethodGet, path, nil)
		require.Equal(t, code, resp.StatusCode, path)
	}
}

// A service whose database is away shows it: its error on the service and
// its pools connecting with the error, the other service as usual.
func TestPagesShowADatabaseAway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.backend.SetDatabaseError("stock", "FATAL: database \"stock\" is not currently accepting connections")
	c := b.client(t)
	c.signIn(adminToken)
	for path, want := range map[string][]string{
		"/":                   {"Database not reachable: FATAL", "Waiting for its database: FATAL", `data-state>connecting`},
		"/pools/stock-events": {"Waiting for its database: FATAL"},
	} {
		resp, body := c.do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
		for _, w := range want {
			require.Contains(t, body, w, path)
		}
	}
	_, body := c.do(http.MethodGet, "/pools/shipping-events", nil)
	require.NotContains(t, body, "Waiting for its database")
	// The audit of every service says whose it could not read; of stock
	// alone it is the database's error.
	resp, body := c.do(http.MethodGet, "/audit", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="audit-unavailable">Not shown, their database away: <strong>stock</strong>.`)
	resp, body = c.do(http.MethodGet, "/audit?service=stock", nil)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	require.NotContains(t, body, "audit-unavailable")
}

// The vendored htmx is the pinned release, served from the binary.
func TestStaticAssetsEmbedded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	resp, err := http.Get(b.srv.URL + "/static/htmx-2.0.11.min.js") //nolint:noctx // test
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sum := sha256.Sum256(data)
	require.Equal(t, "d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717", hex.EncodeToString(sum[:]))
	lic, err := os.ReadFile("static/htmx-2.0.11.LICENSE")
	require.NoError(t, err)
	require.Contains(t, string(lic), "Zero-Clause BSD")
}
