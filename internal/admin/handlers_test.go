package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/failure"
)

func TestListServices(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	resp, err := b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetServices(), 2)

	shipping, stock := resp.GetServices()[0], resp.GetServices()[1]
	require.Equal(t, "shipping", shipping.GetName())
	require.Nil(t, shipping.GetLastPurge(), "never purged: last_purge unset")
	require.Equal(t, "stock", stock.GetName())
	require.Equal(t, 336*time.Hour, stock.GetHorizon().AsDuration())
	require.Equal(t, 24*time.Hour, stock.GetMinHorizon().AsDuration())
	require.Equal(t, admintest.Now.Add(-time.Hour), stock.GetLastPurge().AsTime())
	require.Equal(t, "fail", stock.GetBeyondHorizon())
}

func TestListPools(t *testing.T) {
	t.Parallel()

	t.Run("All", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.ListPools(asReader(t), &adminv1.ListPoolsRequest{})
		require.NoError(t, err)
		require.Len(t, resp.GetPools(), 2)

		shipping := resp.GetPools()[0]
		require.Equal(t, adminv1.PoolState_POOL_STATE_PAUSED, shipping.GetState())
		require.Equal(t, "maintenance", shipping.GetPausedReason())

		stock := resp.GetPools()[1]
		require.Equal(t, "stock-events", stock.GetName())
		require.Equal(t, "stock", stock.GetService())
		require.Equal(t, "stock.events", stock.GetQueue())
		require.Equal(t, adminv1.PoolState_POOL_STATE_RUNNING, stock.GetState())
		require.Empty(t, stock.GetPausedReason())
		require.Equal(t, int32(4), stock.GetConcurrency())
		require.Equal(t, int32(3), stock.GetInFlight())
		require.Equal(t, uint64(1200), stock.GetProcessed())
		require.Equal(t, uint64(12), stock.GetDuplicates())
		require.Equal(t, uint64(5), stock.GetRetried())
		require.Equal(t, uint64(1), stock.GetFailed())

		require.Equal(t, []admintest.Call{{Method: "ListPools"}}, b.backend.Calls())
	})

	t.Run("OneService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.ListPools(asReader(t), &adminv1.ListPoolsRequest{Service: "stock"})
		require.NoError(t, err)
		require.Len(t, resp.GetPools(), 1)
		require.Equal(t, "stock-events", resp.GetPools()[0].GetName())
	})

	t.Run("UnknownService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.ListPools(asReader(t), &adminv1.ListPoolsRequest{Service: "billing"})
		st := requireCode(t, err, codes.NotFound)
		require.Contains(t, st.Message(), `service "billing"`)
	})

}

func TestPausePool(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: "db migration"})
		require.NoError(t, err)
		require.Equal(t, "stock-events", resp.GetPool().GetName())
		require.Equal(t, adminv1.PoolState_POOL_STATE_PAUSED, resp.GetPool().GetState())
		require.Equal(t, "db migration", resp.GetPool().GetPausedReason())
		require.Equal(t, []admintest.Call{{Method: "PausePool", Pool: "stock-events", Reason: "db migration", Actor: "ops"}}, b.backend.Calls())

		// Idempotent: pausing again returns the paused pool.
		resp, err = b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events"})
		require.NoError(t, err)
		require.Equal(t, adminv1.PoolState_POOL_STATE_PAUSED, resp.GetPool().GetState())
	})

	t.Run("ReasonLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: strings.Repeat("r", admin.MaxReasonBytes)})
		require.NoError(t, err)
		_, err = b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: strings.Repeat("r", admin.MaxReasonBytes+1)})
		requireCode(t, err, codes.InvalidArgument)
		// PostgreSQL's text takes no NUL: a bad request, not the
		// database's error as Unavailable.
		_, err = b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: "a\x00b"})
		requireCode(t, err, codes.InvalidArgument)
		require.Len(t, b.backend.Calls(), 1)
	})

	t.Run("MissingPool", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{})
		requireCode(t, err, codes.InvalidArgument)
		require.Empty(t, b.backend.Calls())
	})

	t.Run("UnknownPool", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "nope"})
		requireCode(t, err, codes.NotFound)
	})
}

