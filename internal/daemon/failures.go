package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/failure"
)

// The failure workbench of the admin API, over each service's failure
// store (its database's platform.failed_event). The store audits what it
// changes; the daemon finds the service and maps the store's errors.

// failures returns the failure store of the service's database.
func (s *service) failures() *failure.Store { return failure.NewStore(s.db) }

// workbenchError is a failure store's refusal as the admin API's: its
// text kept whole, errors.Is both the store's sentinel and kind.
type workbenchError struct {
	err, kind error
}

// Error returns the store's text.
func (e *workbenchError) Error() string { return e.err.Error() }

// Unwrap returns the store's error and the admin sentinel.
func (e *workbenchError) Unwrap() []error { return []error{e.err, e.kind} }

// failureError maps a failure store error to the admin API's:
// failure.ErrNotFound, ErrInvalid and ErrPrecondition to admin.ErrNotFound,
// ErrInvalidArgument and ErrFailedPrecondition (the text kept), context
// errors as they are, any other (a database away) to admin.ErrUnavailable.
func failureError(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, failure.ErrNotFound):
		kind = admin.ErrNotFound
	case errors.Is(err, failure.ErrInvalid):
		kind = admin.ErrInvalidArgument
	case errors.Is(err, failure.ErrPrecondition):
		kind = admin.ErrFailedPrecondition
	default:
		return unavailable(err)
	}
	return &workbenchError{err: err, kind: kind}
}

// failureService resolves a filter's service: the one named, else the
// service of the filter's pool (ErrNotFound for either unknown). A pool
// named with a service must be that service's.
func (b *backend) failureService(name string, f failure.Filter) (*service, error) {
	if name != "" {
		s, err := b.service(name)
		if err != nil {
			return nil, err
		}
		if f.Pool != "" {
			if _, ok := s.pool(f.Pool); !ok {
				return nil, fmt.Errorf("%w: pool %q of service %q", admin.ErrNotFound, f.Pool, name)
			}
		}
		return s, nil
	}
	_, s, err := b.pool(f.Pool)
	return s, err
}

// ListFailureGroups implements admin.Backend.
func (b *backend) ListFailureGroups(ctx context.Context, name string, f failure.Filter, by []string) ([]failure.Group, error) {
	s, err := b.failureService(name, f)
	if err != nil {
		return nil, err
	}
	groups, err := s.failures().Groups(ctx, f, by)
	return groups, failureError(err)
}

// ListFailedEvents implements admin.Backend.
func (b *backend) ListFailedEvents(ctx context.Context, name string, f failure.Filter, limit int, pageToken string) ([]admin.FailedEvent, string, error) {
	s, err := b.failureService(name, f)
	if err != nil {
		return nil, "", err
	}
	rows, next, err := s.failures().List(ctx, f, limit, pageToken)
	if err != nil {
		return nil, "", failureError(err)
	}
	out := make([]admin.FailedEvent, len(rows))
	for i, r := range rows {
		out[i] = admin.FailedEvent{Service: s.name, Failure: r}
	}
	return out, next, nil
}

// eachService calls fn for every service until it reports found; a
// service whose store errs (other than failure.ErrNotFound) is passed
// over, the first such error answered when none found it. what names the
// thing looked for in the not-found error.
func (b *backend) eachService(ctx context.Context, name, what string, fn func(*service) error) error {
	svcs, err := b.services(name)
	if err != nil {
		return err
	}
	var away error
	for _, s := range svcs {
		err := fn(s)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, failure.ErrNotFound):
		case ctx.Err() != nil:
			return ctx.Err()
		case len(svcs) == 1:
			return failureError(err)
		default:
			if away == nil {
				away = fmt.Errorf("service %s: %w", s.name, err)
			}
		}
	}
	if away != nil {
		return failureError(fmt.Errorf("%s not found in the services that answered: %w", what, away))
	}
	return fmt.Errorf("%w: %s", admin.ErrNotFound, what)
}

