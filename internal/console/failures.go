package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// failureRetriesLimit is how many retries the failures page lists.
const failureRetriesLimit = 20

// failureCanaryMax bounds the canary an operator may type.
const failureCanaryMax = 1_000_000

// groupView is one group of the failures page.
type groupView struct {
	failure.Group
	// Keys are the group's key values in group-by order.
	Keys []pair
	// Form selects the group's failures: the page's filter narrowed to
	// the group's key.
	Form failureForm
	// Href is its failures' list.
	Href string
	// Narrow is false when a key value is empty: the filter cannot select
	// that group alone (an empty field selects anything), so it offers
	// no action.
	Narrow bool
}

// failuresBody is the failures page's data.
type failuresBody struct {
	Service string
	Form    failureForm
	GroupBy string
	// Choices of the form.
	GroupKeys, States, Pools []string
	Groups                   []groupView
	GroupsError              string
	Retries                  []admin.FailureRetry
	RetriesError             string
}

// retryView is a retry with the summary of its selection.
type retryView struct {
	admin.FailureRetry
	Selection string
	// Live is true while it has not finished (the page polls it).
	Live bool
	// Waiting is true when its error is a note on why a live retry is
	// slow ("waiting: ..."), not a fault: shown as a hint.
	Waiting bool
}

func viewRetry(r admin.FailureRetry) retryView {
	live := r.State == failure.RetryCanary || r.State == failure.RetryRunning
	return retryView{FailureRetry: r, Selection: filterSummary(r.Filter), Live: live, Waiting: live && strings.HasPrefix(r.Error, "waiting: ")}
}

// failuresData reads the failures page of service; the error is the
// service's (unknown: ErrNotFound); a bad filter is a banner.
func (h *Handler) failuresData(ctx context.Context, service string, v url.Values) (failuresBody, int, string, error) {
	b := failuresBody{Service: service, Form: failureFormOf(v), GroupKeys: groupKeys, States: failureStates, GroupBy: groupKeys[0]}
	pools, err := h.backend.ListPools(ctx, service)
	if err != nil {
		return b, 0, "", err
	}
	for _, p := range pools {
		b.Pools = append(b.Pools, p.Name)
	}
	b.Retries, b.RetriesError = h.failureRetries(ctx, service)
	if g := v.Get("group_by"); g != "" {
		if !slices.Contains(groupKeys, g) {
			return b, http.StatusBadRequest, fmt.Sprintf("group by: %q is not one of %s", g, strings.Join(groupKeys, ", ")), nil
		}
		b.GroupBy = g
	}
	f, err := b.Form.filter()
	if err != nil {
		return b, http.StatusBadRequest, err.Error(), nil
	}
	groups, err := h.backend.ListFailureGroups(ctx, service, f, []string{b.GroupBy})
	if err != nil {
		code, text := h.backendError(ctx, "ListFailureGroups", err)
		if code == http.StatusNotFound {
			return b, 0, "", err
		}
		b.GroupsError = text
		return b, code, "", nil
	}
	for _, g := range groups {
		gv := groupView{Group: g, Form: b.Form, Narrow: true}
		for _, k := range []string{b.GroupBy} {
			val := g.Key[k]
			gv.Keys = append(gv.Keys, pair{k, val})
			if val == "" {
				gv.Narrow = false
				continue
			}
			gv.Form = gv.Form.withKey(k, val)
		}
		gv.Href = withQuery(failureEventsPath(service), gv.Form.values())
		b.Groups = append(b.Groups, gv)
	}
	return b, http.StatusOK, "", nil
}

func (h *Handler) failureRetries(ctx context.Context, service string) ([]admin.FailureRetry, string) {
	list, err := h.backend.ListFailureRetries(ctx, service, failureRetriesLimit)
	if err != nil {
		_, text := h.backendError(ctx, "ListFailureRetries", err)
		return nil, text
	}
	return list, ""
}

