package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/fixture/shop"
)

// chromiumPath returns Debian's chromium. Without it the browser tests
// skip, with a message, unless CI is set: CI must run them.
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI must run the browser tests: scripts/services.sh installs Debian's chromium")
	}
	t.Skip("chromium is not installed (Debian package chromium; scripts/services.sh installs it): browser tests skipped")
	return ""
}

// browser is one headless Chromium with a fresh profile.
type browser struct {
	t     testing.TB
	alloc context.Context
	ctx   context.Context // the first tab
}

func newBrowser(t testing.TB, width, height int) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	start := time.Now()
	require.NoError(t, chromedp.Do(ctx), "start chromium")
	t.Logf("chromium started in %v", time.Since(start).Round(time.Millisecond))
	return &browser{t: t, alloc: alloc, ctx: ctx}
}

// incognito returns a tab in a browser context of its own: no cookies in
// common with the others.
func (b *browser) incognito() context.Context {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	require.NoError(b.t, chromedp.Do(ctx))
	return ctx
}

// do runs steps with a bound.
func do(t testing.TB, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(cctx, steps...))
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// waitFor polls the page until expr is true, across navigations (a form
// submit), for at most 30 s.
func waitFor(t testing.TB, ctx context.Context, expr, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := chromedp.Run(cctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
			t.Fatalf("%s: not seen in 30s (last error %v); page text:\n%s", what, err, html)
		}
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // a bounded poll of the browser's page (30 s deadline above)
	}
}

// textOf is the text of the first element matching a CSS selector, "" if
// none.
func textOf(sel string) string {
	return "(document.querySelector(" + js(sel) + ")?.textContent ?? '')"
}

// signIn signs the tab in with token through the form.
func signIn(t testing.TB, ctx context.Context, e *env, token string) {
	t.Helper()
	do(t, ctx, chromedp.Navigate(e.url("/")))
	waitFor(t, ctx, "location.pathname === '/login' && document.querySelector('#token')", "redirected to the sign-in form")
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#sign-in")),
	)
	waitFor(t, ctx, "location.pathname === '/' && document.querySelector('#overview-live')", "the overview after sign-in")
}

// The operator's night, in a real browser against the real daemon: sign in,
// see both pools, pause one with a reason (and the daemon really stops
// consuming), resume, retry a quarantined message and see it processed,
// look it up; a read session's pause and a forged request are refused.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	b := newBrowser(t, 1280, 900)
	e := newEnv(t, options{})
	ctx := b.ctx
	began := time.Now()
	step := func(name string, since time.Time) time.Time {
		t.Logf("%-34s %v", name, time.Since(since).Round(time.Millisecond))
		return time.Now()
	}
	at := time.Now()

	signIn(t, ctx, e, adminToken)
	stockCard := "article[data-pool=" + js(e.stockPool) + "]"
	shipCard := "article[data-pool=" + js(e.shipPool) + "]"
	waitFor(t, ctx, textOf(stockCard+" [data-state]")+" === 'running' && "+textOf(shipCard+" [data-state]")+" === 'running'",
		"both pools running on the overview")
	at = step("sign in, both pools running", at)

	// Pause with a reason, through the pool page's form.
	do(t, ctx, chromedp.Click(chromedp.CSS(stockCard+" h3 a")))
	waitFor(t, ctx, "document.querySelector('#pause')", "the pool page")
	do(t, ctx,
		chromedp.SendKeys(chromedp.CSS("#reason"), "incident 42: stock db migration"),
		chromedp.Click(chromedp.CSS("#pause")),
	)
	waitFor(t, ctx, textOf("#flash")+".includes('Paused "+e.stockPool+".')", "the pause's notice")
	waitFor(t, ctx, textOf("#pool-live [data-state]")+" === 'paused' && "+textOf("#pool-live [data-reason]")+".includes('incident 42: stock db migration')",
		"the pool shown paused with its reason")
	// The daemon really paused: no consumer, an event published now waits.
	_, consumers := queueState(t, e.stockQueue)
	require.Equal(t, 0, consumers)
	waiting := e.publish(shop.EventOrderPlaced, order(), [16]byte{})
	msgs, consumers := queueState(t, e.stockQueue)
	require.Equal(t, 0, consumers)
	require.Equal(t, 1, msgs, "the event waits in the queue")
	require.False(t, processed(t, e.stockDSN, waiting))
	at = step("pause with a reason, nothing consumed", at)

	do(t, ctx, chromedp.Click(chromedp.CSS("#resume")))
	waitFor(t, ctx, textOf("#pool-live [data-state]")+" === 'running'", "the pool running again")
	require.Eventually(t, func() bool { return processed(t, e.stockDSN, waiting) }, 30*time.Second, 50*time.Millisecond,
		"the waiting event is consumed after the resume")
	waitFor(t, ctx, textOf("#pool-live [data-figure=processed]")+" === '1'", "the processed counter on the page")
	at = step("resume, event consumed", at)

	// A message quarantined by the beyond-horizon guard, retried with the
	// override, confirmed on a page of its own.
	old := e.publish(shop.EventOrderPlaced, order(), oldEventID(400*time.Hour))
	stored := e.waitFailedEvents(e.stockDSN, 1, "failed")
	require.Equal(t, old, stored[0].EventID)
	require.Equal(t, "beyond_horizon", stored[0].Reason)
	do(t, ctx, chromedp.Click(chromedp.CSS("#refresh-failed")))
	row := "#failed-queue tr[data-event=" + js(old.String()) + "]"
	waitFor(t, ctx, textOf(row)+".includes('beyond_horizon')", "the quarantined message in the failure queue")
	do(t, ctx,
		chromedp.Click(chromedp.CSS(row+" input[type=checkbox]")),
		chromedp.Click(chromedp.CSS("#override")),
		chromedp.Click(chromedp.CSS("#retry-selected")),
	)
	waitFor(t, ctx, "document.querySelector('#confirm-override')", "the override's confirmation page")
	require.False(t, processed(t, e.stockDSN, old), "nothing moves before the confirmation")
	do(t, ctx, chromedp.Click(chromedp.CSS("#confirm-override")))
	waitFor(t, ctx, textOf("#flash")+".includes('Moved 1 messages back')", "the retry's notice")
	require.Eventually(t, func() bool { return processed(t, e.stockDSN, old) }, 30*time.Second, 50*time.Millisecond,
		"the retried message is processed")
	waitFor(t, ctx, textOf("#pool-live [data-figure=processed]")+" === '2'", "the retried message counted as processed on the page")
	do(t, ctx, chromedp.Click(chromedp.CSS("#refresh-failed")))
	waitFor(t, ctx, "document.querySelector('#failed-empty')", "no failed message left")
	require.Equal(t, "resolved", failedEvents(t, e.stockDSN)[0].State, "the retried failure resolved in the store")
	at = step("retry with override, processed", at)

	// Look the retried event up across services.
	do(t, ctx, chromedp.Click(chromedp.CSS("nav a[href='/lookup']")))
	waitFor(t, ctx, "document.querySelector('#event_id')", "the lookup page")
	do(t, ctx, chromedp.SendKeys(chromedp.CSS("#event_id"), old.String()), chromedp.Click(chromedp.CSS("#lookup")))
	waitFor(t, ctx, textOf("tr[data-service=stock] [data-processed]")+" === 'processed' && "+
		textOf("tr[data-service=shipping] [data-processed]")+" === 'not processed'", "the lookup's answer")
	at = step("lookup", at)

	// A forged request from the admin's own tab, without the CSRF token,
	// is refused.
	pausePath := "/pools/" + e.stockPool + "/pause"
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		`fetch(`+js(pausePath)+`, {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'reason=forged'}).then(r => r.status)`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, status, "no CSRF token")
	// And so is a form another site makes the browser submit, token or not.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<form id="f" method="post" action="%s"><input name="reason" value="evil"></form>