// GetFailedEvent implements admin.Backend: the failure is looked for in
// every service.
func (b *backend) GetFailedEvent(ctx context.Context, id uuid.UUID) (admin.FailedEvent, error) {
	var out admin.FailedEvent
	err := b.eachService(ctx, "", "failure "+id.String(), func(s *service) error {
		f, edits, err := s.failures().Get(ctx, id)
		if err == nil {
			out = admin.FailedEvent{Service: s.name, Failure: f, Edits: edits}
		}
		return err
	})
	return out, err
}

// RetryFailedEvents implements admin.Backend.
func (b *backend) RetryFailedEvents(ctx context.Context, name string, req failure.RetryRequest, actor string) (admin.FailureRetry, error) {
	s, err := b.failureService(name, req.Filter)
	if err != nil {
		return admin.FailureRetry{}, err
	}
	r, err := s.failures().CreateRetry(ctx, req, actor)
	if err != nil {
		return admin.FailureRetry{}, failureError(err)
	}
	s.wakeRetrier(req.DryRun)
	return admin.FailureRetry{Service: s.name, Retry: r}, nil
}

// GetFailureRetry implements admin.Backend.
func (b *backend) GetFailureRetry(ctx context.Context, name string, id uuid.UUID) (admin.FailureRetry, error) {
	var out admin.FailureRetry
	err := b.eachService(ctx, name, "failure retry "+id.String(), func(s *service) error {
		r, err := s.failures().GetRetry(ctx, id)
		if err == nil {
			out = admin.FailureRetry{Service: s.name, Retry: r}
		}
		return err
	})
	return out, err
}

// ListFailureRetries implements admin.Backend: of every service, the
// newest limit of their retries together.
func (b *backend) ListFailureRetries(ctx context.Context, name string, limit int) ([]admin.FailureRetry, error) {
	svcs, err := b.services(name)
	if err != nil {
		return nil, err
	}
	var out []admin.FailureRetry
	for _, s := range svcs {
		rs, err := s.failures().ListRetries(ctx, limit)
		if err != nil {
			return nil, failureError(fmt.Errorf("service %s: %w", s.name, err))
		}
		for _, r := range rs {
			out = append(out, admin.FailureRetry{Service: s.name, Retry: r})
		}
	}
	slices.SortStableFunc(out, func(x, y admin.FailureRetry) int {
		return cmp.Or(y.CreatedAt.Compare(x.CreatedAt), cmp.Compare(x.Service, y.Service))
	})
	return out[:min(limit, len(out))], nil
}

// CancelFailureRetry implements admin.Backend.
func (b *backend) CancelFailureRetry(ctx context.Context, name string, id uuid.UUID, actor string) (admin.FailureRetry, error) {
	var out admin.FailureRetry
	err := b.eachService(ctx, name, "failure retry "+id.String(), func(s *service) error {
		r, err := s.failures().CancelRetry(ctx, id, actor)
		if err == nil {
			out = admin.FailureRetry{Service: s.name, Retry: r}
		}
		return err
	})
	return out, err
}

// DiscardFailedEvents implements admin.Backend.
func (b *backend) DiscardFailedEvents(ctx context.Context, name string, f failure.Filter, parked failure.Parked, reason, actor string) (int64, error) {
	s, err := b.failureService(name, f)
	if err != nil {
		return 0, err
	}
	n, err := s.failures().Discard(ctx, f, parked, reason, actor)
	return n, failureError(err)
}

// EditFailedEvent implements admin.Backend: the failure is looked for in
// every service, then edited in its own.
func (b *backend) EditFailedEvent(ctx context.Context, id uuid.UUID, payload []byte, reason, actor string) (admin.FailedEvent, error) {
	var out admin.FailedEvent
	err := b.eachService(ctx, "", "failure "+id.String(), func(s *service) error {
		st := s.failures()
		f, err := st.EditBody(ctx, id, payload, reason, actor)
		if err != nil {
			return err
		}
		_, edits, err := st.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("reading failure %s back: %w", id, err)
		}
		out = admin.FailedEvent{Service: s.name, Failure: f, Edits: edits}
		return nil
	})
	return out, err
}

