package admin_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// TestPoolLimitsValidation: bad input answers InvalidArgument naming its
// field, an unknown pool NotFound; 0 is not bad input (a rate of 0 lifts
// the limit, a concurrency of 0 leaves it unchanged).
func TestPoolLimitsValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := asAdmin(t)
	for _, tc := range []struct {
		name  string
		req   *adminv1.SetPoolLimitsRequest
		field string
	}{
		{"negative rate", &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: -1}, "rate"},
		{"NaN rate", &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: math.NaN()}, "rate"},
		{"infinite rate", &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: math.Inf(1)}, "rate"},
		{"negative burst", &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: 1, Burst: -1}, "burst"},
		{"negative concurrency", &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Concurrency: -2}, "concurrency"},
		{"no pool", &adminv1.SetPoolLimitsRequest{Rate: 5}, "pool"},
	} {
		_, err := b.client.SetPoolLimits(ctx, tc.req)
		st := requireCode(t, err, codes.InvalidArgument)
		require.Contains(t, st.Message(), tc.field, tc.name)
	}
	_, err := b.client.SetPoolLimits(ctx, &adminv1.SetPoolLimitsRequest{Pool: "nope", Rate: 5})
	requireCode(t, err, codes.NotFound)

	resp, err := b.client.SetPoolLimits(ctx, &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: 0, Concurrency: 0})
	require.NoError(t, err)
	require.Equal(t, int32(4), resp.GetLimits().GetConcurrency(), "0 leaves the concurrency unchanged")
	require.InDelta(t, 0.0, resp.GetLimits().GetRate(), 0)

	_, err = b.client.PauseAll(ctx, &adminv1.PauseAllRequest{})
	st := requireCode(t, err, codes.InvalidArgument)
	require.Contains(t, st.Message(), "reason")
	_, err = b.client.PauseAll(ctx, &adminv1.PauseAllRequest{Service: "nope", Reason: "x"})
	requireCode(t, err, codes.NotFound)
	_, err = b.client.SetPoolLimits(asReader(t), &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: 5})
	requireCode(t, err, codes.PermissionDenied)
}
