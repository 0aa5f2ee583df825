package admin

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// DelayQueuesBackend is the part of Backend that reads the shared retry
// delay queues. The same rules as Backend's apply.
type DelayQueuesBackend interface {
	// ListDelayQueues returns the delay queue of every distinct retry
	// delay of the daemon's pools, shortest delay first, with the messages
	// waiting in each. A queue whose depth cannot be read is listed with
	// its Error; only a failure to list at all is an error.
	ListDelayQueues(ctx context.Context) ([]DelayQueueInfo, error)
}

// DelayQueueInfo is a shared retry delay queue as the broker reports it.
type DelayQueueInfo struct {
	// Name is the queue's name, and its exchange's.
	Name string
	// Delay is how long a retry waits in it.
	Delay time.Duration
	// Messages is how many retries wait in it, of every pool of the vhost
	// that uses the delay.
	Messages int64
	// Pools are the daemon's pools that retry after Delay, in order.
	Pools []string
	// Error is why the depth could not be read; empty otherwise.
	Error string
}

// ListDelayQueues implements AdminService.ListDelayQueues.
func (s *Server) ListDelayQueues(ctx context.Context, _ *adminv1.ListDelayQueuesRequest) (*adminv1.ListDelayQueuesResponse, error) {
	queues, err := s.backend.ListDelayQueues(ctx)
	if err != nil {
		return nil, s.toStatus(ctx, "ListDelayQueues", err)
	}
	return &adminv1.ListDelayQueuesResponse{DelayQueues: toProtos(queues, delayQueueToProto)}, nil
}

func delayQueueToProto(q DelayQueueInfo) *adminv1.DelayQueue {
	return &adminv1.DelayQueue{
		Name: q.Name, Delay: durationpb.New(q.Delay), Messages: q.Messages, Pools: q.Pools, Error: q.Error,
	}
}
