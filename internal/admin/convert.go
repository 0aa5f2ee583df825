package admin

import (
	"cmp"
	"math"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// poolStates maps PoolInfo.State to the API's enum.
var poolStates = map[string]adminv1.PoolState{
	PoolStateRunning:    adminv1.PoolState_POOL_STATE_RUNNING,
	PoolStatePaused:     adminv1.PoolState_POOL_STATE_PAUSED,
	PoolStateConnecting: adminv1.PoolState_POOL_STATE_CONNECTING,
	PoolStateStopped:    adminv1.PoolState_POOL_STATE_STOPPED,
}

// serviceToProto converts a ServiceInfo.
func serviceToProto(s ServiceInfo) *adminv1.Service {
	return &adminv1.Service{
		Name:          s.Name,
		Horizon:       durationpb.New(s.Horizon),
		MinHorizon:    durationpb.New(s.MinHorizon),
		LastPurge:     timestampOrNil(s.LastPurge),
		BeyondHorizon: s.BeyondHorizon,
		OutboxPending: s.OutboxPending,
		OutboxOldest:  durationpb.New(s.OutboxOldest),
		Error:         s.Error,
	}
}

// poolToProto converts a PoolInfo.
func poolToProto(p PoolInfo) *adminv1.Pool {
	return &adminv1.Pool{
		Name:         p.Name,
		Service:      p.Service,
		Queue:        p.Queue,
		State:        poolStates[p.State], // unknown: POOL_STATE_UNSPECIFIED
		PausedReason: p.PausedReason,
		Concurrency:  clampInt32(p.Concurrency),
		InFlight:     clampInt32(p.InFlight),
		Processed:    p.Processed,
		Duplicates:   p.Duplicates,
		Retried:      p.Retried,
		Failed:       p.Failed,
		Error:        p.Error,
		BrokerNode:   p.BrokerNode,
		RateLimit:    p.RateLimit,
		RateShare:    p.RateShare,
		Daemons:      int32(p.Daemons), //nolint:gosec // a count of daemons
	}
}

// lookupResultToProto converts a LookupResult.
func lookupResultToProto(r LookupResult) *adminv1.LookupResult {
	return &adminv1.LookupResult{
		Service:     r.Service,
		Processed:   r.Processed,
		ProcessedAt: timestampOrNil(r.ProcessedAt),
		PurgeableAt: timestampOrNil(r.PurgeableAt),
	}
}

// horizonToProto converts a HorizonInfo.
func horizonToProto(h HorizonInfo) *adminv1.Horizon {
	return &adminv1.Horizon{
		Service:        h.Service,
		Horizon:        durationpb.New(h.Horizon),
		MinHorizon:     durationpb.New(h.MinHorizon),
		UpdatedAt:      timestampOrNil(h.UpdatedAt),
		UpdatedBy:      h.UpdatedBy,
		HorizonInForce: durationpb.New(cmp.Or(h.InForce, h.Horizon)),
		PartitionWidth: durationOrNil(h.PartitionWidth),
	}
}

// durationOrNil converts d, nil for zero.
func durationOrNil(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

// purgeRunToProto converts a PurgeRun.
func purgeRunToProto(r PurgeRun) *adminv1.PurgeRun {
	return &adminv1.PurgeRun{
		Service:    r.Service,
		Cutoff:     timestampOrNil(r.Cutoff),
		Deleted:    r.Deleted,
		DryRun:     r.DryRun,
		StartedAt:  timestampOrNil(r.StartedAt),
		FinishedAt: timestampOrNil(r.FinishedAt),
		Trigger:    r.Trigger,
		Error:      r.Error,
	}
}

// failedMessageToProto converts a FailedMessage.
func failedMessageToProto(m FailedMessage) *adminv1.FailedMessage {
	return &adminv1.FailedMessage{
		EventId:            m.EventID,
		EventName:          m.EventName,
		FailureReason:      m.FailureReason,
		Error:              m.Error,
		Attempt:            clampInt32(m.Attempt),
		FailedAt:           timestampOrNil(m.FailedAt),
		Pool:               m.Pool,
		OriginalRoutingKey: m.RoutingKey,
	}
}

// toProtos converts every item of items with convert, in order. The
// result is empty, not nil, for no items.
func toProtos[T any, P any](items []T, convert func(T) P) []P {
	out := make([]P, 0, len(items))
	for _, item := range items {
		out = append(out, convert(item))
	}
	return out
}

// timestampOrNil converts t, with the zero time as an unset timestamp.
func timestampOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// clampInt32 converts n to int32, saturating.
func clampInt32(n int) int32 {
	return int32(max(math.MinInt32, min(n, math.MaxInt32)))
}