// renderFailures renders the failures page of the request's service
// (selected by the query), with msg as an error banner under status when
// set.
func (h *Handler) renderFailures(w http.ResponseWriter, r *http.Request, s session, status int, msg string) {
	service := r.PathValue("service")
	b, code, text, err := h.failuresData(r.Context(), service, r.URL.Query())
	if err != nil {
		code, text := h.backendError(r.Context(), "failures page", err)
		if code == http.StatusNotFound {
			text = "No service called " + service + "."
		}
		h.renderError(w, r, s, code, text)
		return
	}
	if msg == "" {
		msg = text
		status = code
	}
	renderBody(h, w, r, s, status, "failures", "Failures of "+service, msg, b, nil)
}

func (h *Handler) failuresPage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderFailures(w, r, s, http.StatusOK, "")
}

func (h *Handler) failureRetriesFragment(w http.ResponseWriter, r *http.Request, s session) {
	service := r.PathValue("service")
	if _, err := h.backend.ListPools(r.Context(), service); err != nil {
		h.fragmentError(w, r, "ListPools", err)
		return
	}
	b := failuresBody{Service: service}
	b.Retries, b.RetriesError = h.failureRetries(r.Context(), service)
	h.renderFragment(w, r, "failures", "failure-retries-live", pageData{Session: viewOf(s), Body: b, Now: h.now()})
}

// failureEventsBody is the data of a group's failures page.
type failureEventsBody struct {
	Service  string
	Form     failureForm
	Failures []admin.FailedEvent
	// Next is the next page's link ("" on the last page); First the
	// first page's, when this is not it.
	Next, First string
	// Groups is the failures page with the same filter.
	Groups string
}

