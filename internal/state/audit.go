package state

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/platformd/platformd/internal/query"
)

// Audited actions (AuditEntry.Action, platform.audit_log.action).
const (
	// AuditPoolPause is a pool paused; Target is the pool, Detail "reason".
	AuditPoolPause = "pool.pause"
	// AuditPoolResume is a pool resumed; Target is the pool.
	AuditPoolResume = "pool.resume"
	// AuditHorizonSet is a horizon set; Target is the service, Detail
	// "from" (null when none was stored), "to" (Go duration strings),
	// "forced" (stored under min_horizon) and "force" (asked for).
	AuditHorizonSet = "horizon.set"
	// AuditPurgeRun is a purge asked for by an operator; Target is the
	// service, Detail "dry_run", "deleted", "cutoff" and "error".
	AuditPurgeRun = "purge.run"
	// AuditFailedRetry is a retry of failed messages; Target is the pool,
	// Detail "retried", "all", "event_ids", "override_beyond_horizon" and
	// "error".
	AuditFailedRetry = "failed.retry"
	// AuditConfigReload is a config reload (SIGHUP or the ReloadConfig
	// RPC), recorded in every service database it left running; Target is
	// the service, Detail what the reload changed ("services_added",
	// "pools_restarted"...).
	AuditConfigReload = "config.reload"
	// AuditReplayStart is a replay started (not a dry run); Target is the
	// producer service, Detail "replay", "matched", "target_pool", "rate",
	// "event_names", "from", "to", "event_ids_count".
	AuditReplayStart = "replay.start"
	// AuditReplayCancel is a replay cancelled; Target is the producer
	// service, Detail "replay", "published" and "was_running".
	AuditReplayCancel = "replay.cancel"
	// AuditFailureRetry is a server-side retry of stored failures created
	// (not a dry run); Target is the filter's pool or "*", Detail "retry",
	// "selected", "canary", "rate", "override_beyond_horizon", "filter".
	AuditFailureRetry = "failure.retry"
	// AuditFailureRetryCancel is a server-side retry cancelled; Target is
	// "*", Detail "retry" and "sent".
	AuditFailureRetryCancel = "failure.retry_cancel"
	// AuditFailureDiscard is stored failures discarded; Target is the
	// filter's pool or "*", Detail "count", "filter", "reason", "parked"
	// (unspecified, release, discard) and "parked_behind".
	AuditFailureDiscard = "failure.discard"
	// AuditFailureEdit is a stored failure's body edited; Target is the
	// failure's pool, Detail "failure", "reason" and "diff" (JSON Patch).
	AuditFailureEdit = "failure.edit"
)

// ListAuditLimitDefault is the number of entries ListAudit returns when
// limit is not positive.
const ListAuditLimitDefault = 100

// AuditEntry is one row of platform.audit_log: who did what to which pool
// or service, and when (by the database clock).
type AuditEntry struct {
	// ID orders entries of one database.
	ID int64
	// At is when the action was recorded.
	At time.Time
	// Actor is the token name of whoever acted (never a secret).
	Actor string
	// Action is one of the Audit… constants.
	Action string
	// Target is the pool or service acted on.
	Target string
	// Detail holds the action's parameters and outcome (see the Audit…
	// constants); never nil after a read.
	Detail map[string]any
}

// AppendAudit records one entry in platform.audit_log through q (in q's
// transaction, if q is one). actor is a token name, never a secret; a nil
// detail is stored as {}. It is safe for concurrent use.
func AppendAudit(ctx context.Context, q query.Querier, actor, action, target string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("state: audit %s %s: %w", action, target, err)
	}
	if _, err := insertAudit.Run(ctx, q, insertAuditParams{Actor: actor, Action: action, Target: target, Detail: raw}); err != nil {
		return fmt.Errorf("state: audit %s %s: %w", action, target, err)
	}
	return nil
}

// ListAudit returns at most limit entries of q's platform.audit_log
// (ListAuditLimitDefault when limit is not positive), newest first. It is
// safe for concurrent use.
func ListAudit(ctx context.Context, q query.Querier, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = ListAuditLimitDefault
	}
	out := []AuditEntry{} // empty, not nil, as before: a JSON list
	err := listAudit.Each(ctx, q, limitParams{Limit: limit}, func(r auditRow) error {
		e := AuditEntry{ID: r.ID, At: r.At, Actor: r.Actor, Action: r.Action, Target: r.Target}
		// Numbers stay as written (json.Number): a count prints as 1000000,
		// not 1e+06.
		dec := json.NewDecoder(bytes.NewReader(r.Detail))
		dec.UseNumber()
		if err := dec.Decode(&e.Detail); err != nil {
			return fmt.Errorf("entry %d: detail: %w", e.ID, err)
		}
		if e.Detail == nil {
			e.Detail = map[string]any{}
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state: list audit: %w", err)
	}
	return out, nil
}
