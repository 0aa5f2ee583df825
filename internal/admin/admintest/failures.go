package admintest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// Fixture values of the failure workbench: three failures of stock's pool
// stock-events, in two groups by reason and fingerprint (two "unknown
// product" failures, one body that did not decode).
var (
	// FailureUnknownProductID is the older "unknown product" failure; it
	// has one edit.
	FailureUnknownProductID = uuid.MustParse("01900000-0000-7000-8000-000000000001")
	// FailureUnknownProduct2ID is the newer "unknown product" failure.
	FailureUnknownProduct2ID = uuid.MustParse("01900000-0000-7000-8000-000000000002")
	// FailureDecodeID is the failure whose body did not decode.
	FailureDecodeID = uuid.MustParse("01900000-0000-7000-8000-000000000003")
	// FailureEventID is the event of FailureUnknownProductID.
	FailureEventID = uuid.MustParse("0190aaaa-0000-7000-8000-000000000001")
	// FailureRetryID is the fixture's finished retry of the failures.
	FailureRetryID = uuid.MustParse("0190bbbb-0000-7000-8000-000000000001")
	// FailureRunningRetryID is the fixture's running retry (of nothing
	// left to send: its failure was resolved), which a cancel stops.
	FailureRunningRetryID = uuid.MustParse("0190bbbb-0000-7000-8000-000000000002")
	// FingerprintUnknownProduct is the "unknown product" failures'
	// fingerprint.
	FingerprintUnknownProduct = `stock.reserve: unknown product "?"`
)

// failureFixture returns the fixture's failures, oldest first.
func failureFixture() []admin.FailedEvent {
	unknown := func(id, eventID uuid.UUID, product string, age time.Duration) admin.FailedEvent {
		return admin.FailedEvent{Service: "stock", Failure: failure.Failure{
			ID: id, Pool: "stock-events", EventID: eventID, EventName: "order.order.placed.v1",
			RoutingKey: "order.order.placed.v1", Headers: map[string]any{"x-attempt": float64(5), "x-pool": "stock-events"},
			Body:   []byte(`{"id":"` + eventID.String() + `","payload":{"product":"` + product + `"}}`),
			Reason: "retries_exhausted", Error: `stock.reserve: unknown product "` + product + `"`,
			Fingerprint: FingerprintUnknownProduct, Handler: "stock.reserve", Attempt: 5,
			FirstFailedAt: Now.Add(-age - time.Minute), FailedAt: Now.Add(-age), Copies: 1, SequenceKey: "order-" + product,
			State: failure.StateFailed, UpdatedAt: Now.Add(-age),
		}}
	}
	first := unknown(FailureUnknownProductID, FailureEventID, "p-1", 3*time.Hour)
	first.Copies = 2
	first.EditedBody = []byte(`{"id":"` + FailureEventID.String() + `","payload":{"product":"p-11"}}`)
	first.EditedAt, first.EditedBy = Now.Add(-2*time.Hour), "ops"
	first.RetryID = FailureRetryID
	first.Edits = []failure.Edit{{
		ID: 1, EditedAt: first.EditedAt, EditedBy: "ops", Reason: "typo in the product id",
		BodyBefore: first.Body, BodyAfter: first.EditedBody,
		Diff: []byte(`[{"op":"replace","path":"/payload/product","value":"p-11"}]`),
	}}
	second := unknown(FailureUnknownProduct2ID, uuid.MustParse("0190aaaa-0000-7000-8000-000000000002"), "p-2", 2*time.Hour)
	decode := admin.FailedEvent{Service: "stock", Failure: failure.Failure{
		ID: FailureDecodeID, Pool: "stock-events", RoutingKey: "order.order.placed.v1",
		Headers: map[string]any{}, Body: []byte("{not json"), Reason: "decode",
		Error: "envelope: invalid character 'n' at offset 2", Fingerprint: "envelope: invalid character '?' at offset ?",
		Attempt: 1, FirstFailedAt: Now.Add(-time.Hour), FailedAt: Now.Add(-time.Hour), Copies: 1,
		State: failure.StateFailed, UpdatedAt: Now.Add(-time.Hour),
	}}
	return []admin.FailedEvent{first, second, decode}
}

// failureService resolves a filter's service: service, else the pool's;
// b.mu must be held.
func (b *Backend) failureService(service string, f failure.Filter) (string, error) {
	if service == "" {
		i, err := b.pool(f.Pool)
		if err != nil {
			return "", err
		}
		return b.pools[i].Service, nil
	}
	if _, err := b.service(service); err != nil {
		return "", err
	}
	return service, nil
}