func (h *Handler) failureEventsPage(w http.ResponseWriter, r *http.Request, s session) {
	ctx := r.Context()
	service := r.PathValue("service")
	q := r.URL.Query()
	b := failureEventsBody{Service: service, Form: failureFormOf(q)}
	b.Groups = withQuery(failuresPath(service), b.Form.values())
	f, err := b.Form.filter()
	if err != nil {
		h.renderError(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	token := q.Get("page_token")
	list, next, err := h.backend.ListFailedEvents(ctx, service, f, h.failurePageSize, token)
	if err != nil {
		code, text := h.backendError(ctx, "ListFailedEvents", err)
		h.renderError(w, r, s, code, text)
		return
	}
	b.Failures = list
	if next != "" {
		v := b.Form.values()
		v.Set("page_token", next)
		b.Next = withQuery(failureEventsPath(service), v)
	}
	if token != "" {
		b.First = withQuery(failureEventsPath(service), b.Form.values())
	}
	renderBody(h, w, r, s, http.StatusOK, "failure_events", "Failures of "+service, "", b, nil)
}

// failureBody is the data of a failure's page.
type failureBody struct {
	Failure          admin.FailedEvent
	Headers          []pair
	Body, EditedBody shownBody
	Edits            []editView
	// EditInput is the edit form's text: the body a retry sends, or the
	// text of a refused edit; EditReason the refused edit's reason.
	EditInput, EditReason string
	// EditError is a refused edit's message, shown beside the form.
	EditError string
	// Open is true while the failure can still be retried, edited or
	// discarded.
	Open bool
}

// editView is one edit of a failure's body.
type editView struct {
	failure.Edit
	Diff shownBody
}

func (h *Handler) failurePage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderFailure(w, r, s, http.StatusOK, nil)
}

// renderFailure renders the page of the failure named by the path; edit,
// when set, adjusts the data (a refused edit).
func (h *Handler) renderFailure(w http.ResponseWriter, r *http.Request, s session, status int, edit func(*failureBody)) {
	id, err := parseID("failure", r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	e, err := h.backend.GetFailedEvent(r.Context(), id)
	if err != nil {
		code, text := h.backendError(r.Context(), "GetFailedEvent", err)
		h.renderError(w, r, s, code, text)
		return
	}
	b := failureBody{
		Failure: e, Headers: headerPairs(e.Headers), Body: showBody(e.Body),
		Open: e.State != failure.StateResolved && e.State != failure.StateDiscarded,
	}
	if e.EditedBody != nil {
		b.EditedBody = showBody(e.EditedBody)
	}
	b.EditInput = showBody(e.SendBody()).Text
	for _, ed := range e.Edits {
		b.Edits = append(b.Edits, editView{Edit: ed, Diff: showBody(ed.Diff)})
	}
	renderBody(h, w, r, s, status, "failure", "Failure "+id.String(), "", b, edit)
}

// editFailure sets the body a retry of the failure sends; a payload the
// backend refuses is shown beside the form with its message.
func (h *Handler) editFailure(w http.ResponseWriter, r *http.Request, s session) {
	id, err := parseID("failure", r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	payload := r.PostForm.Get("payload")
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	refuse := func(status int, msg string) {
		h.renderFailure(w, r, s, status, func(b *failureBody) {
			b.EditInput, b.EditReason, b.EditError = payload, reason, msg
		})
	}
	switch {
	case strings.TrimSpace(payload) == "":
		refuse(http.StatusBadRequest, "Edit refused: the payload is empty.")
		return
	case reason == "":
		refuse(http.StatusBadRequest, "Edit refused: say why (the reason is recorded with the edit).")
		return
	}
	if p := admin.ReasonProblem(reason); p != "" {
		refuse(http.StatusBadRequest, "Edit refused: the "+p+".")
		return
	}
	if _, err := h.backend.EditFailedEvent(r.Context(), id, []byte(payload), reason, s.name); err != nil {
		code, text := h.backendError(r.Context(), "EditFailedEvent", err)
		if code == http.StatusNotFound {
			h.renderError(w, r, s, code, text)
			return
		}
		refuse(code, "Edit refused: "+text)
		return
	}
	h.done(w, r, s, failurePath(id), "Edited. A retry of this failure sends the edited body; the original is kept.")
}

// failureConfirmBody is the confirmation page of a retry or a discard.
type failureConfirmBody struct {
	Service string
	// Action is "retry" or "discard".
	Action string
	Form   failureForm
	// Selection describes Form.
	Selection string
	// Count is how many failures the action takes (a retry: the failed
	// ones the dry run counted; a discard: every unresolved one).
	Count int64
	// The retry's settings, as typed.
	Canary, Rate string
	Override     bool
	// Reason is the discard's reason as typed; AskParked shows the choice
	// of what becomes of parked events, Parked the choice made.
	Reason    string
	AskParked bool
	Parked    string
}

// retrySettings reads and checks the canary and rate of a retry form.
func retrySettings(form url.Values) (canary, rate int, err error) {
	rate = failure.RetryRateDefault
	if v := strings.TrimSpace(form.Get("canary")); v != "" {
		canary, err = strconv.Atoi(v)
		if err != nil || canary < 0 || canary > failureCanaryMax {
			return 0, 0, fmt.Errorf("canary: %q is not a number of failures between 0 and %d", v, failureCanaryMax)
		}
	}
	if v := strings.TrimSpace(form.Get("rate")); v != "" {
		rate, err = strconv.Atoi(v)
		if err != nil || rate < 1 || rate > admin.FailureRetryRateMax {
			return 0, 0, fmt.Errorf("rate: %q is not a number of copies per second between 1 and %d", v, admin.FailureRetryRateMax)
		}
	}
	return canary, rate, nil
}

// confirmOf returns the confirmation page's data of the posted form.
func confirmOf(service, action string, form url.Values) failureConfirmBody {
	f := failureFormOf(form)
	sel, err := f.filter()
	summary := "the selection"
	if err == nil {
		summary = filterSummary(sel)
	}
	return failureConfirmBody{
		Service: service, Action: action, Form: f, Selection: summary,
		Canary: form.Get("canary"), Rate: form.Get("rate"), Override: form.Get("override") == "1",
		Reason: strings.TrimSpace(form.Get("reason")), Parked: form.Get("parked"),
	}
}

func (h *Handler) renderFailureConfirm(w http.ResponseWriter, r *http.Request, s session, status int, msg string, b failureConfirmBody) {
	title := "Retry failures"
	if b.Action == "discard" {
		title = "Discard failures"
	}
	renderBody(h, w, r, s, status, "failure_confirm", title, msg, b, nil)
}

// retryFailures starts a server-side retry of the posted selection (a
// group's filter, or failure ids). Without confirm=1 it is a dry run: a
// page with the count and the button that starts exactly that retry.
func (h *Handler) retryFailures(w http.ResponseWriter, r *http.Request, s session) {
	ctx := r.Context()
	service := r.PathValue("service")
	b := confirmOf(service, "retry", r.PostForm)
	f, err := b.Form.filter()
	if err != nil {
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, "Retry refused: "+err.Error(), b)
		return
	}
	canary, rate, err := retrySettings(r.PostForm)
	if err != nil {
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, "Retry refused: "+err.Error(), b)
		return
	}
	req := failure.RetryRequest{Filter: f, Canary: canary, Rate: rate, OverrideBeyondHorizon: b.Override,
		DryRun: r.PostForm.Get("confirm") != "1"}
	got, err := h.backend.RetryFailedEvents(ctx, service, req, s.name)
	if err != nil {
		code, text := h.backendError(ctx, "RetryFailedEvents", err)
		if code == http.StatusNotFound {
			h.renderError(w, r, s, code, text)
			return
		}
		h.renderFailureConfirm(w, r, s, code, "Retry refused: "+text, b)
		return
	}
	if req.DryRun {
		b.Count = got.Selected
		h.renderFailureConfirm(w, r, s, http.StatusOK, "", b)
		return
	}
	msg := fmt.Sprintf("Retry %s started: %s failures selected", got.ID, fmtNum(got.Selected))
	if canary > 0 {
		msg += fmt.Sprintf(", a canary of %d first", canary)
	}
	h.done(w, r, s, failureRetryPath(service, got.ID), msg+".")
}

// parkedRefusal reports whether err is the backend's refusal to discard a
// head with events parked behind it, no choice said.
func parkedRefusal(err error) bool {
	return (errors.Is(err, admin.ErrFailedPrecondition) || errors.Is(err, failure.ErrPrecondition)) &&
		strings.Contains(err.Error(), "parked")
}

// discardFailures marks the posted selection discarded. Without confirm=1
// it is a page that counts the selection and asks for the reason; when
// the backend refuses because events are parked behind a discarded head,
// the page asks what becomes of them (release or discard).
func (h *Handler) discardFailures(w http.ResponseWriter, r *http.Request, s session) {
	ctx := r.Context()
	service := r.PathValue("service")
	b := confirmOf(service, "discard", r.PostForm)
	f, err := b.Form.filter()
	if err != nil {
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, "Discard refused: "+err.Error(), b)
		return
	}
	var parked failure.Parked
	switch b.Parked {
	case "":
	case "release":
		parked = failure.ParkedRelease
	case "discard":
		parked = failure.ParkedDiscard
	default:
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, fmt.Sprintf("Discard refused: parked: %q is not release or discard.", b.Parked), b)
		return
	}
	if r.PostForm.Get("confirm") != "1" {
		groups, err := h.backend.ListFailureGroups(ctx, service, f, []string{failure.GroupPool})
		if err != nil {
			code, text := h.backendError(ctx, "ListFailureGroups", err)
			if code == http.StatusNotFound {
				h.renderError(w, r, s, code, text)
				return
			}
			h.renderFailureConfirm(w, r, s, code, "Discard refused: "+text, b)
			return
		}
		for _, g := range groups {
			b.Count += g.Count
		}
		h.renderFailureConfirm(w, r, s, http.StatusOK, "", b)
		return
	}
	b.Count = -1 // asked already: the page does not count again
	switch p := admin.ReasonProblem(b.Reason); {
	case b.Reason == "":
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, "Discard refused: say why (the reason is audited).", b)
		return
	case p != "":
		h.renderFailureConfirm(w, r, s, http.StatusBadRequest, "Discard refused: the "+p+".", b)
		return
	}
	n, err := h.backend.DiscardFailedEvents(ctx, service, f, parked, b.Reason, s.name)
	if err != nil {
		code, text := h.backendError(ctx, "DiscardFailedEvents", err)
		if code == http.StatusNotFound {
			h.renderError(w, r, s, code, text)
			return
		}
		b.AskParked = parkedRefusal(err)
		h.renderFailureConfirm(w, r, s, code, "Discard refused: "+text, b)
		return
	}
	back := withQuery(failuresPath(service), url.Values{"state": {cmp.Or(b.Form.State, stateAny)}})
	if len(b.Form.IDs) == 1 {
		back = "/failures/" + url.PathEscape(b.Form.IDs[0])
	}
	h.done(w, r, s, back, fmt.Sprintf("Discarded %s failures.", fmtNum(n)))
}

