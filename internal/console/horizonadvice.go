package console

import (
	"context"

	"github.com/platformd/platformd/internal/admin"
)

// adviceView is the horizon advice shown beside the horizon on the service
// page (read on the page's load, not on its live refresh: the advice
// reads several tables).
type adviceView struct {
	// Advice is the advice over the default window; zero with Error set.
	Advice admin.HorizonAdvice
	// Error says why there is no advice ("" when there is).
	Error string
}

// advice reads service's horizon advice over the default window; an error
// is shown in its place, never failing the page.
func (h *Handler) advice(ctx context.Context, service string) *adviceView {
	a, err := h.backend.AdviseHorizon(ctx, service, admin.AdviseWindowDefault, false)
	if err != nil {
		_, text := h.backendError(ctx, "horizon advice", err)
		return &adviceView{Error: text}
	}
	return &adviceView{Advice: a}
}

// AdvisedBytes is the advised horizon's processed_event size, in binary
// units.
func (v *adviceView) AdvisedBytes() string { return admin.BytesText(v.Advice.AdvisedBytes) }

// Bytes is processed_event's size now, in binary units.
func (v *adviceView) Bytes() string { return admin.BytesText(v.Advice.ProcessedEventBytes) }
