package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
)

// confirmOverride is the value of the confirm field that lets retried
// messages through the beyond-horizon guard.
const confirmOverride = "override"

// done records msg for the next page and sends the browser to path (303,
// so a reload does not repeat the action).
func (h *Handler) done(w http.ResponseWriter, r *http.Request, s session, path, msg string) {
	h.sessions.setFlash(s.id, msg)
	http.Redirect(w, r, path, http.StatusSeeOther)
}

func poolPath(name string) string    { return "/pools/" + url.PathEscape(name) }
func servicePath(name string) string { return "/services/" + url.PathEscape(name) }

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("pool")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if p := admin.ReasonProblem(reason); p != "" {
		h.renderPool(w, r, s, http.StatusBadRequest, "Pause refused: the "+p+".")
		return
	}
	p, err := h.backend.PausePool(r.Context(), name, reason, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "PausePool", err)
		h.renderPool(w, r, s, code, "Pause failed: "+text)
		return
	}
	msg := "Paused " + p.Name + "."
	if p.InFlight > 0 {
		msg += fmt.Sprintf(" %d messages were still in flight and settle on their own.", p.InFlight)
	}
	h.done(w, r, s, poolPath(name), msg)
}

func (h *Handler) resume(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("pool")
	p, err := h.backend.ResumePool(r.Context(), name, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "ResumePool", err)
		h.renderPool(w, r, s, code, "Resume failed: "+text)
		return
	}
	h.done(w, r, s, poolPath(name), "Resumed "+p.Name+".")
}

// confirmBody is the confirmation page's data: the retry to repeat with
// confirm=override.
type confirmBody struct {
	Pool     string
	All      bool
	EventIDs []string
}

// retry moves failed messages back to the pool's queue: the selected
// event_id values, or all. Letting them through the beyond-horizon guard
// (override) takes a second, explicit step: without confirm=override the
// answer is a page that says what that means and asks again.
func (h *Handler) retry(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("pool")
	all := r.PostForm.Get("all") == "1"
	override := r.PostForm.Get("override") == "1"
	raw := r.PostForm["event_id"]
	var ids []uuid.UUID
	if !all {
		if len(raw) == 0 {
			h.renderPool(w, r, s, http.StatusBadRequest, "Select at least one message to retry, or retry all.")
			return
		}
		if len(raw) > admin.ListLimitMax {
			h.renderPool(w, r, s, http.StatusBadRequest, fmt.Sprintf("At most %d messages can be retried at once.", admin.ListLimitMax))
			return
		}
		for _, v := range raw {
			id, err := parseEventID(v)
			if err != nil {
				h.renderPool(w, r, s, http.StatusBadRequest, err.Error())
				return
			}
			ids = append(ids, id)
		}
	}
	if override && r.PostForm.Get("confirm") != confirmOverride {
		b := confirmBody{Pool: name, All: all}
		for _, id := range ids {
			b.EventIDs = append(b.EventIDs, id.String())
		}
		h.render(w, r, http.StatusOK, "confirm", h.page(s, "Confirm the override", "", b))
		return
	}
	n, err := h.backend.RetryFailedMessages(r.Context(), name, ids, all, override, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "RetryFailedMessages", err)
		h.renderPool(w, r, s, code, fmt.Sprintf("Retry failed after moving %d messages: %s", n, text))
		return
	}
	msg := fmt.Sprintf("Moved %d messages back to the queue.", n)
	switch {
	case n == 0:
		msg = "No message was moved: the selected ones are no longer failed."
	case override:
		msg += " They pass the beyond-horizon guard."
	}
	h.done(w, r, s, poolPath(name), msg)
}

// parseHorizon parses a horizon as typed by an operator: a Go duration
// ("336h", "90m") or a whole number of days ("14d").
func parseHorizon(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n > 0 && n <= 365*100 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration: write e.g. 14d, 336h or 90m", s)
	}
	return d, nil
}

func (h *Handler) setHorizon(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("service")
	input := r.PostForm.Get("horizon")
	keep := func(b *serviceBody) { b.HorizonInput = input }
	d, err := parseHorizon(input)
	if err != nil {
		h.renderService(w, r, s, http.StatusBadRequest, err.Error(), keep)
		return
	}
	force := r.PostForm.Get("force") == "1"
	before, _ := h.backend.GetHorizon(r.Context(), name)
	got, err := h.backend.SetHorizon(r.Context(), name, d, force, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "SetHorizon", err)
		h.renderService(w, r, s, code, "Horizon not changed: "+text, keep)
		return
	}
	msg := fmt.Sprintf("Horizon of %s set to %s (was %s).", name, fmtDuration(got.Horizon), fmtDuration(before.Horizon))
	if got.Horizon < got.MinHorizon {
		msg += fmt.Sprintf(" It is under min_horizon %s: forced.", fmtDuration(got.MinHorizon))
	}
	h.done(w, r, s, servicePath(name), msg)
}

// purge runs a dry run (dry_run=1), shown on the service page with the
// button for the real purge, or the real purge, which that button sends
// with confirm=1.
func (h *Handler) purge(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("service")
	dry := r.PostForm.Get("dry_run") == "1"
	if !dry && r.PostForm.Get("confirm") != "1" {
		h.renderService(w, r, s, http.StatusBadRequest, "Run a dry run first: it shows how many rows the purge deletes.", nil)
		return
	}
	run, err := h.backend.RunPurge(r.Context(), name, dry, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "RunPurge", err)
		h.renderService(w, r, s, code, "Purge failed: "+text, nil)
		return
	}
	if dry {
		h.renderService(w, r, s, http.StatusOK, "", func(b *serviceBody) { b.DryRun = &run })
		return
	}
	h.done(w, r, s, servicePath(name), fmt.Sprintf("Purged %s rows of %s processed before %s.", fmtNum(run.Deleted), name, fmtTime(run.Cutoff)))
}
