package failure

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/dbutil"
	"github.com/platformd/platformd/internal/state"
)

// Limits of retries.
const (
	// RetryRateMax is the largest RetryRequest.Rate.
	RetryRateMax = 10000
	// ListRetriesLimitDefault is ListRetries' limit when not positive.
	ListRetriesLimitDefault = 100
)

// CreateRetry freezes the selection of req (the failed, parked and
// retrying failures its filter selects; failures stored later are not in
// it) and stores a retry the Runner will send, in one transaction with its
// audit entry (state.AuditFailureRetry); with DryRun it only counts the
// selection (the Retry returned has State "" and Selected) and stores
// nothing. Refused: a bad filter, Canary < 0 or Rate outside 1..RetryRateMax
// (ErrInvalid); ids naming a resolved or discarded failure, or a
// selection of none (ErrPrecondition). The selection is written by one
// INSERT ... SELECT, in id (arrival) order, the first Canary items marked
// canary: a hundred thousand failures take well under a second. Safe for
// concurrent use.
func (s *Store) CreateRetry(ctx context.Context, req RetryRequest, actor string) (Retry, error) {
	f := req.Filter
	if err := f.validate(); err != nil {
		return Retry{}, err
	}
	if req.Canary < 0 {
		return Retry{}, fmt.Errorf("%w: canary: %d is negative", ErrInvalid, req.Canary)
	}
	req.Rate = cmp.Or(req.Rate, RetryRateDefault)
	if req.Rate < 0 || req.Rate > RetryRateMax {
		return Retry{}, fmt.Errorf("%w: rate: %d is not within 1..%d per second", ErrInvalid, req.Rate, RetryRateMax)
	}
	if len(f.IDs) > 0 {
		c, found, err := closedAmong.Find(ctx, s.db, f.IDs)
		switch {
		case err != nil:
			return Retry{}, fmt.Errorf("failure: retry: %w", err)
		case found:
			return Retry{}, fmt.Errorf("%w: ids: failure %s is %s", ErrPrecondition, c.ID, c.State)
		}
	}
	if req.DryRun {
		w := newWhere().filter(&f).unresolved()
		n, err := countSelection.One(ctx, s.db, built{SQL: countSQL(w), Args: w.args})
		if err != nil {
			return Retry{}, fmt.Errorf("failure: retry: %w", err)
		}
		if n == 0 {
			return Retry{}, fmt.Errorf("%w: filter matches no failure to retry", ErrPrecondition)
		}
		return Retry{Filter: f, Canary: req.Canary, Rate: req.Rate, OverrideBeyondHorizon: req.OverrideBeyondHorizon, Selected: n}, nil
	}
	fj := toJSON(&f)
	fj.OverrideBeyondHorizon = req.OverrideBeyondHorizon
	raw, err := json.Marshal(fj)
	if err != nil {
		return Retry{}, fmt.Errorf("failure: retry: filter: %w", err)
	}
	id := uuid.Must(uuid.NewV7())
	st := RetryRunning
	if req.Canary > 0 {
		st = RetryCanary
	}
	_, err = dbutil.WithTxV(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) (struct{}, error) {
		p := insertRetryParams{ID: id, State: st, Filter: raw, Canary: req.Canary, Rate: req.Rate, CreatedBy: actor}
		if _, err := insertRetry.Run(ctx, tx, p); err != nil {
			return struct{}{}, err
		}
		w := newWhere(id, req.Canary).filter(&f).unresolved()
		tag, err := insertItems.Run(ctx, tx, built{SQL: insertItemsSQL(w), Args: w.args})
		if err != nil {
			return struct{}{}, err
		}
		n := tag.RowsAffected()
		if n == 0 {
			return struct{}{}, fmt.Errorf("%w: filter matches no failure to retry", ErrPrecondition)
		}
		if _, err := setSelected.Run(ctx, tx, selectedParams{ID: id, Selected: n}); err != nil {
			return struct{}{}, err
		}
		detail := map[string]any{"retry": id.String(), "selected": n, "canary": req.Canary, "rate": req.Rate,
			"override_beyond_horizon": req.OverrideBeyondHorizon, "filter": auditFilter(&f)}
		return struct{}{}, state.AppendAudit(ctx, tx, actor, state.AuditFailureRetry, cmp.Or(f.Pool, "*"), detail)
	})
	if err != nil {
		return Retry{}, fmt.Errorf("failure: retry: %w", err)
	}
	return s.GetRetry(ctx, id)
}

func (r *retryRow) retry() (Retry, error) {
	out := r.Retry
	var fj filterJSON
	if err := json.Unmarshal(r.Filter, &fj); err != nil {
		return Retry{}, fmt.Errorf("retry %s: filter: %w", r.ID, err)
	}
	out.Filter = fj.filter()
	out.OverrideBeyondHorizon = fj.OverrideBeyondHorizon
	if r.FinishedAt != nil {
		out.FinishedAt = *r.FinishedAt
	}
	return out, nil
}

// GetRetry returns one retry with its counts: Resolved, the selection's
// failures resolved since the retry was created; FailedAgain, those whose
// copy was sent and that failed again after it (failed, or retrying in a
// retry delay). An unknown id wraps ErrNotFound. Safe for concurrent use.
func (s *Store) GetRetry(ctx context.Context, id uuid.UUID) (Retry, error) {
	r, found, err := getRetry.Find(ctx, s.db, id)
	switch {
	case err != nil:
		return Retry{}, fmt.Errorf("failure: get retry %s: %w", id, err)
	case !found:
		return Retry{}, fmt.Errorf("%w: retry %s", ErrNotFound, id)
	}
	out, err := r.retry()
	if err != nil {
		return Retry{}, fmt.Errorf("failure: get retry: %w", err)
	}
	return out, nil
}

// ListRetries returns the newest retries, at most limit
// (ListRetriesLimitDefault when not positive), with their counts. Safe
// for concurrent use.
func (s *Store) ListRetries(ctx context.Context, limit int) ([]Retry, error) {
	if limit <= 0 {
		limit = ListRetriesLimitDefault
	}
	out := []Retry{}
	err := listRetries.Each(ctx, s.db, limit, func(r retryRow) error {
		x, err := r.retry()
		if err != nil {
			return err
		}
		out = append(out, x)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failure: list retries: %w", err)
	}
	return out, nil
}

// CancelRetry stops a retry that is in its canary or running, by actor,
// audited (state.AuditFailureRetryCancel) in the same transaction; the
// runner sends no chunk after it sees the cancel (within a chunk). A
// retry already finished is ErrPrecondition, an unknown one ErrNotFound.
// Safe for concurrent use.
func (s *Store) CancelRetry(ctx context.Context, id uuid.UUID, actor string) (Retry, error) {
	err := dbutil.WithTx(ctx, s.db, dbutil.ReadCommitted, func(ctx context.Context, tx pgx.Tx) error {
		sent, found, err := cancelRetry.Find(ctx, tx, cancelParams{ID: id, By: actor})
		if err != nil {
			return err
		}
		if !found {
			st, found, err := retryState.Find(ctx, tx, id)
			switch {
			case err != nil:
				return err
			case !found:
				return fmt.Errorf("%w: retry %s", ErrNotFound, id)
			}
			return fmt.Errorf("%w: retry %s is %s, not canary or running", ErrPrecondition, id, st)
		}
		return state.AppendAudit(ctx, tx, actor, state.AuditFailureRetryCancel, "*",
			map[string]any{"retry": id.String(), "sent": sent})
	})
	if err != nil {
		return Retry{}, fmt.Errorf("failure: cancel retry: %w", err)
	}
	return s.GetRetry(ctx, id)
}
