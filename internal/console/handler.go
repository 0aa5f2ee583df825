package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strings"
	"time"

	"github.com/platformd/platformd/internal/admin"
)

//go:embed static templates
var assets embed.FS

// maxFormBytes bounds a POSTed form (a retry of many selected messages is
// the largest).
const maxFormBytes = 1 << 20

// Cookie names: with TLS the __Host- prefix makes the browser refuse the
// cookie unless it is Secure, host-only and for path /.
const (
	cookieName       = "platformd_session"
	secureCookieName = "__Host-platformd_session"
)

// contentSecurityPolicy lets pages load only the console's own script and
// stylesheet, post forms only to the console, and never be framed.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	// Tokens are the tokens operators sign in with.
	Tokens []admin.Token
	// SecureCookie marks the session cookie Secure (set when serving TLS).
	SecureCookie bool
	// SessionTTL, SampleEvery and LoginBackoff: see Config.
	SessionTTL, SampleEvery, LoginBackoff time.Duration
	// NowFunc is the clock; nil means time.Now. For tests.
	NowFunc func() time.Time
	// FailurePageSize is how many failures a page of a failure group
	// lists (default FailurePageSizeDefault).
	FailurePageSize int
}

// FailurePageSizeDefault is the default of HandlerConfig.FailurePageSize.
const FailurePageSizeDefault = 50

// Handler is the console's http.Handler: pages, fragments, actions and
// static assets. It is safe for concurrent use. Its charts need Sample to
// run.
type Handler struct {
	backend         admin.Backend
	log             *slog.Logger
	tokens          *tokenSet
	sessions        *sessionStore
	throttle        *loginThrottle
	sampler         *sampler
	sampleEvery     time.Duration
	failurePageSize int
	secure          bool
	now             func() time.Time
	pages           map[string]*pageTemplate
	mux             *http.ServeMux
}

// NewHandler returns a Handler calling backend. A nil logger discards logs.
func NewHandler(cfg HandlerConfig, backend admin.Backend, logger *slog.Logger) (*Handler, error) {
	if backend == nil {
		return nil, errors.New("console: nil backend")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tokens, err := newTokenSet(cfg.Tokens)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	now := cfg.NowFunc
	if now == nil {
		now = time.Now
	}
	pages, err := parsePages()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	h := &Handler{
		backend:         backend,
		log:             logger,
		tokens:          tokens,
		sessions:        newSessionStore(cmp.Or(cfg.SessionTTL, SessionTTLDefault), now),
		throttle:        newLoginThrottle(cmp.Or(cfg.LoginBackoff, LoginBackoffDefault), LoginBackoffMax, now),
		sampler:         newSampler(ChartWindow),
		sampleEvery:     cmp.Or(cfg.SampleEvery, SampleEveryDefault),
		failurePageSize: min(cmp.Or(cfg.FailurePageSize, FailurePageSizeDefault), admin.ListLimitMax),
		secure:          cfg.SecureCookie,
		now:             now,
		pages:           pages,
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	static, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	files := http.FileServerFS(static)
	m := http.NewServeMux()
	m.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(time.Hour, files)))
	m.HandleFunc("GET /login", h.loginPage)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.action(h.logout, false))

	m.HandleFunc("GET /{$}", h.authed(h.overview))
	m.HandleFunc("GET /fragments/overview", h.authed(h.overviewFragment))
	m.HandleFunc("GET /pools/{pool}", h.authed(h.poolPage))
	m.HandleFunc("GET /fragments/pools/{pool}", h.authed(h.poolFragment))
	m.HandleFunc("GET /fragments/pools/{pool}/failed", h.authed(h.failedFragment))
	m.HandleFunc("POST /pools/{pool}/pause", h.action(h.pause, true))
	m.HandleFunc("POST /pools/{pool}/resume", h.action(h.resume, true))
	m.HandleFunc("POST /pools/{pool}/retry", h.action(h.retry, true))
	m.HandleFunc("POST /pools/{pool}/limits", h.action(h.setLimits, true)) // limits.go
	m.HandleFunc("GET /services/{service}", h.authed(h.servicePage))
	m.HandleFunc("GET /fragments/services/{service}", h.authed(h.serviceFragment))
	m.HandleFunc("POST /services/{service}/horizon", h.action(h.setHorizon, true))
	m.HandleFunc("POST /services/{service}/purge", h.action(h.purge, true))
	m.HandleFunc("GET /replays/{service}", h.authed(h.replayPage))
	m.HandleFunc("GET /fragments/replays/{service}", h.authed(h.replayFragment))
	m.HandleFunc("POST /replays/{service}", h.action(h.startReplay, true))
	m.HandleFunc("POST /replays/{service}/{id}/cancel", h.action(h.cancelReplay, true))
	m.HandleFunc("GET /services/{service}/failures", h.authed(h.failuresPage))
	m.HandleFunc("GET /services/{service}/failures/events", h.authed(h.failureEventsPage))
	m.HandleFunc("GET /fragments/services/{service}/failures/retries", h.authed(h.failureRetriesFragment))
	m.HandleFunc("POST /services/{service}/failures/retry", h.action(h.retryFailures, true))
	m.HandleFunc("POST /services/{service}/failures/discard", h.action(h.discardFailures, true))
	m.HandleFunc("GET /services/{service}/failures/retries/{id}", h.authed(h.failureRetryPage))
	m.HandleFunc("GET /fragments/services/{service}/failures/retries/{id}", h.authed(h.failureRetryFragment))
	m.HandleFunc("POST /services/{service}/failures/retries/{id}/cancel", h.action(h.cancelFailureRetry, true))
	m.HandleFunc("GET /failures/{id}", h.authed(h.failurePage))
	m.HandleFunc("POST /failures/{id}/edit", h.action(h.editFailure, true))
	m.HandleFunc("GET /lookup", h.authed(h.lookup))
	m.HandleFunc("GET /audit", h.authed(h.audit))
	m.HandleFunc("GET /fragments/audit", h.authed(h.auditFragment))
	// Anything else: a session first (no probing without one), then 404.
	m.HandleFunc("/", h.authed(func(w http.ResponseWriter, r *http.Request, s session) {
		h.renderError(w, r, s, http.StatusNotFound, "No such page.")
	}))
	h.mux = m
}

