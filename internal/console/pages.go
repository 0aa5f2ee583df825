package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// failedListLimit is how many failed messages the pool page shows.
const failedListLimit = 100

// purgeRunsLimit is how many purge runs the service page shows.
const purgeRunsLimit = 20

// auditLimit is how many audit entries the audit page shows.
const auditLimit = 200

// backendError returns the HTTP status and the message an operator sees
// for a Backend error. Sentinel errors' texts are meant for clients (see
// admin.ErrNotFound, and the failure store's, which the backend may
// pass on as they are); anything else is logged and shown as "internal
// error".
func (h *Handler) backendError(ctx context.Context, op string, err error) (int, string) {
	switch {
	case errors.Is(err, admin.ErrNotFound), errors.Is(err, failure.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, admin.ErrInvalidArgument), errors.Is(err, failure.ErrInvalid):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, admin.ErrBelowMinHorizon), errors.Is(err, admin.ErrFailedPrecondition), errors.Is(err, failure.ErrPrecondition):
		return http.StatusConflict, err.Error()
	case errors.Is(err, admin.ErrUnavailable):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, "the request was cancelled or timed out"
	default:
		h.log.ErrorContext(ctx, "console: backend error", slog.String("op", op), slog.Any("error", err))
		return http.StatusInternalServerError, "internal error"
	}
}

// serviceCard is a service's figures, on the overview and its page.
type serviceCard struct {
	Now         time.Time
	Info        admin.ServiceInfo
	Detail      admin.ServiceDetail
	DetailError string
}

// poolCard is a pool with its chart.
type poolCard struct {
	Info  admin.PoolInfo
	Chart chart
}

// overviewBody is the overview's data.
type overviewBody struct {
	Services      []serviceCard
	ServicesError string
	Pools         []poolCard
	PoolsError    string
	// DelayQueues are the shared retry delay queues with their depths;
	// DelayQueuesError why they could not be listed.
	DelayQueues      []admin.DelayQueueInfo
	DelayQueuesError string
}

func (h *Handler) overviewData(ctx context.Context) overviewBody {
	var b overviewBody
	services, err := h.backend.ListServices(ctx)
	if err != nil {
		_, b.ServicesError = h.backendError(ctx, "ListServices", err)
	}
	for _, svc := range services {
		c := serviceCard{Now: h.now(), Info: svc}
		if c.Detail, err = h.backend.DescribeService(ctx, svc.Name); err != nil {
			_, c.DetailError = h.backendError(ctx, "DescribeService", err)
		}
		b.Services = append(b.Services, c)
	}
	pools, err := h.backend.ListPools(ctx, "")
	if err != nil {
		_, b.PoolsError = h.backendError(ctx, "ListPools", err)
	}
	for _, p := range pools {
		b.Pools = append(b.Pools, h.poolCard(p))
	}
	if b.DelayQueues, err = h.backend.ListDelayQueues(ctx); err != nil {
		_, b.DelayQueuesError = h.backendError(ctx, "ListDelayQueues", err)
	}
	return b
}

func (h *Handler) poolCard(p admin.PoolInfo) poolCard {
	rates, first := h.sampler.rates(p.Name)
	return poolCard{Info: p, Chart: newChart(rates, first, h.now(), ChartWindow)}
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request, s session) {
	h.render(w, r, http.StatusOK, "overview", h.page(s, "Overview", "overview", h.overviewData(r.Context())))
}

func (h *Handler) overviewFragment(w http.ResponseWriter, r *http.Request, s session) {
	h.renderFragment(w, r, "overview", "overview-live", pageData{Session: viewOf(s), Body: h.overviewData(r.Context())})
}

// poolBody is the pool page's data.
type poolBody struct {
	Pool poolCard
	// Limits are the pool's limits in force; LimitsError why not read.
	Limits      admin.PoolLimitsInfo
	LimitsError string
	Failed      []admin.FailedMessage
	FailedError string
	FailedLimit int
}

