package console

import (
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
)

// maxTokenBytes bounds a presented token; configured ones are far shorter.
const maxTokenBytes = 4096

// loginPage serves the sign-in form. A signed-in operator goes to the
// overview.
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.session(r); ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	h.renderLogin(w, r, http.StatusOK, "")
}

func (h *Handler) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "login", pageData{Title: "Sign in", Error: msg})
}

// login checks the presented token. The client's address must not be
// waiting out earlier failures (429 otherwise); a failure is logged
// without the token and lengthens its wait; a success starts a session and
// redirects to the overview.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	client := clientAddr(r)
	if !sameOrigin(r) {
		h.log.WarnContext(r.Context(), "console: cross-site sign-in refused", slog.String("client", client))
		h.renderLogin(w, r, http.StatusForbidden, "Refused: the sign-in came from another site.")
		return
	}
	// The form first: an attempt whose body is slow to come must not hold
	// its place while others pass the throttle.
	r.Body = http.MaxBytesReader(w, r.Body, maxTokenBytes+1024)
	if err := r.ParseForm(); err != nil {
		h.renderLogin(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if wait := h.throttle.begin(client); wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.log.WarnContext(r.Context(), "console: sign-in refused, client must wait after failed attempts",
			slog.String("client", client), slog.Duration("wait", wait))
		h.renderLogin(w, r, http.StatusTooManyRequests, "Too many failed sign-ins: wait "+strconv.Itoa(secs)+" s and try again.")
		return
	}
	name, role, err := h.tokens.check(r.PostForm.Get("token"))
	if err != nil {
		n, wait := h.throttle.fail(client)
		h.log.WarnContext(r.Context(), "console: sign-in failed", slog.String("client", client),
			slog.Int("failures", n), slog.Duration("wait", wait))
		h.renderLogin(w, r, http.StatusUnauthorized, "Sign-in failed: that token is not valid.")
		return
	}
	h.throttle.succeed(client)
	s := h.sessions.create(name, role)
	http.SetCookie(w, h.cookie(s.id, s.expires))
	h.log.InfoContext(r.Context(), "console: signed in", slog.String("actor", name), slog.String("role", role),
		slog.String("client", client))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// cookie returns the session cookie for id, expiring with the session.
func (h *Handler) cookie(id string, expires time.Time) *http.Cookie {
	c := &http.Cookie{
		Name:     h.cookieName(),
		Value:    id,
		Path:     "/",
		HttpOnly: true,
		Secure:   h.secure,
		SameSite: http.SameSiteStrictMode,
	}
	if expires.IsZero() {
		c.MaxAge = -1
	} else {
		c.Expires = expires
		c.MaxAge = max(1, int(math.Round(expires.Sub(h.now()).Seconds())))
	}
	return c
}

// logout ends the session and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s session) {
	h.sessions.delete(s.id)
	http.SetCookie(w, h.cookie("", time.Time{}))
	h.log.InfoContext(r.Context(), "console: signed out", slog.String("actor", s.name))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