// ServeHTTP implements http.Handler: security headers on every response, a
// recovered panic answered 500 without detail, then the routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer browsers send
	// "Origin: null" with form posts, which the same-origin check must
	// then refuse.
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cross-Origin-Resource-Policy", "same-origin")
	if h.secure {
		hd.Set("Strict-Transport-Security", "max-age=31536000")
	}
	defer h.recoverPanic(w, r)
	h.mux.ServeHTTP(w, r)
}

// recoverPanic, deferred, logs a handler's panic with its stack and answers
// 500 without detail. http.ErrAbortHandler goes on up, as net/http wants.
func (h *Handler) recoverPanic(w http.ResponseWriter, r *http.Request) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler { //nolint:errorlint // compared as net/http does
		panic(p)
	}
	h.log.ErrorContext(r.Context(), "console: panic in handler", slog.String("path", r.URL.Path),
		slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// cacheFor lets browsers keep static assets for d.
func cacheFor(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("private, max-age=%d", int(d.Seconds())))
		next.ServeHTTP(w, r)
	})
}

// Sample reads the pools' counters every sampling period, for the charts,
// until ctx ends.
func (h *Handler) Sample(ctx context.Context) {
	t := time.NewTicker(h.sampleEvery)
	defer t.Stop()
	for {
		h.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Handler) sampleOnce(ctx context.Context) {
	pools, err := h.backend.ListPools(ctx, "")
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "console: sample pools", slog.Any("error", err))
		}
		return
	}
	counters := make(map[string]uint64, len(pools))
	for _, p := range pools {
		counters[p.Name] = p.Processed
	}
	h.sampler.add(h.now(), counters)
}

// handlerFunc is a handler for a signed-in operator.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s session)

// cookieName returns the session cookie's name.
func (h *Handler) cookieName() string {
	if h.secure {
		return secureCookieName
	}
	return cookieName
}

// session returns the request's live session.
func (h *Handler) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(h.cookieName())
	if err != nil || c.Value == "" {
		return session{}, false
	}
	return h.sessions.get(c.Value)
}

// authed runs fn for a signed-in operator. Anyone else is sent to /login:
// a browser by a redirect, htmx by HX-Redirect, any other client by 401.
func (h *Handler) authed(fn handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := h.session(r)
		if !ok {
			h.unauthenticated(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		fn(w, r, s)
	}
}

func (h *Handler) unauthenticated(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Header.Get("HX-Request") == "true":
		w.Header().Set("HX-Redirect", "/login")
		http.Error(w, "sign in at /login", http.StatusUnauthorized)
	case wantsHTML(r):
		// A form posted after the session ended too: the browser is sent
		// to sign in, not shown a bare 401 (the action is not done).
		http.Redirect(w, r, "/login", http.StatusSeeOther)
	default:
		http.Error(w, "sign in at /login", http.StatusUnauthorized)
	}
}

// wantsHTML reports whether the client is a browser asking for a page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// action runs fn for a state-changing request: a session, a same-origin
// request carrying the session's CSRF token and, if needsAdmin, an admin
// session. Refusals are 401 (no session; a browser is sent to /login) and
// 403 (the rest).
func (h *Handler) action(fn handlerFunc, needsAdmin bool) http.HandlerFunc {
	return h.authed(func(w http.ResponseWriter, r *http.Request, s session) {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.renderError(w, r, s, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if !sameOrigin(r) {
			h.log.WarnContext(r.Context(), "console: cross-site request refused", slog.String("path", r.URL.Path),
				slog.String("actor", s.name), slog.String("origin", r.Header.Get("Origin")))
			h.renderError(w, r, s, http.StatusForbidden, "Refused: the request came from another site.")
			return
		}
		if !s.validCSRF(r.PostForm.Get("csrf")) && !s.validCSRF(r.Header.Get("X-CSRF-Token")) {
			h.log.WarnContext(r.Context(), "console: request without a valid CSRF token refused",
				slog.String("path", r.URL.Path), slog.String("actor", s.name))
			h.renderError(w, r, s, http.StatusForbidden, "Refused: the form's CSRF token is missing or wrong. Reload the page and try again.")
			return
		}
		if needsAdmin && s.role != admin.RoleAdmin {
			h.log.WarnContext(r.Context(), "console: action refused to a read session",
				slog.String("path", r.URL.Path), slog.String("actor", s.name))
			h.renderError(w, r, s, http.StatusForbidden, "Refused: this session is read-only. Sign in with an admin token to act.")
			return
		}
		fn(w, r, s)
	})
}

// sameOrigin reports whether r did not come from another site. Browsers
// send Sec-Fetch-Site: it must be same-origin (or none, typed by the user).
// Without it, an Origin header, when sent, must name this host. Clients
// that send neither (scripts, curl) pass; they still need the CSRF token,
// which only a console page reveals.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// clientAddr returns the client's IP address, the unit of the sign-in
// throttle. Behind a reverse proxy every client shares the proxy's.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