// findPool returns the pool called name.
func (h *Handler) findPool(ctx context.Context, name string) (admin.PoolInfo, error) {
	pools, err := h.backend.ListPools(ctx, "")
	if err != nil {
		return admin.PoolInfo{}, err
	}
	i := slices.IndexFunc(pools, func(p admin.PoolInfo) bool { return p.Name == name })
	if i < 0 {
		return admin.PoolInfo{}, admin.ErrNotFound
	}
	return pools[i], nil
}

func (h *Handler) poolPage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderPool(w, r, s, http.StatusOK, "")
}

// renderPool renders the pool page, with an error banner when msg is set.
func (h *Handler) renderPool(w http.ResponseWriter, r *http.Request, s session, status int, msg string) {
	ctx := r.Context()
	name := r.PathValue("pool")
	p, err := h.findPool(ctx, name)
	if err != nil {
		code, text := h.backendError(ctx, "ListPools", err)
		if errors.Is(err, admin.ErrNotFound) {
			text = "No pool called " + name + "."
		}
		h.renderError(w, r, s, code, text)
		return
	}
	b := poolBody{Pool: h.poolCard(p), FailedLimit: failedListLimit}
	b.Failed, b.FailedError = h.failed(ctx, name)
	b.Limits, b.LimitsError = h.limits(ctx, name)
	renderBody(h, w, r, s, status, "pool", "Pool "+name, msg, b, nil)
}

// failed reads the pool's failures still failed, from the failure store.
func (h *Handler) failed(ctx context.Context, pool string) ([]admin.FailedMessage, string) {
	msgs, err := h.backend.ListFailedMessages(ctx, pool, failedListLimit)
	if err != nil {
		_, text := h.backendError(ctx, "ListFailedMessages", err)
		return nil, text
	}
	return msgs, ""
}

func (h *Handler) poolFragment(w http.ResponseWriter, r *http.Request, s session) {
	p, err := h.findPool(r.Context(), r.PathValue("pool"))
	if err != nil {
		h.fragmentError(w, r, "ListPools", err)
		return
	}
	h.renderFragment(w, r, "pool", "pool-live", pageData{Session: viewOf(s), Body: poolBody{Pool: h.poolCard(p)}})
}

func (h *Handler) failedFragment(w http.ResponseWriter, r *http.Request, s session) {
	name := r.PathValue("pool")
	p, err := h.findPool(r.Context(), name)
	if err != nil {
		h.fragmentError(w, r, "ListPools", err)
		return
	}
	b := poolBody{Pool: poolCard{Info: p}, FailedLimit: failedListLimit}
	b.Failed, b.FailedError = h.failed(r.Context(), name)
	h.renderFragment(w, r, "pool", "failed-queue", pageData{Session: viewOf(s), Body: b, Now: h.now()})
}

// serviceBody is the service page's data.
type serviceBody struct {
	Card    serviceCard
	Horizon admin.HorizonInfo
	Runs    []admin.PurgeRun
	Pools   []admin.PoolInfo
	// DryRun is the dry run just made, offering the real purge.
	DryRun *admin.PurgeRun
	// HorizonInput is the horizon typed in a refused change.
	HorizonInput string
	// Advice is the horizon advice (page loads only; nil on the live
	// refresh).
	Advice *adviceView
}

func (h *Handler) serviceData(ctx context.Context, name string) (serviceBody, error) {
	b := serviceBody{Card: serviceCard{Now: h.now()}}
	services, err := h.backend.ListServices(ctx)
	if err != nil {
		return b, err
	}
	i := slices.IndexFunc(services, func(s admin.ServiceInfo) bool { return s.Name == name })
	if i < 0 {
		return b, admin.ErrNotFound
	}
	b.Card.Info = services[i]
	if b.Horizon, err = h.backend.GetHorizon(ctx, name); err != nil {
		return b, err
	}
	if b.Card.Detail, err = h.backend.DescribeService(ctx, name); err != nil {
		return b, err
	}
	if b.Runs, err = h.backend.ListPurgeRuns(ctx, name, purgeRunsLimit); err != nil {
		return b, err
	}
	if b.Pools, err = h.backend.ListPools(ctx, name); err != nil {
		return b, err
	}
	return b, nil
}