// matches reports whether f selects e.
func matches(f failure.Filter, e *admin.FailedEvent) bool {
	text := strings.ToLower(f.Text)
	switch {
	case f.Pool != "" && e.Pool != f.Pool,
		f.Reason != "" && e.Reason != f.Reason,
		f.Handler != "" && e.Handler != f.Handler,
		f.EventName != "" && e.EventName != f.EventName,
		f.Fingerprint != "" && e.Fingerprint != f.Fingerprint,
		f.State != "" && e.State != f.State,
		!f.From.IsZero() && e.FailedAt.Before(f.From),
		!f.To.IsZero() && !e.FailedAt.Before(f.To),
		len(f.IDs) > 0 && !slices.Contains(f.IDs, e.ID):
		return false
	case text == "":
		return true
	}
	eventID := ""
	if e.EventID != uuid.Nil {
		eventID = e.EventID.String()
	}
	return strings.Contains(strings.ToLower(e.Error), text) || strings.Contains(strings.ToLower(e.EventName), text) ||
		strings.Contains(eventID, text)
}

// selected returns the indexes of the failures of service f selects,
// newest first; b.mu must be held.
func (b *Backend) selected(service string, f failure.Filter) []int {
	var out []int
	for i := len(b.failures) - 1; i >= 0; i-- {
		if b.failures[i].Service == service && matches(f, &b.failures[i]) {
			out = append(out, i)
		}
	}
	return out
}

// copyEvent returns e without the fake's own slices shared.
func copyEvent(e admin.FailedEvent, edits bool) admin.FailedEvent {
	if edits {
		e.Edits = slices.Clone(e.Edits)
	} else {
		e.Edits = nil
	}
	return e
}

// groupValue is e's value of group-by key k.
func groupValue(e *admin.FailedEvent, k string) string {
	switch k {
	case failure.GroupReason:
		return e.Reason
	case failure.GroupHandler:
		return e.Handler
	case failure.GroupEventName:
		return e.EventName
	case failure.GroupFingerprint:
		return e.Fingerprint
	default:
		return e.Pool
	}
}

// ListFailureGroups implements admin.Backend: groups largest first, then
// by their latest failure, newest first.
func (b *Backend) ListFailureGroups(ctx context.Context, service string, f failure.Filter, by []string) ([]failure.Group, error) {
	if err := b.begin(ctx, Call{Method: "ListFailureGroups", Service: service, Pool: f.Pool, Filter: f, GroupBy: slices.Clone(by)}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	service, err := b.failureService(service, f)
	if err != nil {
		return nil, err
	}
	var groups []failure.Group
	index := map[string]int{}
	for _, i := range b.selected(service, f) {
		e := &b.failures[i]
		key := map[string]string{}
		var parts []string
		for _, k := range by {
			key[k] = groupValue(e, k)
			parts = append(parts, key[k])
		}
		id := strings.Join(parts, "\x00")
		gi, ok := index[id]
		if !ok {
			gi = len(groups)
			index[id] = gi
			groups = append(groups, failure.Group{Key: key, FirstFailedAt: e.FailedAt, LastFailedAt: e.FailedAt, ExampleID: e.ID})
		}
		g := &groups[gi]
		g.Count++
		if e.FailedAt.Before(g.FirstFailedAt) {
			g.FirstFailedAt = e.FailedAt
		}
		if e.FailedAt.After(g.LastFailedAt) {
			g.LastFailedAt = e.FailedAt
		}
	}
	slices.SortStableFunc(groups, func(x, y failure.Group) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), y.LastFailedAt.Compare(x.LastFailedAt))
	})
	return groups, nil
}

