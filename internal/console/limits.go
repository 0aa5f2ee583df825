package console

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/platformd/platformd/internal/admin"
)

// killSwitches returns the services whose kill switch holds; an error
// shows none (the banner is a courtesy, the pools' states tell the truth).
func (h *Handler) killSwitches(ctx context.Context) []admin.ServicePause {
	sw, err := h.backend.KillSwitches(ctx)
	if err != nil {
		return nil
	}
	return sw
}

// limits reads the pool's limits in force.
func (h *Handler) limits(ctx context.Context, pool string) (admin.PoolLimitsInfo, string) {
	l, err := h.backend.GetPoolLimits(ctx, pool)
	if err != nil {
		_, text := h.backendError(ctx, "GetPoolLimits", err)
		return l, text
	}
	return l, ""
}

// setLimits sets the pool's limits from the pool page's form.
func (h *Handler) setLimits(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("pool")
	f := r.PostForm
	refuse := func(msg string) { h.renderPool(w, r, s, http.StatusBadRequest, "Limits refused: "+msg+".") }
	rate, err := strconv.ParseFloat(strings.TrimSpace(cmp.Or(f.Get("rate"), "0")), 64)
	if err != nil {
		refuse("rate is not a number")
		return
	}
	burst, err := strconv.Atoi(strings.TrimSpace(cmp.Or(f.Get("burst"), "0")))
	if err != nil {
		refuse("burst is not a whole number")
		return
	}
	conc, err := strconv.Atoi(strings.TrimSpace(cmp.Or(f.Get("concurrency"), "0")))
	if err != nil {
		refuse("concurrency is not a whole number")
		return
	}
	if p := admin.PoolLimitsProblem(rate, burst, conc); p != "" {
		refuse(p)
		return
	}
	reason := strings.TrimSpace(f.Get("reason"))
	if p := admin.ReasonProblem(reason); p != "" {
		refuse("the " + p)
		return
	}
	l, err := h.backend.SetPoolLimits(r.Context(), admin.PoolLimitsRequest{Pool: name, Rate: rate, Burst: burst, Concurrency: conc, Reason: reason}, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "SetPoolLimits", err)
		h.renderPool(w, r, s, code, "Limits failed: "+text)
		return
	}
	rateText := "no rate limit"
	if l.Rate > 0 {
		rateText = fmt.Sprintf("%g/s", l.Rate)
	}
	h.done(w, r, s, poolPath(name), fmt.Sprintf("Limits of %s set: %s, concurrency %d.", name, rateText, l.Concurrency))
}