func TestResumePool(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	resp, err := b.client.ResumePool(asAdmin(t), &adminv1.ResumePoolRequest{Pool: "shipping-events"})
	require.NoError(t, err)
	require.Equal(t, adminv1.PoolState_POOL_STATE_RUNNING, resp.GetPool().GetState())
	require.Empty(t, resp.GetPool().GetPausedReason())
	require.Equal(t, []admintest.Call{{Method: "ResumePool", Pool: "shipping-events", Actor: "ops"}}, b.backend.Calls())

	_, err = b.client.ResumePool(asAdmin(t), &adminv1.ResumePoolRequest{})
	requireCode(t, err, codes.InvalidArgument)
	_, err = b.client.ResumePool(asAdmin(t), &adminv1.ResumePoolRequest{Pool: "nope"})
	requireCode(t, err, codes.NotFound)
}

func TestLookupEvent(t *testing.T) {
	t.Parallel()

	t.Run("OneService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.LookupEvent(asReader(t), &adminv1.LookupEventRequest{EventId: admintest.StockEventID.String(), Service: "stock"})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), 1)
		r := resp.GetResults()[0]
		require.Equal(t, "stock", r.GetService())
		require.True(t, r.GetProcessed())
		require.Equal(t, admintest.Now.Add(-2*time.Hour), r.GetProcessedAt().AsTime())
		require.Equal(t, admintest.Now.Add(-2*time.Hour+336*time.Hour), r.GetPurgeableAt().AsTime())
		require.Equal(t, []admintest.Call{{Method: "LookupEvent", ID: admintest.StockEventID, Service: "stock"}}, b.backend.Calls())
	})

	t.Run("AllServices", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		// Upper case is the same UUID in canonical form.
		resp, err := b.client.LookupEvent(asReader(t), &adminv1.LookupEventRequest{EventId: strings.ToUpper(admintest.StockEventID.String())})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), 2)
		shipping := resp.GetResults()[0]
		require.Equal(t, "shipping", shipping.GetService())
		require.False(t, shipping.GetProcessed())
		require.Nil(t, shipping.GetProcessedAt())
		require.Nil(t, shipping.GetPurgeableAt())
		require.True(t, resp.GetResults()[1].GetProcessed())
	})

	t.Run("UnknownService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.LookupEvent(asReader(t), &adminv1.LookupEventRequest{EventId: admintest.StockEventID.String(), Service: "billing"})
		requireCode(t, err, codes.NotFound)
	})

	t.Run("BadUUID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := admintest.StockEventID.String()
		for name, bad := range map[string]string{
			"Empty":       "",
			"Garbage":     "not-a-uuid",
			"Braces":      "{" + id + "}",
			"URN":         "urn:uuid:" + id,
			"NoHyphens":   strings.ReplaceAll(id, "-", ""),
			"Nil":         uuid.Nil.String(),
			"Truncated":   id[:35],
			"Longer":      id + "0",
			"MovedHyphen": id[:7] + "-" + id[7:8] + id[9:],
			"NonHex":      "g" + id[1:],
			"Spaces":      " " + id[1:],
		} {
			t.Run(name, func(t *testing.T) {
				_, err := b.client.LookupEvent(asReader(t), &adminv1.LookupEventRequest{EventId: bad})
				st := requireCode(t, err, codes.InvalidArgument)
				require.Contains(t, st.Message(), "event_id")
			})
		}
		require.Empty(t, b.backend.Calls(), "invalid ids never reach the backend")
	})
}

func TestGetHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	resp, err := b.client.GetHorizon(asReader(t), &adminv1.GetHorizonRequest{Service: "stock"})
	require.NoError(t, err)
	h := resp.GetHorizon()
	require.Equal(t, "stock", h.GetService())
	require.Equal(t, 336*time.Hour, h.GetHorizon().AsDuration())
	require.Equal(t, 24*time.Hour, h.GetMinHorizon().AsDuration())
	require.Nil(t, h.GetUpdatedAt())
	require.Empty(t, h.GetUpdatedBy())

	_, err = b.client.GetHorizon(asReader(t), &adminv1.GetHorizonRequest{})
	requireCode(t, err, codes.InvalidArgument)
	_, err = b.client.GetHorizon(asReader(t), &adminv1.GetHorizonRequest{Service: "billing"})
	requireCode(t, err, codes.NotFound)
}

