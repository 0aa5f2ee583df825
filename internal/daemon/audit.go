package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/state"
)

// auditTimeout bounds writing an audit entry after an action. The entry is
// written even when the caller went away (the action happened), so it
// runs detached from the request's context.
const auditTimeout = 5 * time.Second

// audit records an action that has no transaction of its own to join (a
// purge, a retry through the broker). A failure to record does not undo
// the action: it is logged as an error.
func (b *backend) audit(ctx context.Context, s *service, actor, action, target string, detail map[string]any) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := state.AppendAudit(actx, s.db, actor, action, target, detail); err != nil {
		b.d.log.ErrorContext(ctx, "daemon: audit entry not recorded", slog.String("action", action),
			slog.String("target", target), slog.String("actor", actor), slog.Any("error", err))
	}
}

// auditPurge records a purge asked for through the admin API or the console
// (scheduled runs are in the purge history, not the audit list). A purge
// refused before it started (one already running) did nothing and is not
// recorded.
func (b *backend) auditPurge(ctx context.Context, s *service, dryRun bool, actor string, r state.PurgeRun, err error) {
	if r.ID == 0 && err != nil {
		return
	}
	name := s.name
	detail := map[string]any{"dry_run": dryRun, "deleted": r.Deleted}
	if !r.Cutoff.IsZero() {
		detail["cutoff"] = r.Cutoff.UTC().Format(time.RFC3339)
	}
	if err != nil {
		detail["error"] = err.Error()
	}
	b.audit(ctx, s, actor, state.AuditPurgeRun, name, detail)
}

// auditRetryMaxIDs bounds the event ids kept in a retry's audit entry.
const auditRetryMaxIDs = 100

// auditRetry records a retry of failed messages, with how many moved even
// when it stopped part way; one that failed having moved nothing is not
// recorded.
func (b *backend) auditRetry(ctx context.Context, s *service, pool string, ids []uuid.UUID, all, override bool, actor string, n int, err error) {
	if err != nil && n == 0 {
		return
	}
	detail := map[string]any{"retried": n, "all": all, "override_beyond_horizon": override}
	if !all {
		strs := make([]string, 0, min(len(ids), auditRetryMaxIDs))
		for _, id := range ids[:min(len(ids), auditRetryMaxIDs)] {
			strs = append(strs, id.String())
		}
		detail["event_ids"] = strs
		if len(ids) > auditRetryMaxIDs {
			detail["event_ids_total"] = len(ids)
		}
	}
	if err != nil {
		detail["error"] = err.Error()
	}
	b.audit(ctx, s, actor, state.AuditFailedRetry, pool, detail)
}

func (b *backend) DescribeService(ctx context.Context, name string) (admin.ServiceDetail, error) {
	s, err := b.service(name)
	if err != nil {
		return admin.ServiceDetail{}, err
	}
	d := admin.ServiceDetail{Service: name}
	for _, p := range s.config().Pools {
		d.RetrySpan = max(d.RetrySpan, p.RetrySpan())
	}
	if d.RowsEstimate, err = dedup.EstimateRows(ctx, s.db); err != nil {
		return admin.ServiceDetail{}, unavailable(err)
	}
	last, ok, err := state.LastFinishedPurge(ctx, s.db, name)
	if err != nil {
		return admin.ServiceDetail{}, unavailable(err)
	}
	if ok {
		d.LastRun = purgeRun(last)
	}
	return d, nil
}

func (b *backend) ListAudit(ctx context.Context, name string, limit int) (admin.AuditList, error) {
	var out admin.AuditList
	svcs, err := b.services(name)
	if err != nil {
		return out, err
	}
	for _, s := range svcs {
		entries, err := state.ListAudit(ctx, s.db, limit)
		if err != nil {
			err = unavailable(fmt.Errorf("service %s: %w", s.name, err))
			if name != "" || ctx.Err() != nil {
				return admin.AuditList{}, err
			}
			// An operator reading the audit during an incident still
			// sees every other service's.
			b.d.log.WarnContext(ctx, "daemon: audit unavailable", slog.String("service", s.name), slog.Any("error", err))
			out.Unavailable = append(out.Unavailable, s.name)
			continue
		}
		for _, e := range entries {
			out.Entries = append(out.Entries, admin.AuditEntry{Service: s.name, At: e.At, Actor: e.Actor,
				Action: e.Action, Target: e.Target, Detail: e.Detail})
		}
	}
	// Each service's list is newest first; merge them, newest first.
	slices.SortStableFunc(out.Entries, func(a, b admin.AuditEntry) int { return b.At.Compare(a.At) })
	out.Entries = out.Entries[:min(limit, len(out.Entries))]
	slices.Sort(out.Unavailable)
	return out, nil
}
