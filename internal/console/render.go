package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/config"
)

// pageNames are the templates/*.html files that are pages; each is parsed
// with layout.html.
var pageNames = []string{"login", "error", "overview", "pool", "service", "lookup", "audit", "confirm", "replay",
	"failures", "failure_events", "failure", "failure_confirm", "failure_retry"}

// pageTemplate is one page's template set.
type pageTemplate struct{ t *template.Template }

// pageData is what every page template gets.
type pageData struct {
	// Title is the page's title.
	Title string
	// Nav names the menu entry to highlight.
	Nav string
	// Session is the signed-in operator; nil on the sign-in page.
	Session *sessionView
	// Flash is a one-time notice from the previous action.
	Flash string
	// Error is an error banner.
	Error string
	// Body is the page's own data.
	Body any
	// Now is when the page was rendered.
	Now time.Time
	// KillSwitches are the services whose kill switch holds (PauseAll),
	// shown on every signed-in page (limits.go).
	KillSwitches []admin.ServicePause
}

// sessionView is what templates know of the session.
type sessionView struct {
	Name, Role, CSRF string
	Admin            bool
}

func viewOf(s session) *sessionView {
	return &sessionView{Name: s.name, Role: s.role, CSRF: s.csrf, Admin: s.role == admin.RoleAdmin}
}

func parsePages() (map[string]*pageTemplate, error) {
	pages := make(map[string]*pageTemplate, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(templateFuncs).ParseFS(assets, "templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		pages[name] = &pageTemplate{t: t}
	}
	return pages, nil
}

// render writes page with data under status. The page is rendered to a
// buffer first so that a template error is a clean 500.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, page string, data pageData) {
	h.execute(w, r, status, page, "layout", data)
}

// renderFragment writes the template called name of page: the part of the
// page that htmx polls.
func (h *Handler) renderFragment(w http.ResponseWriter, r *http.Request, page, name string, data pageData) {
	h.execute(w, r, http.StatusOK, page, name, data)
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, status int, page, name string, data pageData) {
	if data.Now.IsZero() {
		data.Now = h.now()
	}
	if name == "layout" && data.Session != nil {
		data.KillSwitches = h.killSwitches(r.Context())
	}
	var buf bytes.Buffer
	if err := h.pages[page].t.ExecuteTemplate(&buf, name, data); err != nil {
		h.log.ErrorContext(r.Context(), "console: render", slog.String("page", page), slog.String("template", name), slog.Any("error", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// page builds the pageData of a signed-in page, taking the session's
// flash message.
func (h *Handler) page(s session, title, nav string, body any) pageData {
	return pageData{Title: title, Nav: nav, Session: viewOf(s), Flash: h.sessions.takeFlash(s.id), Body: body, Now: h.now()}
}

// renderBody renders page, titled title, with body b under status: edit,
// when set, adjusts b first (a dry run's result, an input kept after a
// refusal), and msg, when set, is the page's error banner.
func renderBody[B any](h *Handler, w http.ResponseWriter, r *http.Request, s session, status int, page, title, msg string, b B, edit func(*B)) {
	if edit != nil {
		edit(&b)
	}
	data := h.page(s, title, "", b)
	data.Error = msg
	h.render(w, r, status, page, data)
}

// fragmentError answers a fragment whose data the backend did not give
// (op names the call in the log) with the error's status and text: htmx
// leaves the page as it was.
func (h *Handler) fragmentError(w http.ResponseWriter, r *http.Request, op string, err error) {
	code, text := h.backendError(r.Context(), op, err)
	http.Error(w, text, code)
}

// renderError writes the error page: msg, under status, with a way back.
func (h *Handler) renderError(w http.ResponseWriter, r *http.Request, s session, status int, msg string) {
	h.render(w, r, status, "error", pageData{Title: http.StatusText(status), Session: viewOf(s), Error: msg,
		Body: errorBody{Status: status, Back: backLink(r)}})
}

// errorBody is the error page's data.
type errorBody struct {
	Status int
	Back   string
}

// backLink returns the page a failed action came from, from its path
// (the Referer is never sent): /pools/P/pause goes back to /pools/P.
func backLink(r *http.Request) string {
	if r.Method != http.MethodPost {
		return "/"
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 4 && parts[0] == "services" && parts[2] == "failures":
		return failuresPath(parts[1])
	case len(parts) == 3 && parts[0] == "failures":
		return "/failures/" + url.PathEscape(parts[1])
	}
	if len(parts) == 3 && (parts[0] == "pools" || parts[0] == "services") {
		return "/" + parts[0] + "/" + url.PathEscape(parts[1])
	}
	return "/"
}

// templateFuncs are the formatting helpers of the templates.
var templateFuncs = template.FuncMap{
	"dur":     fmtDuration,
	"ts":      fmtTime,
	"ago":     fmtAgo,
	"num":     fmtNum,
	"rate":    fmtRate,
	"detail":  fmtDetail,
	"pathesc": url.PathEscape,
	"upper":   strings.ToUpper,
}

// fmtDuration formats d for an operator: whole days as "14d", else as the
// config writes it ("1h30m", "11s").
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return config.FormatDuration(d)
}

// fmtTime formats t in UTC to the second; "—" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// fmtAgo says how far t is from now: "3 min ago", "in 14 d", "never".
func fmtAgo(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = strconv.Itoa(int(d.Seconds())) + " s"
	case d < time.Hour:
		s = strconv.Itoa(int(d.Minutes())) + " min"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d.Hours())) + " h"
	default:
		s = strconv.Itoa(int(d.Hours()/24)) + " d"
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// fmtNum formats an integer with thousands separators: 1,234,567.
func fmtNum(v any) string {
	var s string
	switch n := v.(type) {
	case int:
		s = strconv.Itoa(n)
	case int64:
		s = strconv.FormatInt(n, 10)
	case uint64:
		s = strconv.FormatUint(n, 10)
	default:
		return fmt.Sprint(v)
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// fmtRate formats a rate per second.
func fmtRate(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64) + "/s"
	default:
		return strconv.FormatFloat(v, 'f', 1, 64) + "/s"
	}
}

// fmtDetail renders an audit entry's detail as "key: value" pairs in key
// order.
func fmtDetail(d map[string]any) []string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		var v string
		switch x := d[k].(type) {
		case nil:
			v = "none"
		case string:
			v = x
			// Horizons are recorded as Go durations: show them as the
			// pages do (720h0m0s as 30d).
			if d, err := time.ParseDuration(x); err == nil && (k == "from" || k == "to") {
				v = fmtDuration(d)
			}
		case json.Number:
			v = x.String()
		case map[string]any, json.RawMessage:
			// A retry's filter, an edit's diff: as JSON, keys sorted.
			raw, err := json.Marshal(x)
			if err != nil {
				v = fmt.Sprint(x)
			} else {
				v = string(raw)
			}
		case []any:
			parts := make([]string, len(x))
			for i, e := range x {
				parts[i] = fmt.Sprint(e)
			}
			v = strings.Join(parts, ", ")
		default:
			v = fmt.Sprint(x)
		}
		out = append(out, k+": "+v)
	}
	return out
}