// ListFailedEvents implements admin.Backend, newest first; a page token
// is the offset of the page's first failure.
func (b *Backend) ListFailedEvents(ctx context.Context, service string, f failure.Filter, limit int, pageToken string) ([]admin.FailedEvent, string, error) {
	if err := b.begin(ctx, Call{Method: "ListFailedEvents", Service: service, Pool: f.Pool, Filter: f, Limit: limit, PageToken: pageToken}); err != nil {
		return nil, "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	service, err := b.failureService(service, f)
	if err != nil {
		return nil, "", err
	}
	offset := 0
	if pageToken != "" {
		if offset, err = strconv.Atoi(pageToken); err != nil || offset < 0 {
			return nil, "", fmt.Errorf("page_token %q: %w", pageToken, failure.ErrInvalid)
		}
	}
	sel := b.selected(service, f)
	sel = sel[min(offset, len(sel)):]
	next := ""
	if len(sel) > limit {
		sel, next = sel[:limit], strconv.Itoa(offset+limit)
	}
	out := make([]admin.FailedEvent, 0, len(sel))
	for _, i := range sel {
		out = append(out, copyEvent(b.failures[i], false))
	}
	return out, next, nil
}

// failureIndex returns the index of failure id; b.mu must be held.
func (b *Backend) failureIndex(id uuid.UUID) (int, error) {
	i := slices.IndexFunc(b.failures, func(e admin.FailedEvent) bool { return e.ID == id })
	if i < 0 {
		return 0, fmt.Errorf("failure %s: %w", id, failure.ErrNotFound)
	}
	return i, nil
}

// GetFailedEvent implements admin.Backend.
func (b *Backend) GetFailedEvent(ctx context.Context, id uuid.UUID) (admin.FailedEvent, error) {
	if err := b.begin(ctx, Call{Method: "GetFailedEvent", ID: id}); err != nil {
		return admin.FailedEvent{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.failureIndex(id)
	if err != nil {
		return admin.FailedEvent{}, err
	}
	return copyEvent(b.failures[i], true), nil
}

// RetryFailedEvents implements admin.Backend: it selects the failed
// failures of the filter (none: failure.ErrPrecondition), marks them
// retrying and stores a retry in state canary (with a canary) or running;
// nothing is sent. A dry run counts only.
func (b *Backend) RetryFailedEvents(ctx context.Context, service string, req failure.RetryRequest, actor string) (admin.FailureRetry, error) {
	if err := b.begin(ctx, Call{Method: "RetryFailedEvents", Actor: actor, Service: service, Pool: req.Filter.Pool,
		Filter: req.Filter, Retry: req, DryRun: req.DryRun}); err != nil {
		return admin.FailureRetry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	service, err := b.failureService(service, req.Filter)
	if err != nil {
		return admin.FailureRetry{}, err
	}
	sel := slices.DeleteFunc(b.selected(service, req.Filter), func(i int) bool { return b.failures[i].State != failure.StateFailed })
	if len(sel) == 0 {
		return admin.FailureRetry{}, fmt.Errorf("the filter selects no failed failure: %w", failure.ErrPrecondition)
	}
	r := admin.FailureRetry{Service: service, Retry: failure.Retry{
		Filter: req.Filter, Canary: req.Canary, Rate: req.Rate, OverrideBeyondHorizon: req.OverrideBeyondHorizon,
		Selected: int64(len(sel)),
	}}
	if req.DryRun {
		return r, nil
	}
	r.ID, r.State, r.CreatedBy, r.CreatedAt, r.UpdatedAt = uuid.New(), failure.RetryRunning, actor, Now, Now
	if req.Canary > 0 {
		r.State = failure.RetryCanary
	}
	for _, i := range sel {
		b.failures[i].State, b.failures[i].RetryID = failure.StateRetrying, r.ID
	}
	b.retries = append(b.retries, r)
	b.record(service, actor, "failure.retry", service, map[string]any{"retry": r.ID.String(), "selected": r.Selected})
	return r, nil
}

// retryIndex returns the index of retry id, of service or any; b.mu must
// be held.
func (b *Backend) retryIndex(service string, id uuid.UUID) (int, error) {
	if service != "" {
		if _, err := b.service(service); err != nil {
			return 0, err
		}
	}
	i := slices.IndexFunc(b.retries, func(r admin.FailureRetry) bool { return r.ID == id && (service == "" || r.Service == service) })
	if i < 0 {
		return 0, fmt.Errorf("retry %s: %w", id, failure.ErrNotFound)
	}
	return i, nil
}

// GetFailureRetry implements admin.Backend.
func (b *Backend) GetFailureRetry(ctx context.Context, service string, id uuid.UUID) (admin.FailureRetry, error) {
	if err := b.begin(ctx, Call{Method: "GetFailureRetry", Service: service, ID: id}); err != nil {
		return admin.FailureRetry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.retryIndex(service, id)
	if err != nil {
		return admin.FailureRetry{}, err
	}
	return b.retries[i], nil
}

// ListFailureRetries implements admin.Backend, newest first.
func (b *Backend) ListFailureRetries(ctx context.Context, service string, limit int) ([]admin.FailureRetry, error) {
	if err := b.begin(ctx, Call{Method: "ListFailureRetries", Service: service, Limit: limit}); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if service != "" {
		if _, err := b.service(service); err != nil {
			return nil, err
		}
	}
	var out []admin.FailureRetry
	for i := len(b.retries) - 1; i >= 0 && len(out) < limit; i-- {
		if service == "" || b.retries[i].Service == service {
			out = append(out, b.retries[i])
		}
	}
	return out, nil
}

// CancelFailureRetry implements admin.Backend: a finished retry is
// failure.ErrPrecondition.
func (b *Backend) CancelFailureRetry(ctx context.Context, service string, id uuid.UUID, actor string) (admin.FailureRetry, error) {
	if err := b.begin(ctx, Call{Method: "CancelFailureRetry", Actor: actor, Service: service, ID: id}); err != nil {
		return admin.FailureRetry{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.retryIndex(service, id)
	if err != nil {
		return admin.FailureRetry{}, err
	}
	r := &b.retries[i]
	if r.State != failure.RetryCanary && r.State != failure.RetryRunning {
		return admin.FailureRetry{}, fmt.Errorf("retry %s is %s: %w", id, r.State, failure.ErrPrecondition)
	}
	r.State, r.FinishedAt, r.UpdatedAt, r.CancelledBy = failure.RetryCancelled, Now, Now, actor
	b.record(r.Service, actor, "failure.retry_cancel", r.Service, map[string]any{"retry": id.String()})
	return *r, nil
}

// DiscardFailedEvents implements admin.Backend: the unresolved failures
// the filter selects become discarded (parked is recorded, not acted on).
func (b *Backend) DiscardFailedEvents(ctx context.Context, service string, f failure.Filter, parked failure.Parked, reason, actor string) (int64, error) {
	if err := b.begin(ctx, Call{Method: "DiscardFailedEvents", Actor: actor, Service: service, Pool: f.Pool, Filter: f,
		Parked: parked, Reason: reason}); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	service, err := b.failureService(service, f)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, i := range b.selected(service, f) {
		e := &b.failures[i]
		if e.State == failure.StateResolved || e.State == failure.StateDiscarded {
			continue
		}
		e.State, e.ResolvedAt, e.ResolvedBy, e.UpdatedAt = failure.StateDiscarded, Now, actor, Now
		n++
	}
	b.record(service, actor, "failure.discard", service, map[string]any{"discarded": n, "reason": reason})
	return n, nil
}

// EditFailedEvent implements admin.Backend: payload must be JSON
// (failure.ErrInvalid); the edit's diff replaces the whole document.
func (b *Backend) EditFailedEvent(ctx context.Context, id uuid.UUID, payload []byte, reason, actor string) (admin.FailedEvent, error) {
	if err := b.begin(ctx, Call{Method: "EditFailedEvent", Actor: actor, ID: id, Payload: slices.Clone(payload), Reason: reason}); err != nil {
		return admin.FailedEvent{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i, err := b.failureIndex(id)
	if err != nil {
		return admin.FailedEvent{}, err
	}
	if !json.Valid(payload) {
		return admin.FailedEvent{}, fmt.Errorf("payload: not JSON: %w", failure.ErrInvalid)
	}
	e := &b.failures[i]
	diff, err := json.Marshal([]map[string]any{{"op": "replace", "path": "", "value": json.RawMessage(payload)}})
	if err != nil {
		return admin.FailedEvent{}, fmt.Errorf("admintest: diff: %w", err)
	}
	e.Edits = append(e.Edits, failure.Edit{
		ID: int64(len(e.Edits) + 1), EditedAt: Now, EditedBy: actor, Reason: reason,
		BodyBefore: e.SendBody(), BodyAfter: slices.Clone(payload), Diff: diff,
	})
	e.EditedBody, e.EditedAt, e.EditedBy, e.UpdatedAt = slices.Clone(payload), Now, actor, Now
	b.record(e.Service, actor, "failure.edit", id.String(), map[string]any{"reason": reason})
	return copyEvent(*e, true), nil
}

// failureRetryFixture returns the fixture's retries, oldest first: a
// finished one of the older "unknown product" failure, and a running one.
func failureRetryFixture() []admin.FailureRetry {
	return []admin.FailureRetry{
		{Service: "stock", Retry: failure.Retry{
			ID: FailureRetryID, State: failure.RetryDone,
			Filter: failure.Filter{Pool: "stock-events", IDs: []uuid.UUID{FailureUnknownProductID}}, Rate: 200,
			Selected: 1, Sent: 1, FailedAgain: 1, Error: "1 copy failed again", CreatedBy: "ops", CreatedAt: Now.Add(-150 * time.Minute),
			UpdatedAt: Now.Add(-149 * time.Minute), FinishedAt: Now.Add(-149 * time.Minute),
		}},
		{Service: "stock", Retry: failure.Retry{
			ID: FailureRunningRetryID, State: failure.RetryRunning,
			Filter: failure.Filter{Pool: "stock-events", Reason: "permanent"}, Canary: 1, Rate: 50,
			OverrideBeyondHorizon: true, Selected: 4, Sent: 2, Resolved: 1, CreatedBy: "ops",
			Error:     "waiting: giving way to the backlog of stock2/stock2-events, at 5 copies/s",
			CreatedAt: Now.Add(-10 * time.Minute), UpdatedAt: Now.Add(-time.Minute),
		}},
	}
}