func TestSetHorizon(t *testing.T) {
	t.Parallel()

	t.Run("Success", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.SetHorizon(asAdmin(t), &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(48 * time.Hour)})
		require.NoError(t, err)
		h := resp.GetHorizon()
		require.Equal(t, "stock", h.GetService())
		require.Equal(t, 48*time.Hour, h.GetHorizon().AsDuration())
		require.Equal(t, 24*time.Hour, h.GetMinHorizon().AsDuration())
		require.Equal(t, admintest.Now, h.GetUpdatedAt().AsTime())
		require.Equal(t, "ops", h.GetUpdatedBy())
		require.Equal(t, []admintest.Call{{Method: "SetHorizon", Service: "stock", Horizon: 48 * time.Hour, Actor: "ops"}}, b.backend.Calls())
	})

	t.Run("BelowMin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.SetHorizon(asAdmin(t), &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(time.Hour)})
		st := requireCode(t, err, codes.FailedPrecondition)
		require.Contains(t, st.Message(), "min_horizon")

		resp, err := b.client.SetHorizon(asAdmin(t), &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(time.Hour), Force: true})
		require.NoError(t, err)
		require.Equal(t, time.Hour, resp.GetHorizon().GetHorizon().AsDuration())
		require.True(t, b.backend.CallsTo("SetHorizon")[1].Force)
	})

	t.Run("BadArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		for name, req := range map[string]*adminv1.SetHorizonRequest{
			"NoService":    {Horizon: durationpb.New(time.Hour)},
			"NoHorizon":    {Service: "stock"},
			"Zero":         {Service: "stock", Horizon: durationpb.New(0)},
			"Negative":     {Service: "stock", Horizon: durationpb.New(-time.Hour)},
			"BadNanos":     {Service: "stock", Horizon: &durationpb.Duration{Seconds: 1, Nanos: 2_000_000_000}},
			"MixedSigns":   {Service: "stock", Horizon: &durationpb.Duration{Seconds: 1, Nanos: -1}},
			"OutOfRange":   {Service: "stock", Horizon: &durationpb.Duration{Seconds: 400_000_000_000}},
			"TooLongForGo": {Service: "stock", Horizon: &durationpb.Duration{Seconds: 10_000_000_000}},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := b.client.SetHorizon(asAdmin(t), req)
				requireCode(t, err, codes.InvalidArgument)
			})
		}
		require.Empty(t, b.backend.Calls())
	})
}

func TestRunPurge(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	resp, err := b.client.RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{Service: "stock", DryRun: true})
	require.NoError(t, err)
	run := resp.GetRun()
	require.Equal(t, "stock", run.GetService())
	require.True(t, run.GetDryRun())
	require.Equal(t, int64(1), run.GetDeleted())
	require.Equal(t, admintest.Now.Add(-336*time.Hour), run.GetCutoff().AsTime())
	require.Equal(t, admintest.Now, run.GetStartedAt().AsTime())
	require.Equal(t, admintest.Now.Add(time.Second), run.GetFinishedAt().AsTime())
	require.Equal(t, "admin", run.GetTrigger())
	require.Empty(t, run.GetError())
	require.Equal(t, []admintest.Call{{Method: "RunPurge", Service: "stock", DryRun: true, Actor: "ops"}}, b.backend.Calls())

	_, err = b.client.RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{})
	requireCode(t, err, codes.InvalidArgument)
	_, err = b.client.RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{Service: "billing"})
	requireCode(t, err, codes.NotFound)
}

func TestListPurgeRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	_, err := b.client.RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{Service: "stock"})
	require.NoError(t, err)

	resp, err := b.client.ListPurgeRuns(asReader(t), &adminv1.ListPurgeRunsRequest{Service: "stock"})
	require.NoError(t, err)
	require.Len(t, resp.GetRuns(), 2)
	require.Equal(t, "admin", resp.GetRuns()[0].GetTrigger(), "newest first")
	old := resp.GetRuns()[1]
	require.Equal(t, "schedule", old.GetTrigger())
	require.Equal(t, int64(42), old.GetDeleted())
	require.False(t, old.GetDryRun())
	require.Equal(t, 100, b.backend.CallsTo("ListPurgeRuns")[0].Limit, "limit 0 means the default")

	resp, err = b.client.ListPurgeRuns(asReader(t), &adminv1.ListPurgeRunsRequest{Service: "stock", Limit: 1})
	require.NoError(t, err)
	require.Len(t, resp.GetRuns(), 1)

	_, err = b.client.ListPurgeRuns(asReader(t), &adminv1.ListPurgeRunsRequest{Service: "stock", Limit: admin.ListLimitMax})
	require.NoError(t, err)
	require.Equal(t, admin.ListLimitMax, b.backend.CallsTo("ListPurgeRuns")[2].Limit)

	for _, req := range []*adminv1.ListPurgeRunsRequest{
		{},
		{Service: "stock", Limit: -1},
		{Service: "stock", Limit: admin.ListLimitMax + 1},
	} {
		_, err = b.client.ListPurgeRuns(asReader(t), req)
		requireCode(t, err, codes.InvalidArgument)
	}
	require.Len(t, b.backend.CallsTo("ListPurgeRuns"), 3)

	_, err = b.client.ListPurgeRuns(asReader(t), &adminv1.ListPurgeRunsRequest{Service: "billing"})
	requireCode(t, err, codes.NotFound)
}

func TestListFailedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	resp, err := b.client.ListFailedMessages(asReader(t), &adminv1.ListFailedMessagesRequest{Pool: "stock-events", Limit: 5})
	require.NoError(t, err)
	require.Len(t, resp.GetMessages(), 1)
	m := resp.GetMessages()[0]
	require.Equal(t, admintest.FailedEventID.String(), m.GetEventId())
	require.Equal(t, "order.order.placed.v1", m.GetEventName())
	require.Equal(t, "permanent", m.GetFailureReason())
	require.Equal(t, "stock.reserve: unknown product", m.GetError())
	require.Equal(t, int32(1), m.GetAttempt())
	require.Equal(t, admintest.Now.Add(-30*time.Minute), m.GetFailedAt().AsTime())
	require.Equal(t, "stock-events", m.GetPool())
	require.Equal(t, "order.order.placed.v1", m.GetOriginalRoutingKey())
	require.Equal(t, []admintest.Call{{Method: "ListFailedMessages", Pool: "stock-events", Limit: 5}}, b.backend.Calls())

	for _, req := range []*adminv1.ListFailedMessagesRequest{
		{},
		{Pool: "stock-events", Limit: -5},
		{Pool: "stock-events", Limit: 10001},
	} {
		_, err = b.client.ListFailedMessages(asReader(t), req)
		requireCode(t, err, codes.InvalidArgument)
	}
	_, err = b.client.ListFailedMessages(asReader(t), &adminv1.ListFailedMessagesRequest{Pool: "nope"})
	requireCode(t, err, codes.NotFound)
}

func TestRetryFailedMessages(t *testing.T) {
	t.Parallel()

	t.Run("ByID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		other := uuid.MustParse("11111111-2222-4333-8444-555555555555")
		resp, err := b.client.RetryFailedMessages(asAdmin(t), &adminv1.RetryFailedMessagesRequest{
			Pool: "stock-events", EventIds: []string{admintest.FailedEventID.String(), other.String()},
		})
		require.NoError(t, err)
		require.Equal(t, int32(1), resp.GetRetried())
		require.Equal(t, []admintest.Call{{
			Method: "RetryFailedMessages", Pool: "stock-events", IDs: []uuid.UUID{admintest.FailedEventID, other}, Actor: "ops",
		}}, b.backend.Calls())
	})

	t.Run("All", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.RetryFailedMessages(asAdmin(t), &adminv1.RetryFailedMessagesRequest{Pool: "stock-events", All: true})
		require.NoError(t, err)
		require.Equal(t, int32(1), resp.GetRetried())
		call := b.backend.CallsTo("RetryFailedMessages")[0]
		require.True(t, call.All)
		require.Empty(t, call.IDs)
	})

	t.Run("BadArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		id := admintest.FailedEventID.String()
		tooMany := make([]string, admin.ListLimitMax+1)
		for i := range tooMany {
			tooMany[i] = id
		}
		for name, req := range map[string]*adminv1.RetryFailedMessagesRequest{
			"NoPool":     {EventIds: []string{id}},
			"Neither":    {Pool: "stock-events"},
			"Both":       {Pool: "stock-events", EventIds: []string{id}, All: true},
			"BadID":      {Pool: "stock-events", EventIds: []string{id, "{" + id + "}"}},
			"NilID":      {Pool: "stock-events", EventIds: []string{uuid.Nil.String()}},
			"TooManyIDs": {Pool: "stock-events", EventIds: tooMany},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := b.client.RetryFailedMessages(asAdmin(t), req)
				requireCode(t, err, codes.InvalidArgument)
			})
		}
		require.Empty(t, b.backend.Calls())
	})

	t.Run("UnknownPool", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.RetryFailedMessages(asAdmin(t), &adminv1.RetryFailedMessagesRequest{Pool: "nope", All: true})
		requireCode(t, err, codes.NotFound)
	})
}

