package admin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/replay"
)

// ReplayEvents over gRPC: the read token may list and get, not start or
// cancel; malformed requests are refused with InvalidArgument naming the
// field before the backend is called; a dry run answers the per-pool
// table; a replay started is listed, got and cancelled.
func TestReplayRPCs(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	from := timestamppb.New(admintest.Now.Add(-time.Hour))
	to := timestamppb.New(admintest.Now)
	ok := &adminv1.ReplayEventsRequest{Service: "stock", From: from, To: to}

	_, err := b.client.ReplayEvents(asReader(t), ok)
	requireCode(t, err, codes.PermissionDenied)
	_, err = b.client.CancelReplay(asReader(t), &adminv1.CancelReplayRequest{Service: "stock", Id: admintest.StockEventID.String()})
	requireCode(t, err, codes.PermissionDenied)

	for _, tc := range []struct {
		name  string
		req   *adminv1.ReplayEventsRequest
		field string
	}{
		{"NoService", &adminv1.ReplayEventsRequest{From: from}, "service"},
		{"FromAfterTo", &adminv1.ReplayEventsRequest{Service: "stock", From: to, To: from}, "from"},
		{"NegativeRate", &adminv1.ReplayEventsRequest{Service: "stock", From: from, Rate: -1}, "rate"},
		{"BadID", &adminv1.ReplayEventsRequest{Service: "stock", EventIds: []string{"x"}}, "event_ids[0]"},
		{"OverrideWithoutPool", &adminv1.ReplayEventsRequest{Service: "stock", From: from, IncludeBeyondHorizon: true}, "include_beyond_horizon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.client.ReplayEvents(asAdmin(t), tc.req)
			st := requireCode(t, err, codes.InvalidArgument)
			require.Contains(t, st.Message(), tc.field)
		})
	}
	require.Empty(t, b.backend.CallsTo("ReplayEvents"), "refused before the backend")

	_, err = b.client.ReplayEvents(asAdmin(t), &adminv1.ReplayEventsRequest{Service: "nope", From: from})
	requireCode(t, err, codes.NotFound)
	_, err = b.client.ReplayEvents(asAdmin(t), &adminv1.ReplayEventsRequest{Service: "stock", From: from, TargetPool: "nope"})
	st := requireCode(t, err, codes.NotFound)
	require.Contains(t, st.Message(), "target_pool")

	dry := &adminv1.ReplayEventsRequest{Service: "stock", From: from, To: to, DryRun: true}
	resp, err := b.client.ReplayEvents(asAdmin(t), dry)
	require.NoError(t, err)
	require.Equal(t, adminv1.ReplayState_REPLAY_STATE_DRY_RUN, resp.GetReplay().GetState())
	require.Empty(t, resp.GetReplay().GetId())
	require.Equal(t, int32(replay.RateDefault), resp.GetReplay().GetRate(), "rate 0 means the default")
	require.Len(t, resp.GetReplay().GetPools(), 2)
	require.Equal(t, int64(7), resp.GetReplay().GetPools()[1].GetWouldApply())

	resp, err = b.client.ReplayEvents(asAdmin(t), ok)
	require.NoError(t, err)
	id := resp.GetReplay().GetId()
	require.Equal(t, adminv1.ReplayState_REPLAY_STATE_RUNNING, resp.GetReplay().GetState())
	got, err := b.client.GetReplay(asReader(t), &adminv1.GetReplayRequest{Service: "stock", Id: id})
	require.NoError(t, err)
	require.Equal(t, id, got.GetReplay().GetId())
	list, err := b.client.ListReplays(asReader(t), &adminv1.ListReplaysRequest{Service: "stock"})
	require.NoError(t, err)
	require.Len(t, list.GetReplays(), 2)
	require.Equal(t, id, list.GetReplays()[0].GetId(), "newest first")
	c, err := b.client.CancelReplay(asAdmin(t), &adminv1.CancelReplayRequest{Service: "stock", Id: id})
	require.NoError(t, err)
	require.Equal(t, adminv1.ReplayState_REPLAY_STATE_CANCELLED, c.GetReplay().GetState())
	calls := b.backend.CallsTo("CancelReplay")
	require.Len(t, calls, 1)
	require.Equal(t, "ops", calls[0].Actor, fmt.Sprint(calls))
}
