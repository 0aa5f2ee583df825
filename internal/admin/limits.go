package admin

import (
	"context"
	"math"
	"time"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// LimitsBackend is the part of Backend behind live limits (docs/operations.md,
// "Limits"): a pool's limits and the kill switch. The same rules as
// Backend's apply (validated input, sentinel errors, actor for the audit).
type LimitsBackend interface {
	// SetPoolLimits stores pool's limits (a Concurrency of 0 keeps the one
	// in force), applies them and returns them. An unknown pool is
	// ErrNotFound.
	SetPoolLimits(ctx context.Context, req PoolLimitsRequest, actor string) (PoolLimitsInfo, error)
	// GetPoolLimits returns pool's limits in force.
	GetPoolLimits(ctx context.Context, pool string) (PoolLimitsInfo, error)
	// PauseAll sets the kill switch of service, or of every service when
	// service is "", and returns the switches turned, by service name.
	PauseAll(ctx context.Context, service, reason, actor string) ([]ServicePause, error)
	// ResumeAll lifts the kill switch of service, or of every service when
	// service is "".
	ResumeAll(ctx context.Context, service, actor string) ([]ServicePause, error)
	// KillSwitches returns the services whose kill switch holds, by name
	// (the console shows them on every page); a service whose database
	// cannot be read is left out.
	KillSwitches(ctx context.Context) ([]ServicePause, error)
}

// PoolLimitsRequest is a validated SetPoolLimits request.
type PoolLimitsRequest struct {
	Pool        string
	Rate        float64
	Burst       int
	Concurrency int
	Reason      string
}

// PoolLimitsInfo are a pool's limits in force.
type PoolLimitsInfo struct {
	Pool string
	// Rate is in events per second for the pool across every daemon; 0:
	// none.
	Rate float64
	// Burst is the bucket's size (the rate when 0).
	Burst       int
	Concurrency int
	Reason      string
	// UpdatedAt and UpdatedBy are zero for the config's limits.
	UpdatedAt time.Time
	UpdatedBy string
}

// ServicePause is a service's kill switch.
type ServicePause struct {
	Service   string
	Paused    bool
	Reason    string
	UpdatedAt time.Time
	UpdatedBy string
}

// Limits of SetPoolLimits' numbers.
const (
	// MaxPoolRate is the largest rate accepted, in events per second.
	MaxPoolRate = 1e9
	// MaxPoolBurst is the largest burst accepted.
	MaxPoolBurst = 1 << 30
	// MaxPoolConcurrency is the largest concurrency accepted (config's own
	// bound).
	MaxPoolConcurrency = 1000
)

// PoolLimitsProblem returns what is wrong with limits (each problem naming
// its field), "" when nothing is: rate finite, 0..MaxPoolRate; burst and
// concurrency not negative and bounded.
func PoolLimitsProblem(rate float64, burst, concurrency int) string {
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0):
		return "rate is not a finite number"
	case rate < 0:
		return "rate must not be negative (0 lifts the limit)"
	case rate > MaxPoolRate:
		return "rate is above 1e9 events per second"
	case burst < 0:
		return "burst must not be negative (0: the rate)"
	case burst > MaxPoolBurst:
		return "burst is above 2^30"
	case concurrency < 0:
		return "concurrency must not be negative (0 leaves it unchanged)"
	case concurrency > MaxPoolConcurrency:
		return "concurrency is above 1000"
	}
	return ""
}

// SetPoolLimits implements AdminService.SetPoolLimits.
func (s *Server) SetPoolLimits(ctx context.Context, req *adminv1.SetPoolLimitsRequest) (*adminv1.SetPoolLimitsResponse, error) {
	if err := requireName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	if p := PoolLimitsProblem(req.GetRate(), int(req.GetBurst()), int(req.GetConcurrency())); p != "" {
		return nil, invalid("%s", p)
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	l, err := s.backend.SetPoolLimits(ctx, PoolLimitsRequest{
		Pool: req.GetPool(), Rate: req.GetRate(), Burst: int(req.GetBurst()),
		Concurrency: int(req.GetConcurrency()), Reason: req.GetReason(),
	}, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "SetPoolLimits", err)
	}
	return &adminv1.SetPoolLimitsResponse{Limits: poolLimitsToProto(l)}, nil
}

// GetPoolLimits implements AdminService.GetPoolLimits.
func (s *Server) GetPoolLimits(ctx context.Context, req *adminv1.GetPoolLimitsRequest) (*adminv1.GetPoolLimitsResponse, error) {
	if err := requireName("pool", req.GetPool()); err != nil {
		return nil, err
	}
	l, err := s.backend.GetPoolLimits(ctx, req.GetPool())
	if err != nil {
		return nil, s.toStatus(ctx, "GetPoolLimits", err)
	}
	return &adminv1.GetPoolLimitsResponse{Limits: poolLimitsToProto(l)}, nil
}

// PauseAll implements AdminService.PauseAll.
func (s *Server) PauseAll(ctx context.Context, req *adminv1.PauseAllRequest) (*adminv1.PauseAllResponse, error) {
	if err := requireName("reason", req.GetReason()); err != nil {
		return nil, err
	}
	if err := checkReason(req.GetReason()); err != nil {
		return nil, err
	}
	sw, err := s.backend.PauseAll(ctx, req.GetService(), req.GetReason(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "PauseAll", err)
	}
	return &adminv1.PauseAllResponse{Services: toProtos(sw, servicePauseToProto)}, nil
}

// ResumeAll implements AdminService.ResumeAll.
func (s *Server) ResumeAll(ctx context.Context, req *adminv1.ResumeAllRequest) (*adminv1.ResumeAllResponse, error) {
	sw, err := s.backend.ResumeAll(ctx, req.GetService(), ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "ResumeAll", err)
	}
	return &adminv1.ResumeAllResponse{Services: toProtos(sw, servicePauseToProto)}, nil
}

func poolLimitsToProto(l PoolLimitsInfo) *adminv1.PoolLimits {
	return &adminv1.PoolLimits{
		Pool: l.Pool, Rate: l.Rate, Burst: int32(min(l.Burst, MaxPoolBurst)), //nolint:gosec // bounded
		Concurrency: int32(min(l.Concurrency, MaxPoolConcurrency)), //nolint:gosec // bounded
		Reason:      l.Reason, UpdatedAt: timestampOrNil(l.UpdatedAt), UpdatedBy: l.UpdatedBy,
	}
}

func servicePauseToProto(p ServicePause) *adminv1.ServicePause {
	return &adminv1.ServicePause{
		Service: p.Service, Paused: p.Paused, Reason: p.Reason,
		UpdatedAt: timestampOrNil(p.UpdatedAt), UpdatedBy: p.UpdatedBy,
	}
}
