package admin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin/admintest"
)

// A reader lists the shared delay queues with their depths, the pools
// that use each, and why a depth is unknown.
func TestListDelayQueues(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp, err := b.client.ListDelayQueues(asReader(t), &adminv1.ListDelayQueuesRequest{})
	require.NoError(t, err)
	qs := resp.GetDelayQueues()
	require.Len(t, qs, 3)
	require.Equal(t, "platformd.retry.1s", qs[0].GetName())
	require.Equal(t, time.Second, qs[0].GetDelay().AsDuration())
	require.Equal(t, int64(4), qs[0].GetMessages())
	require.Equal(t, []string{"shipping-events", "stock-events"}, qs[0].GetPools())
	require.Empty(t, qs[0].GetError())
	require.Equal(t, "queue not declared yet", qs[2].GetError())
	require.Equal(t, []admintest.Call{{Method: "ListDelayQueues"}}, b.backend.Calls())
}