// failedMessagesFilter is the selection of the failure-queue RPCs
// (ListFailedMessages, RetryFailedMessages) in the store: pool's failures
// still failed, those of ids when any.
func failedMessagesFilter(pool string, ids []uuid.UUID) failure.Filter {
	return failure.Filter{Pool: pool, State: failure.StateFailed, IDs: ids}
}

// ListFailedMessages implements admin.Backend from the failure store: the
// pool's failed failures, newest first.
func (b *backend) ListFailedMessages(ctx context.Context, name string, limit int) ([]admin.FailedMessage, error) {
	_, s, err := b.pool(name)
	if err != nil {
		return nil, err
	}
	rows, _, err := s.failures().List(ctx, failedMessagesFilter(name, nil), limit, "")
	if err != nil {
		return nil, failureError(err)
	}
	out := make([]admin.FailedMessage, len(rows))
	for i, r := range rows {
		eventID := ""
		if r.EventID != uuid.Nil {
			eventID = r.EventID.String()
		}
		out[i] = admin.FailedMessage{EventID: eventID, EventName: r.EventName, FailureReason: r.Reason, Error: r.Error,
			Attempt: r.Attempt, FailedAt: r.FailedAt, Pool: r.Pool, RoutingKey: r.RoutingKey}
	}
	return out, nil
}

// RetryFailedMessages implements admin.Backend as a server-side retry of
// the pool's failed failures (those of ids unless all), answering how
// many it selected; a selection of nothing retries nothing (0, no error,
// as the failure queue answered). Audited as failed.retry.
func (b *backend) RetryFailedMessages(ctx context.Context, name string, ids []uuid.UUID, all, override bool, actor string) (int, error) {
	_, svc, err := b.pool(name)
	if err != nil {
		return 0, err
	}
	st := svc.failures()
	req := failure.RetryRequest{Filter: failedMessagesFilter(name, nil), Rate: failure.RetryRateDefault, OverrideBeyondHorizon: override}
	if !all {
		// The request names event ids; the store's filter takes failure
		// ids.
		if req.Filter.IDs, err = failureIDs(ctx, st, name, ids); err != nil {
			return 0, failureError(err)
		}
		if len(req.Filter.IDs) == 0 {
			return 0, nil
		}
	}
	r, err := st.CreateRetry(ctx, req, actor)
	if errors.Is(err, failure.ErrPrecondition) {
		return 0, nil // nothing failed to retry
	}
	if err == nil {
		svc.wakeRetrier(false)
	}
	n := int(r.Selected)
	b.auditRetry(ctx, svc, name, ids, all, override, actor, n, err)
	return n, failureError(err)
}

// failureIDs returns the ids of pool's failed failures whose event is one
// of eventIDs, reading the pool's failed failures a page at a time until
// every event is found or the pages end.
func failureIDs(ctx context.Context, st *failure.Store, pool string, eventIDs []uuid.UUID) ([]uuid.UUID, error) {
	want := make(map[uuid.UUID]bool, len(eventIDs))
	for _, id := range eventIDs {
		want[id] = true
	}
	var out []uuid.UUID
	token := ""
	for len(want) > 0 {
		rows, next, err := st.List(ctx, failedMessagesFilter(pool, nil), admin.ListLimitMax, token)
		if err != nil {
			return nil, fmt.Errorf("finding the failures of %d event ids: %w", len(eventIDs), err)
		}
		for _, r := range rows {
			if want[r.EventID] {
				delete(want, r.EventID)
				out = append(out, r.ID)
			}
		}
		if next == "" {
			break
		}
		token = next
	}
	return out, nil
}
