package admin

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// AuditEntry is one recorded operator action: a pause, a resume, a horizon
// set (forced or not), a purge asked for (dry or not) or a retry of failed
// messages. Its Action and Detail keys are those of the state package's
// Audit… constants.
type AuditEntry struct {
	// Service is the service whose database recorded the entry.
	Service string
	// At is when the action was recorded (database clock).
	At time.Time
	// Actor is the name of the token that acted; never a secret.
	Actor string
	// Action is pool.pause, pool.resume, horizon.set, purge.run or
	// failed.retry.
	Action string
	// Target is the pool or service acted on.
	Target string
	// Detail holds the action's parameters and outcome: strings, booleans,
	// json.Number values, nil, or lists of them.
	Detail map[string]any
}

// ServiceDetail is what DescribeService reports of a service beyond its
// ServiceInfo.
type ServiceDetail struct {
	// Service is the service's name.
	Service string
	// RetrySpan is the longest retry span (sum of retry delays) of the
	// service's pools: SetHorizon refuses a horizon at or below it, even
	// with force, since a retried copy would outlive its processed_event
	// row.
	RetrySpan time.Duration
	// RowsEstimate is the estimated number of rows in processed_event,
	// from PostgreSQL's statistics (no scan); -1 when unknown.
	RowsEstimate int64
	// LastRun is the newest finished purge run that was not a dry run,
	// failed or not (its Error says); Service is empty when none ran.
	LastRun PurgeRun
}

// DescribeService implements AdminService.DescribeService.
func (s *Server) DescribeService(ctx context.Context, req *adminv1.DescribeServiceRequest) (*adminv1.DescribeServiceResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	d, err := s.backend.DescribeService(ctx, req.GetService())
	if err != nil {
		return nil, s.toStatus(ctx, "DescribeService", err)
	}
	resp := &adminv1.DescribeServiceResponse{
		Service:               d.Service,
		RetrySpan:             durationpb.New(d.RetrySpan),
		ProcessedRowsEstimate: d.RowsEstimate,
	}
	if d.LastRun.Service != "" {
		resp.LastRun = purgeRunToProto(d.LastRun)
	}
	return resp, nil
}

// AuditList is what ListAudit returns.
type AuditList struct {
	// Entries are the audit entries, newest first.
	Entries []AuditEntry
	// Unavailable, for a list of every service, are the services whose
	// audit could not be read (their database away), sorted.
	Unavailable []string
}

// ListAudit implements AdminService.ListAudit.
func (s *Server) ListAudit(ctx context.Context, req *adminv1.ListAuditRequest) (*adminv1.ListAuditResponse, error) {
	limit, err := listLimit(req.GetLimit())
	if err != nil {
		return nil, err
	}
	list, err := s.backend.ListAudit(ctx, req.GetService(), limit)
	if err != nil {
		return nil, s.toStatus(ctx, "ListAudit", err)
	}
	resp := &adminv1.ListAuditResponse{Entries: make([]*adminv1.AuditEntry, 0, len(list.Entries)), UnavailableServices: list.Unavailable}
	for _, e := range list.Entries {
		detail, err := structpb.NewStruct(e.Detail)
		if err != nil {
			return nil, s.toStatus(ctx, "ListAudit", fmt.Errorf("audit entry detail: %w", err))
		}
		resp.Entries = append(resp.Entries, &adminv1.AuditEntry{
			Service: e.Service, At: timestampOrNil(e.At), Actor: e.Actor,
			Action: e.Action, Target: e.Target, Detail: detail,
		})
	}
	return resp, nil
}
