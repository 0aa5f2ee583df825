package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/replay"
)

// replayListLimit is how many replays the replay page lists.
const replayListLimit = 20

// replayForm is the replay page's selection, as typed (kept across the dry
// run so that the start button replays exactly what was counted).
type replayForm struct {
	EventNames, From, To, EventIDs, TargetPool, Rate string
	IncludeBeyondHorizon                             bool
}

// replayBody is the replay page's data.
type replayBody struct {
	Service   string
	Form      replayForm
	Pools     []string
	DryRun    *admin.ReplayInfo
	Replays   []admin.ReplayInfo
	ListError string
}

func replayPath(service string) string { return "/replays/" + url.PathEscape(service) }

// fields splits a list typed with commas, spaces or new lines.
func fields(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
}

// request turns the form into a ReplayRequest; the error names the field.
func (f replayForm) request(service string) (admin.ReplayRequest, error) {
	req := admin.ReplayRequest{Service: service, EventNames: fields(f.EventNames), TargetPool: strings.TrimSpace(f.TargetPool),
		Rate: replay.RateDefault, IncludeBeyondHorizon: f.IncludeBeyondHorizon}
	for _, t := range []struct {
		name, value string
		dst         *time.Time
	}{{"From", f.From, &req.From}, {"To", f.To, &req.To}} {
		v := strings.TrimSpace(t.value)
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return req, fmt.Errorf("%s: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", t.name, v)
		}
		*t.dst = at
	}
	if !req.From.IsZero() && !req.To.IsZero() && !req.From.Before(req.To) {
		return req, fmt.Errorf("from (%s) must be before to (%s)", fmtTime(req.From), fmtTime(req.To))
	}
	for _, v := range fields(f.EventIDs) {
		id, err := parseEventID(v)
		if err != nil {
			return req, fmt.Errorf("event ids: %w", err)
		}
		req.EventIDs = append(req.EventIDs, id)
	}
	if v := strings.TrimSpace(f.Rate); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > replay.RateMax {
			return req, fmt.Errorf("rate: %q is not a number of messages per second between 1 and %d", v, replay.RateMax)
		}
		req.Rate = n
	}
	if req.IncludeBeyondHorizon && req.TargetPool == "" {
		return req, fmt.Errorf("include beyond horizon needs a target pool: through the exchange each service's own guard applies")
	}
	return req, nil
}

func formOf(r *http.Request) replayForm {
	return replayForm{
		EventNames: r.PostForm.Get("event_names"), From: r.PostForm.Get("from"), To: r.PostForm.Get("to"),
		EventIDs: r.PostForm.Get("event_ids"), TargetPool: r.PostForm.Get("target_pool"), Rate: r.PostForm.Get("rate"),
		IncludeBeyondHorizon: r.PostForm.Get("include_beyond_horizon") == "1",
	}
}

// replayData reads what the replay page shows of service.
func (h *Handler) replayData(ctx context.Context, service string) (replayBody, error) {
	b := replayBody{Service: service}
	pools, err := h.backend.ListPools(ctx, "")
	if err != nil {
		return b, err
	}
	for _, p := range pools {
		b.Pools = append(b.Pools, p.Name)
	}
	b.Replays, err = h.backend.ListReplays(ctx, service, replayListLimit)
	if err != nil {
		_, b.ListError = h.backendError(ctx, "ListReplays", err)
	}
	return b, nil
}

func (h *Handler) renderReplay(w http.ResponseWriter, r *http.Request, s session, status int, msg string, edit func(*replayBody)) {
	service := r.PathValue("service")
	b, err := h.replayData(r.Context(), service)
	if err != nil {
		code, text := h.backendError(r.Context(), "replay page", err)
		h.renderError(w, r, s, code, text)
		return
	}
	renderBody(h, w, r, s, status, "replay", "Replay "+service, msg, b, edit)
}

func (h *Handler) replayPage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderReplay(w, r, s, http.StatusOK, "", nil)
}

func (h *Handler) replayFragment(w http.ResponseWriter, r *http.Request, s session) {
	b, err := h.replayData(r.Context(), r.PathValue("service"))
	if err != nil {
		h.fragmentError(w, r, "replay page", err)
		return
	}
	h.renderFragment(w, r, "replay", "replay-live", pageData{Session: viewOf(s), Body: b, Now: h.now()})
}

// startReplay runs the dry run (dry_run=1: the page shows its table and
// a button to start exactly that replay) or starts the replay (confirm=1).
func (h *Handler) startReplay(w http.ResponseWriter, r *http.Request, s session) {
	service := r.PathValue("service")
	f := formOf(r)
	keep := func(b *replayBody) { b.Form = f }
	req, err := f.request(service)
	if err != nil {
		h.renderReplay(w, r, s, http.StatusBadRequest, "Replay refused: "+err.Error(), keep)
		return
	}
	dry := r.PostForm.Get("confirm") != "1"
	req.DryRun = dry
	info, err := h.backend.ReplayEvents(r.Context(), req, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "ReplayEvents", err)
		h.renderReplay(w, r, s, code, "Replay refused: "+text, keep)
		return
	}
	if dry {
		h.renderReplay(w, r, s, http.StatusOK, "", func(b *replayBody) { b.Form, b.DryRun = f, &info })
		return
	}
	h.done(w, r, s, replayPath(service), fmt.Sprintf("Replay %s started: %s events at %d/s.", info.ID, fmtNum(info.Matched), info.Rate))
}

func (h *Handler) cancelReplay(w http.ResponseWriter, r *http.Request, s session) {
	service := r.PathValue("service")
	id, err := parseEventID(r.PathValue("id"))
	if err != nil {
		h.renderReplay(w, r, s, http.StatusBadRequest, err.Error(), nil)
		return
	}
	info, err := h.backend.CancelReplay(r.Context(), service, id, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "CancelReplay", err)
		h.renderReplay(w, r, s, code, "Cancel failed: "+text, nil)
		return
	}
	h.done(w, r, s, replayPath(service), fmt.Sprintf("Replay %s %s after %s events.", info.ID, info.State, fmtNum(info.Published)))
}
