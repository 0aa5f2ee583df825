package admintest

import (
	"context"
	"slices"
	"time"

	"github.com/platformd/platformd/internal/admin"
)

// DelayQueues are the delay queues the Backend reports: the shop's pools
// retry after 1s and 10s (a few retries waiting in each), and 1m, whose
// queue does not exist yet.
var DelayQueues = []admin.DelayQueueInfo{
	{Name: "platformd.retry.1s", Delay: time.Second, Messages: 4, Pools: []string{"shipping-events", "stock-events"}},
	{Name: "platformd.retry.10s", Delay: 10 * time.Second, Messages: 2, Pools: []string{"stock-events"}},
	{Name: "platformd.retry.1m0s", Delay: time.Minute, Pools: []string{"stock-events"}, Error: "queue not declared yet"},
}

// ListDelayQueues implements admin.Backend.
func (b *Backend) ListDelayQueues(ctx context.Context) ([]admin.DelayQueueInfo, error) {
	if err := b.begin(ctx, Call{Method: "ListDelayQueues"}); err != nil {
		return nil, err
	}
	return slices.Clone(DelayQueues), nil
}
