package admin

import (
	"context"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// ListServices implements AdminService.ListServices.
func (s *Server) ListServices(ctx context.Context, _ *adminv1.ListServicesRequest) (*adminv1.ListServicesResponse, error) {
	services, err := s.backend.ListServices(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListServices", err)
	}
	return &adminv1.ListServicesResponse{Services: toProtos(services, serviceToProto)}, nil
}

// ListPools implements AdminService.ListPools.
func (s *Server) ListPools(ctx context.Context, req *adminv1.ListPoolsRequest) (*adminv1.ListPoolsResponse, error) {
	pools, err := s.backend.ListPools(ctx, req.GetService())
	if err != nil {
		return nil, s.toStatus(ctx, "ListPools", err)
	}
	return &adminv1.ListPoolsResponse{Pools: toProtos(pools, poolToProto)}, nil
}

// PausePool implements AdminService.PausePool.
func (s *Server) PausePool(ctx context.Context, req *adminv1.PausePoolRequest) (*adminv1.PausePoolResponse, error) {
	if err := requireName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	pool, err := s.backend.PausePool(ctx, req.GetPool(), req.GetReason(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "PausePool", err)
	}
	return &adminv1.PausePoolResponse{Pool: poolToProto(pool)}, nil
}

// ResumePool implements AdminService.ResumePool.
func (s *Server) ResumePool(ctx context.Context, req *adminv1.ResumePoolRequest) (*adminv1.ResumePoolResponse, error) {
	if err := requireName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	pool, err := s.backend.ResumePool(ctx, req.GetPool(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "ResumePool", err)
	}
	return &adminv1.ResumePoolResponse{Pool: poolToProto(pool)}, nil
}

// LookupEvent implements AdminService.LookupEvent.
func (s *Server) LookupEvent(ctx context.Context, req *adminv1.LookupEventRequest) (*adminv1.LookupEventResponse, error) {
	id, err := parseEventID("event_id", req.GetEventId())
	if err != nil {
		return nil, err
	}
	results, err := s.backend.LookupEvent(ctx, id, req.GetService())
	if err != nil {
		return nil, s.toStatus(ctx, "LookupEvent", err)
	}
	return &adminv1.LookupEventResponse{Results: toProtos(results, lookupResultToProto)}, nil
}

// GetHorizon implements AdminService.GetHorizon.
func (s *Server) GetHorizon(ctx context.Context, req *adminv1.GetHorizonRequest) (*adminv1.GetHorizonResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	h, err := s.backend.GetHorizon(ctx, req.GetService())
	if err != nil {
		return nil, s.toStatus(ctx, "GetHorizon", err)
	}
	return &adminv1.GetHorizonResponse{Horizon: horizonToProto(h)}, nil
}

// SetHorizon implements AdminService.SetHorizon.
func (s *Server) SetHorizon(ctx context.Context, req *adminv1.SetHorizonRequest) (*adminv1.SetHorizonResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	horizon, err := positiveDuration("horizon", req.GetHorizon())
	if err != nil {
		return nil, err
	}
	h, err := s.backend.SetHorizon(ctx, req.GetService(), horizon, req.GetForce(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "SetHorizon", err)
	}
	return &adminv1.SetHorizonResponse{Horizon: horizonToProto(h)}, nil
}

// RunPurge implements AdminService.RunPurge.
func (s *Server) RunPurge(ctx context.Context, req *adminv1.RunPurgeRequest) (*adminv1.RunPurgeResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	run, err := s.backend.RunPurge(ctx, req.GetService(), req.GetDryRun(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "RunPurge", err)
	}
	return &adminv1.RunPurgeResponse{Run: purgeRunToProto(run)}, nil
}

// ListPurgeRuns implements AdminService.ListPurgeRuns.
func (s *Server) ListPurgeRuns(ctx context.Context, req *adminv1.ListPurgeRunsRequest) (*adminv1.ListPurgeRunsResponse, error) {
	runs, err := listNamed(ctx, s, "ListPurgeRuns", "service", req.GetService(), req.GetLimit(), s.backend.ListPurgeRuns, purgeRunToProto)
	if err != nil {
		return nil, err
	}
	return &adminv1.ListPurgeRunsResponse{Runs: runs}, nil
}

// ListFailedMessages implements AdminService.ListFailedMessages.
func (s *Server) ListFailedMessages(ctx context.Context, req *adminv1.ListFailedMessagesRequest) (*adminv1.ListFailedMessagesResponse, error) {
	msgs, err := listNamed(ctx, s, "ListFailedMessages", "pool", req.GetPool(), req.GetLimit(), s.backend.ListFailedMessages, failedMessageToProto)
	if err != nil {
		return nil, err
	}
	return &adminv1.ListFailedMessagesResponse{Messages: msgs}, nil
}

// listNamed is the body of the listings of one named service or pool
// (ListPurgeRuns, ListFailedMessages, ListReplays): the name required
// (as field), the limit checked and defaulted, the backend's list
// converted, its error mapped to a status under method.
func listNamed[T, P any](ctx context.Context, s *Server, method, field, name string, rawLimit int32,
	list func(context.Context, string, int) ([]T, error), convert func(T) P,
) ([]P, error) {
	if err := requireName(field, name); err != nil {
		return nil, err
	}
	limit, err := listLimit(rawLimit)
	if err != nil {
		return nil, err
	}
	items, err := list(ctx, name, limit)
	if err != nil {
		return nil, s.toStatus(ctx, method, err)
	}
	return toProtos(items, convert), nil
}

// RetryFailedMessages implements AdminService.RetryFailedMessages.
func (s *Server) RetryFailedMessages(ctx context.Context, req *adminv1.RetryFailedMessagesRequest) (*adminv1.RetryFailedMessagesResponse, error) {
	if err := requireName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	ids, err := retryTargets(req.GetEventIds(), req.GetAll())
	if err != nil {
		return nil, err
	}
	n, err := s.backend.RetryFailedMessages(ctx, req.GetPool(), ids, req.GetAll(), req.GetOverrideBeyondHorizon(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "RetryFailedMessages", err)
	}
	return &adminv1.RetryFailedMessagesResponse{Retried: clampInt32(n)}, nil
}

// ReloadConfig reloads the daemon's configuration (admin role).
func (s *Server) ReloadConfig(ctx context.Context, _ *adminv1.ReloadConfigRequest) (*adminv1.ReloadConfigResponse, error) {
	r, err := s.backend.ReloadConfig(ctx, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "ReloadConfig", err)
	}
	return &adminv1.ReloadConfigResponse{
		ServicesAdded: r.ServicesAdded, ServicesRemoved: r.ServicesRemoved, ServicesRestarted: r.ServicesRestarted,
		PoolsAdded: r.PoolsAdded, PoolsRemoved: r.PoolsRemoved, PoolsRestarted: r.PoolsRestarted,
		PoolsUnchanged: r.PoolsUnchanged, ServicesResized: r.ServicesResized, PoolsResized: r.PoolsResized,
	}, nil
}