func TestBackendErrors(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		err     error
		code    codes.Code
		message string
	}{
		"NotFound":        {fmt.Errorf("pool %q: %w", "x", admin.ErrNotFound), codes.NotFound, `pool "x": not found`},
		"InvalidArgument": {fmt.Errorf("bad: %w", admin.ErrInvalidArgument), codes.InvalidArgument, "bad: invalid argument"},
		"BelowMin":        {fmt.Errorf("too short: %w", admin.ErrBelowMinHorizon), codes.FailedPrecondition, "too short: horizon below min_horizon"},
		"Unavailable":     {fmt.Errorf("database down: %w", admin.ErrUnavailable), codes.Unavailable, "database down: unavailable"},
		"DeadlineExceeded": {
			fmt.Errorf("query: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "context deadline exceeded",
		},
		"FailureNotFound": {
			fmt.Errorf("failure %s: %w", admintest.FailureDecodeID, failure.ErrNotFound), codes.NotFound,
			"failure " + admintest.FailureDecodeID.String() + ": failure: not found",
		},
		"FailureInvalid": {fmt.Errorf("filter.text: %w", failure.ErrInvalid), codes.InvalidArgument, "filter.text: failure: invalid"},
		"FailurePrecondition": {
			fmt.Errorf("retry is done: %w", failure.ErrPrecondition), codes.FailedPrecondition, "retry is done: failure: failed precondition",
		},
		"FailedPrecondition": {fmt.Errorf("no archive: %w", admin.ErrFailedPrecondition), codes.FailedPrecondition, "no archive: failed precondition"},
		"Unknown":            {errors.New("pq: password authentication failed for user secret-db-user"), codes.Internal, "internal error"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.backend.SetHook("ListServices", func(context.Context) error { return tc.err })
			_, err := b.client.ListServices(asReader(t), &adminv1.ListServicesRequest{})
			st := requireCode(t, err, tc.code)
			require.Equal(t, tc.message, st.Message())
		})
	}
}

func TestPoolStates(t *testing.T) {
	t.Parallel()
	for state, want := range map[string]adminv1.PoolState{
		admin.PoolStateRunning:    adminv1.PoolState_POOL_STATE_RUNNING,
		admin.PoolStatePaused:     adminv1.PoolState_POOL_STATE_PAUSED,
		admin.PoolStateConnecting: adminv1.PoolState_POOL_STATE_CONNECTING,
		admin.PoolStateStopped:    adminv1.PoolState_POOL_STATE_STOPPED,
		"bogus":                   adminv1.PoolState_POOL_STATE_UNSPECIFIED,
	} {
		server, err := admin.NewServer(admin.ServerConfig{}, stateBackend{state: state}, nil)
		require.NoError(t, err)
		resp, err := server.ListPools(context.Background(), &adminv1.ListPoolsRequest{})
		require.NoError(t, err)
		require.Equal(t, want, resp.GetPools()[0].GetState(), state)
		server.Stop()
	}
}

// stateBackend reports one pool in a given state.
type stateBackend struct {
	admin.Backend
	state string
}

func (b stateBackend) ListPools(context.Context, string) ([]admin.PoolInfo, error) {
	return []admin.PoolInfo{{Name: "p", State: b.state}}, nil
}