// failureRetryBody is a retry's page.
type failureRetryBody struct {
	Service string
	Retry   retryView
}

func (h *Handler) failureRetryData(r *http.Request) (failureRetryBody, error) {
	service := r.PathValue("service")
	b := failureRetryBody{Service: service}
	id, err := parseID("retry", r.PathValue("id"))
	if err != nil {
		return b, fmt.Errorf("%w: %w", admin.ErrInvalidArgument, err)
	}
	got, err := h.backend.GetFailureRetry(r.Context(), service, id)
	if err != nil {
		return b, err
	}
	b.Retry = viewRetry(got)
	return b, nil
}

func (h *Handler) failureRetryPage(w http.ResponseWriter, r *http.Request, s session) {
	h.renderFailureRetry(w, r, s, http.StatusOK, "")
}

func (h *Handler) renderFailureRetry(w http.ResponseWriter, r *http.Request, s session, status int, msg string) {
	b, err := h.failureRetryData(r)
	if err != nil {
		code, text := h.backendError(r.Context(), "GetFailureRetry", err)
		h.renderError(w, r, s, code, text)
		return
	}
	renderBody(h, w, r, s, status, "failure_retry", "Retry "+b.Retry.ID.String(), msg, b, nil)
}

func (h *Handler) failureRetryFragment(w http.ResponseWriter, r *http.Request, s session) {
	b, err := h.failureRetryData(r)
	if err != nil {
		h.fragmentError(w, r, "GetFailureRetry", err)
		return
	}
	h.renderFragment(w, r, "failure_retry", "failure-retry-live", pageData{Session: viewOf(s), Body: b, Now: h.now()})
}

func (h *Handler) cancelFailureRetry(w http.ResponseWriter, r *http.Request, s session) {
	service := r.PathValue("service")
	id, err := parseID("retry", r.PathValue("id"))
	if err != nil {
		h.renderError(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	got, err := h.backend.CancelFailureRetry(r.Context(), service, id, s.name)
	if err != nil {
		code, text := h.backendError(r.Context(), "CancelFailureRetry", err)
		if code == http.StatusNotFound || code == http.StatusBadRequest {
			h.renderError(w, r, s, code, text)
			return
		}
		h.renderFailureRetry(w, r, s, code, "Cancel failed: "+text)
		return
	}
	h.done(w, r, s, failureRetryPath(service, id), fmt.Sprintf("Retry %s %s after %s copies sent.", got.ID, got.State, fmtNum(got.Sent)))
}