<script>document.getElementById('f').submit()</script>`, e.url(pausePath))
	}))
	defer evil.Close()
	do(t, ctx, chromedp.Navigate(evil.URL))
	waitFor(t, ctx, "location.host === "+js(e.console)+" && "+textOf("#error")+".includes('another site')", "the cross-site form refused")
	at = step("forged requests refused", at)

	// A read session: the form is disabled, and forcing it gets 403.
	reader := b.incognito()
	signIn(t, reader, e, readToken)
	waitFor(t, reader, textOf(".readonly")+".includes('Read-only')", "the read-only notice")
	do(t, reader, chromedp.Navigate(e.url("/pools/"+e.stockPool)))
	waitFor(t, reader, "document.querySelector('#pause') && document.querySelector('#pause').closest('fieldset').disabled", "the disabled pause form")
	_, err = chromedp.Run(reader, chromedp.Evaluate[bool](`(() => { const f = document.querySelector('#pause').closest('fieldset'); f.disabled = false; return true })()`))
	require.NoError(t, err)
	do(t, reader, chromedp.SendKeys(chromedp.CSS("#reason"), "read session"), chromedp.Click(chromedp.CSS("#pause")))
	waitFor(t, reader, textOf("#error")+".includes('read-only')", "the read session's pause refused")
	_, consumers = queueState(t, e.stockQueue)
	require.Equal(t, 2, consumers, "the refused pauses paused nothing")
	at = step("read session refused", at)

	// The audit page lists what the admin did, and only that.
	do(t, ctx, chromedp.Navigate(e.url("/audit")))
	waitFor(t, ctx, "document.querySelector('#audit-list tr[data-action=\"failed.retry\"]')", "the audit entries, the retry's last")
	list, err := chromedp.Run(ctx, chromedp.Evaluate[string](textOf("#audit-list")))
	require.NoError(t, err)
	for _, want := range []string{"pool.pause", "pool.resume", "failed.retry", "reason: incident 42", "override_beyond_horizon: true", "retried: 1"} {
		require.Contains(t, list, want)
	}
	require.NotContains(t, list, "dashboards")
	// The failure store records the retry it runs for the pool page too
	// (failure.retry, with its filter): beside the admin's three, nothing.
	var actions []string
	for _, a := range auditActions(t, e.stockDSN) {
		if a != "ops failure.retry "+e.stockPool {
			actions = append(actions, a)
		}
	}
	require.Equal(t, []string{"ops pool.pause " + e.stockPool, "ops pool.resume " + e.stockPool, "ops failed.retry " + e.stockPool}, actions)
	step("audit list", at)

	// Sign out.
	do(t, ctx, chromedp.Click(chromedp.CSS("#sign-out")))
	waitFor(t, ctx, "location.pathname === '/login'", "signed out")
	do(t, ctx, chromedp.Navigate(e.url("/")))
	waitFor(t, ctx, "location.pathname === '/login'", "no way back without signing in")
	t.Logf("browser test, daemon and browser start excluded: %v", time.Since(began).Round(time.Millisecond))
}