func (h *Handler) servicePage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderService(w, r, s, http.StatusOK, "", nil)
}

// renderService renders the service page with an error banner when msg is
// set; edit, if set, adjusts the data (a dry run's result, a refused
// input).
func (h *Handler) renderService(w http.ResponseWriter, r *http.Request, s session, status int, msg string, edit func(*serviceBody)) {
	name := r.PathValue("service")
	b, err := h.serviceData(r.Context(), name)
	if err != nil {
		code, text := h.backendError(r.Context(), "service page", err)
		if errors.Is(err, admin.ErrNotFound) && b.Card.Info.Name == "" {
			text = "No service called " + name + "."
		}
		h.renderError(w, r, s, code, text)
		return
	}
	b.Advice = h.advice(r.Context(), name)
	renderBody(h, w, r, s, status, "service", "Service "+name, msg, b, edit)
}

func (h *Handler) serviceFragment(w http.ResponseWriter, r *http.Request, s session) {
	b, err := h.serviceData(r.Context(), r.PathValue("service"))
	if err != nil {
		h.fragmentError(w, r, "service page", err)
		return
	}
	part := "service-live"
	if r.URL.Query().Get("part") == "history" {
		part = "service-history"
	}
	h.renderFragment(w, r, "service", part, pageData{Session: viewOf(s), Body: b, Now: h.now()})
}

// lookupBody is the lookup page's data.
type lookupBody struct {
	Query    string
	Searched bool
	Results  []admin.LookupResult
}

func (h *Handler) lookup(w http.ResponseWriter, r *http.Request, s session) {
	q := strings.TrimSpace(r.URL.Query().Get("event_id"))
	b := lookupBody{Query: q}
	data := h.page(s, "Event lookup", "lookup", nil)
	status := http.StatusOK
	if q != "" {
		id, err := parseEventID(q)
		if err != nil {
			status, data.Error = http.StatusBadRequest, err.Error()
		} else if b.Results, err = h.backend.LookupEvent(r.Context(), id, ""); err != nil {
			status, data.Error = h.backendError(r.Context(), "LookupEvent", err)
		} else {
			b.Searched = true
		}
	}
	data.Body = b
	h.render(w, r, status, "lookup", data)
}

// parseEventID parses an event id as the admin API does: a UUID in
// canonical hyphenated form, not the nil UUID.
func parseEventID(s string) (uuid.UUID, error) {
	bad := errors.New(`"` + s + `" is not an event id: want a UUID such as 0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b`)
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return uuid.Nil, bad
	}
	id, err := uuid.Parse(s)
	if err != nil || id == uuid.Nil {
		return uuid.Nil, bad
	}
	return id, nil
}

// auditBody is the audit page's data.
type auditBody struct {
	Service  string
	Services []string
	Entries  []admin.AuditEntry
	// Unavailable are the services whose audit could not be read.
	Unavailable []string
	Error       string
}

func (h *Handler) auditData(ctx context.Context, service string) (auditBody, int) {
	b := auditBody{Service: service}
	status := http.StatusOK
	if services, err := h.backend.ListServices(ctx); err == nil {
		for _, s := range services {
			b.Services = append(b.Services, s.Name)
		}
	}
	list, err := h.backend.ListAudit(ctx, service, auditLimit)
	if err != nil {
		status, b.Error = h.backendError(ctx, "ListAudit", err)
	}
	b.Entries, b.Unavailable = list.Entries, list.Unavailable
	return b, status
}

func (h *Handler) audit(w http.ResponseWriter, r *http.Request, s session) {
	b, status := h.auditData(r.Context(), r.URL.Query().Get("service"))
	h.render(w, r, status, "audit", h.page(s, "Audit", "audit", b))
}

func (h *Handler) auditFragment(w http.ResponseWriter, r *http.Request, s session) {
	b, _ := h.auditData(r.Context(), r.URL.Query().Get("service"))
	h.renderFragment(w, r, "audit", "audit-live", pageData{Session: viewOf(s), Body: b, Now: h.now()})
}
