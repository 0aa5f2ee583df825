package daemon

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/broker"
	"github.com/platformd/platformd/internal/workers"
)

// delayQueuesTimeout bounds reading the delay queues' depths.
const delayQueuesTimeout = 10 * time.Second

// ListDelayQueues implements admin.DelayQueuesBackend: the shared delay
// queue of every distinct retry delay of the daemon's pools, read with
// passive declares on one pool's consuming connection.
func (b *backend) ListDelayQueues(ctx context.Context) ([]admin.DelayQueueInfo, error) {
	users := map[time.Duration][]string{}
	var reader *workers.Pool
	for _, s := range b.d.serviceList() {
		for _, p := range s.workerPools() {
			reader = p
			for _, d := range p.Config().RetryDelays {
				if !slices.Contains(users[d], p.Name()) {
					users[d] = append(users[d], p.Name())
				}
			}
		}
	}
	if reader == nil {
		return nil, nil
	}
	delays := make([]time.Duration, 0, len(users))
	for d := range users {
		delays = append(delays, d)
	}
	slices.Sort(delays)
	names := make([]string, len(delays))
	for i, d := range delays {
		names[i] = broker.DelayQueue(d)
	}
	ctx, cancel := context.WithTimeout(ctx, delayQueuesTimeout)
	defer cancel()
	depths := reader.QueueDepths(ctx, names)
	out := make([]admin.DelayQueueInfo, len(delays))
	for i, d := range delays {
		out[i] = admin.DelayQueueInfo{Name: names[i], Delay: d, Messages: int64(depths[i].Messages), Pools: users[d]}
		switch err := depths[i].Err; {
		case errors.Is(err, broker.ErrQueueNotFound):
			out[i].Error = "queue not declared yet"
		case err != nil:
			out[i].Error = err.Error()
		}
	}
	return out, nil
}
