package admin

import (
	"context"
	"strconv"
	"time"

	"github.com/google/uuid"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/replay"
)

// ReplayRequest is a ReplayEvents request, validated.
type ReplayRequest struct {
	// Service is the producer service.
	Service string
	// EventNames are names or topic patterns; none: all.
	EventNames []string
	// From and To bound occurred_at (zero: open).
	From, To time.Time
	// EventIDs select by id instead.
	EventIDs []uuid.UUID
	// TargetPool is the one pool replayed to ("" : the exchange).
	TargetPool string
	// DryRun publishes nothing.
	DryRun bool
	// Rate is the pace in messages/s (replay.RateDefault when 0 was asked; ReplayInfo.State is one of replay.State*).
	Rate int
	// IncludeBeyondHorizon sends a targeted replay's beyond-horizon events
	// with the override header.
	IncludeBeyondHorizon bool
}

// ReplayPoolInfo is what a replay does, or would do, to one target pool.
type ReplayPoolInfo struct {
	Pool, Service                                                string
	WouldApply, AlreadyProcessed, BeyondHorizon, PublishedCopies int64
}

// ReplayInfo is one replay, or a dry run's answer.
type ReplayInfo struct {
	// ID is empty for a dry run.
	ID                   string
	State                string
	Service              string
	Matched, Published   int64
	Pools                []ReplayPoolInfo
	TargetPool           string
	Rate                 int
	CreatedAt            time.Time
	FinishedAt           time.Time
	CreatedBy            string
	Error                string
	EventNames           []string
	From, To             time.Time
	EventIDsCount        int
	IncludeBeyondHorizon bool
}

var replayStates = map[string]adminv1.ReplayState{
	replay.StateDryRun:    adminv1.ReplayState_REPLAY_STATE_DRY_RUN,
	replay.StateRunning:   adminv1.ReplayState_REPLAY_STATE_RUNNING,
	replay.StateDone:      adminv1.ReplayState_REPLAY_STATE_DONE,
	replay.StateCancelled: adminv1.ReplayState_REPLAY_STATE_CANCELLED,
	replay.StateFailed:    adminv1.ReplayState_REPLAY_STATE_FAILED,
}

func replayToProto(r ReplayInfo) *adminv1.Replay {
	out := &adminv1.Replay{
		Id: r.ID, State: replayStates[r.State], Service: r.Service, Matched: r.Matched, Published: r.Published,
		TargetPool: r.TargetPool, Rate: clampInt32(r.Rate), CreatedAt: timestampOrNil(r.CreatedAt),
		FinishedAt: timestampOrNil(r.FinishedAt), CreatedBy: r.CreatedBy, Error: r.Error, EventNames: r.EventNames,
		From: timestampOrNil(r.From), To: timestampOrNil(r.To), EventIdsCount: clampInt32(r.EventIDsCount),
		IncludeBeyondHorizon: r.IncludeBeyondHorizon,
	}
	for _, p := range r.Pools {
		out.Pools = append(out.Pools, &adminv1.ReplayPool{
			Pool: p.Pool, Service: p.Service, WouldApply: p.WouldApply, AlreadyProcessed: p.AlreadyProcessed,
			BeyondHorizon: p.BeyondHorizon, Published: p.PublishedCopies,
		})
	}
	return out
}

// ReplayEvents implements AdminService.ReplayEvents.
func (s *Server) ReplayEvents(ctx context.Context, req *adminv1.ReplayEventsRequest) (*adminv1.ReplayEventsResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	r := ReplayRequest{
		Service: req.GetService(), EventNames: req.GetEventNames(), TargetPool: req.GetTargetPool(),
		DryRun: req.GetDryRun(), Rate: int(req.GetRate()), IncludeBeyondHorizon: req.GetIncludeBeyondHorizon(),
	}
	switch {
	case r.Rate < 0 || r.Rate > replay.RateMax:
		return nil, invalid("rate must be between 1 and %d messages/s (0 means %d), got %d", replay.RateMax, replay.RateDefault, r.Rate)
	case r.Rate == 0:
		r.Rate = replay.RateDefault
	}
	if req.From != nil {
		if err := req.GetFrom().CheckValid(); err != nil {
			return nil, invalid("from: %v", err)
		}
		r.From = req.GetFrom().AsTime()
	}
	if req.To != nil {
		if err := req.GetTo().CheckValid(); err != nil {
			return nil, invalid("to: %v", err)
		}
		r.To = req.GetTo().AsTime()
	}
	if req.From != nil && req.To != nil && !r.From.Before(r.To) {
		return nil, invalid("from (%s) must be before to (%s)", r.From.Format(time.RFC3339Nano), r.To.Format(time.RFC3339Nano))
	}
	for i, s := range req.GetEventIds() {
		id, err := parseEventID("event_ids["+strconv.Itoa(i)+"]", s)
		if err != nil {
			return nil, err
		}
		r.EventIDs = append(r.EventIDs, id)
	}
	if r.IncludeBeyondHorizon && r.TargetPool == "" {
		return nil, invalid("include_beyond_horizon needs target_pool: through the exchange each service's own guard applies")
	}
	info, err := s.backend.ReplayEvents(ctx, r, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "ReplayEvents", err)
	}
	return &adminv1.ReplayEventsResponse{Replay: replayToProto(info)}, nil
}

// GetReplay implements AdminService.GetReplay.
func (s *Server) GetReplay(ctx context.Context, req *adminv1.GetReplayRequest) (*adminv1.GetReplayResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	info, err := s.backend.GetReplay(ctx, req.GetService(), id)
	if err != nil {
		return nil, s.toStatus(ctx, "GetReplay", err)
	}
	return &adminv1.GetReplayResponse{Replay: replayToProto(info)}, nil
}

// ListReplays implements AdminService.ListReplays.
func (s *Server) ListReplays(ctx context.Context, req *adminv1.ListReplaysRequest) (*adminv1.ListReplaysResponse, error) {
	list, err := listNamed(ctx, s, "ListReplays", "service", req.GetService(), req.GetLimit(), s.backend.ListReplays, replayToProto)
	if err != nil {
		return nil, err
	}
	return &adminv1.ListReplaysResponse{Replays: list}, nil
}

// CancelReplay implements AdminService.CancelReplay.
func (s *Server) CancelReplay(ctx context.Context, req *adminv1.CancelReplayRequest) (*adminv1.CancelReplayResponse, error) {
	if err := requireName("service", req.GetService()); err != nil {
		return nil, err
	}
	id, err := parseEventID("id", req.GetId())
	if err != nil {
		return nil, err
	}
	info, err := s.backend.CancelReplay(ctx, req.GetService(), id, ActorFromContext(ctx))
	if err != nil {
		return nil, s.toStatus(ctx, "CancelReplay", err)
	}
	return &adminv1.CancelReplayResponse{Replay: replayToProto(info)}, nil
}
