package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/failure"
)

// parseUUID parses s, uuid.Nil for "".
func parseUUID(t *testing.T, s string) uuid.UUID {
	t.Helper()
	if s == "" {
		return uuid.Nil
	}
	id, err := uuid.Parse(s)
	require.NoError(t, err)
	return id
}

// timeOf is ts as a time, zero for unset.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// failedEventFromProto reads every field of a FailedEvent back, for the
// round-trip checks.
func failedEventFromProto(t *testing.T, pb *adminv1.FailedEvent, edits []*adminv1.FailedEventEdit) admin.FailedEvent {
	t.Helper()
	out := admin.FailedEvent{Service: pb.GetService(), Failure: failure.Failure{
		ID: parseUUID(t, pb.GetId()), Pool: pb.GetPool(), EventID: parseUUID(t, pb.GetEventId()), EventName: pb.GetEventName(),
		RoutingKey: pb.GetRoutingKey(), Headers: pb.GetHeaders().AsMap(), Body: pb.GetBody(), Reason: pb.GetReason(),
		Error: pb.GetError(), Fingerprint: pb.GetFingerprint(), Handler: pb.GetHandler(), Attempt: int(pb.GetAttempt()),
		FirstFailedAt: timeOf(pb.GetFirstFailedAt()), FailedAt: timeOf(pb.GetFailedAt()), Copies: int(pb.GetCopies()),
		SequenceKey: pb.GetSequenceKey(), State: pb.GetState(), ResolvedAt: timeOf(pb.GetResolvedAt()),
		ResolvedBy: pb.GetResolvedBy(), EditedBody: pb.GetEditedBody(), EditedAt: timeOf(pb.GetEditedAt()),
		EditedBy: pb.GetEditedBy(), RetryID: parseUUID(t, pb.GetRetryId()), UpdatedAt: timeOf(pb.GetUpdatedAt()),
	}}
	for _, e := range edits {
		out.Edits = append(out.Edits, failure.Edit{EditedAt: timeOf(e.GetEditedAt()), EditedBy: e.GetEditedBy(), Reason: e.GetReason(), Diff: []byte(e.GetDiff())})
	}
	return out
}

// apiEdits keeps of edits what the API carries.
func apiEdits(edits []failure.Edit) []failure.Edit {
	var out []failure.Edit
	for _, e := range edits {
		out = append(out, failure.Edit{EditedAt: e.EditedAt, EditedBy: e.EditedBy, Reason: e.Reason, Diff: e.Diff})
	}
	return out
}

// requireEveryField checks that m has every one of its fields set: a
// conversion that forgot one leaves it at its zero value.
func requireEveryField(t *testing.T, m proto.Message) {
	t.Helper()
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		require.True(t, r.Has(fd), "%s.%s is not set", r.Descriptor().Name(), fd.Name())
	}
}

func TestGetFailedEventEveryColumn(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	id := admintest.FailureUnknownProductID

	// Discarded, its resolved_at and resolved_by are set too: every column
	// of the row holds a value.
	d, err := b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{
		Filter: &adminv1.FailureFilter{Service: "stock", Ids: []string{id.String()}}, Reason: "obsolete",
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), d.GetDiscarded())

	resp, err := b.client.GetFailedEvent(asReader(t), &adminv1.GetFailedEventRequest{Id: id.String()})
	require.NoError(t, err)
	requireEveryField(t, resp.GetFailure())
	require.Len(t, resp.GetEdits(), 1)
	requireEveryField(t, resp.GetEdits()[0])

	want, err := b.backend.GetFailedEvent(t.Context(), id)
	require.NoError(t, err)
	want.Edits = apiEdits(want.Edits)
	require.Equal(t, want, failedEventFromProto(t, resp.GetFailure(), resp.GetEdits()))
	require.Equal(t, failure.StateDiscarded, resp.GetFailure().GetState())
	require.Equal(t, "ops", resp.GetFailure().GetResolvedBy())
	require.JSONEq(t, `[{"op":"replace","path":"/payload/product","value":"p-11"}]`, resp.GetEdits()[0].GetDiff())

	t.Run("Undecodable", func(t *testing.T) {
		t.Parallel()
		resp, err := b.client.GetFailedEvent(asReader(t), &adminv1.GetFailedEventRequest{Id: admintest.FailureDecodeID.String()})
		require.NoError(t, err)
		require.Empty(t, resp.GetFailure().GetEventId(), "no event id: empty, not the nil UUID")
		require.Empty(t, resp.GetFailure().GetRetryId())
		require.Nil(t, resp.GetFailure().GetEditedAt())
		require.Nil(t, resp.GetFailure().GetResolvedAt())
		require.Equal(t, []byte("{not json"), resp.GetFailure().GetBody())
		require.Empty(t, resp.GetEdits())
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		_, err := b.client.GetFailedEvent(asReader(t), &adminv1.GetFailedEventRequest{Id: uuid.NewString()})
		st := requireCode(t, err, codes.NotFound)
		require.Contains(t, st.Message(), "failure: not found")
	})
}

func TestListFailedEvents(t *testing.T) {
	t.Parallel()

	t.Run("FilterAndPages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		from, to := admintest.Now.Add(-4*time.Hour), admintest.Now
		ids := []string{admintest.FailureUnknownProductID.String(), admintest.FailureUnknownProduct2ID.String()}
		filter := &adminv1.FailureFilter{
			Service: "stock", Pool: "stock-events", Reason: "retries_exhausted", Handler: "stock.reserve",
			EventName: "order.order.placed.v1", Fingerprint: admintest.FingerprintUnknownProduct,
			From: timestamppb.New(from), To: timestamppb.New(to), State: failure.StateFailed, Text: "UNKNOWN", Ids: ids,
		}
		page1, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: filter, Limit: 1})
		require.NoError(t, err)
		require.Len(t, page1.GetFailures(), 1)
		require.Equal(t, admintest.FailureUnknownProduct2ID.String(), page1.GetFailures()[0].GetId(), "newest first")
		require.Equal(t, "stock", page1.GetFailures()[0].GetService())
		require.NotEmpty(t, page1.GetNextPageToken())

		page2, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{
			Filter: filter, Limit: 1, PageToken: page1.GetNextPageToken(),
		})
		require.NoError(t, err)
		require.Len(t, page2.GetFailures(), 1)
		require.Equal(t, admintest.FailureUnknownProductID.String(), page2.GetFailures()[0].GetId())
		require.Empty(t, page2.GetNextPageToken(), "the last page")

		calls := b.backend.CallsTo("ListFailedEvents")
		require.Len(t, calls, 2)
		require.Equal(t, admintest.Call{
			Method: "ListFailedEvents", Service: "stock", Pool: "stock-events", Limit: 1,
			Filter: failure.Filter{
				Pool: "stock-events", Reason: "retries_exhausted", Handler: "stock.reserve", EventName: "order.order.placed.v1",
				Fingerprint: admintest.FingerprintUnknownProduct, State: failure.StateFailed, From: from, To: to, Text: "UNKNOWN",
				IDs: []uuid.UUID{admintest.FailureUnknownProductID, admintest.FailureUnknownProduct2ID},
			},
		}, calls[0])
		require.Equal(t, page1.GetNextPageToken(), calls[1].PageToken)
	})

	t.Run("PoolAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: &adminv1.FailureFilter{Pool: "stock-events"}})
		require.NoError(t, err)
		require.Len(t, resp.GetFailures(), 3)
		require.Empty(t, resp.GetNextPageToken())
		c := b.backend.CallsTo("ListFailedEvents")[0]
		require.Empty(t, c.Service, "the backend resolves the pool's service")
		require.Equal(t, admin.ListLimitDefault, c.Limit)
	})

	t.Run("UnknownPool", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: &adminv1.FailureFilter{Pool: "nope"}})
		requireCode(t, err, codes.NotFound)
	})

	t.Run("BadPageToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{
			Filter: &adminv1.FailureFilter{Service: "stock"}, PageToken: "garbage",
		})
		st := requireCode(t, err, codes.InvalidArgument)
		require.Contains(t, st.Message(), "page_token")
	})
}

func TestListFailureGroups(t *testing.T) {
	t.Parallel()

	t.Run("DefaultKeys", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{Service: "stock", State: failure.StateFailed})
		require.NoError(t, err)
		require.Len(t, resp.GetGroups(), 2)
		g := resp.GetGroups()[0]
		require.Equal(t, map[string]string{"reason": "retries_exhausted", "fingerprint": admintest.FingerprintUnknownProduct}, g.GetKey())
		require.Equal(t, int64(2), g.GetCount())
		require.Equal(t, admintest.Now.Add(-3*time.Hour), g.GetFirstFailedAt().AsTime())
		require.Equal(t, admintest.Now.Add(-2*time.Hour), g.GetLastFailedAt().AsTime())
		require.Equal(t, admintest.FailureUnknownProduct2ID.String(), g.GetExampleId())
		requireEveryField(t, g)
		require.Equal(t, map[string]string{"reason": "decode", "fingerprint": "envelope: invalid character '?' at offset ?"},
			resp.GetGroups()[1].GetKey())

		c := b.backend.CallsTo("ListFailureGroups")[0]
		require.Equal(t, []string{"reason", "fingerprint"}, c.GroupBy)
		require.Equal(t, failure.Filter{State: failure.StateFailed}, c.Filter)
	})

	t.Run("ByPoolInRange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		from := admintest.Now.Add(-150 * time.Minute)
		resp, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{
			Pool: "stock-events", From: timestamppb.New(from), GroupBy: []string{"pool", "handler"},
		})
		require.NoError(t, err)
		require.Len(t, resp.GetGroups(), 2)
		c := b.backend.CallsTo("ListFailureGroups")[0]
		require.Equal(t, []string{"pool", "handler"}, c.GroupBy)
		require.Equal(t, failure.Filter{Pool: "stock-events", From: from}, c.Filter)
		require.Empty(t, c.Service)
	})
}

func TestFailureRetries(t *testing.T) {
	t.Parallel()

	t.Run("DryRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{
			Filter: &adminv1.FailureFilter{Service: "stock"}, DryRun: true,
		})
		require.NoError(t, err)
		r := resp.GetRetry()
		require.Equal(t, adminv1.FailureRetryState_FAILURE_RETRY_STATE_UNSPECIFIED, r.GetState())
		require.Empty(t, r.GetId())
		require.Equal(t, int64(3), r.GetSelected())
		require.Equal(t, int32(failure.RetryRateDefault), r.GetRate(), "rate 0 means the default")
		c := b.backend.CallsTo("RetryFailedEvents")[0]
		require.Equal(t, failure.RetryRequest{Filter: failure.Filter{}, Rate: failure.RetryRateDefault, DryRun: true}, c.Retry)
		require.Equal(t, "ops", c.Actor)
	})

	t.Run("CanaryThenCancel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{
			Filter: &adminv1.FailureFilter{Pool: "stock-events", Reason: "retries_exhausted"}, Canary: 1, Rate: 10,
			OverrideBeyondHorizon: true,
		})
		require.NoError(t, err)
		r := resp.GetRetry()
		require.Equal(t, adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANARY, r.GetState())
		require.Equal(t, int64(2), r.GetSelected())
		require.Equal(t, "stock", r.GetService())
		require.Equal(t, "ops", r.GetCreatedBy())
		require.Equal(t, int32(1), r.GetCanary())
		require.Equal(t, int32(10), r.GetRate())
		require.True(t, r.GetOverrideBeyondHorizon())
		require.Equal(t, "stock-events", r.GetFilter().GetPool())
		require.Equal(t, "retries_exhausted", r.GetFilter().GetReason())

		got, err := b.client.GetFailureRetry(asReader(t), &adminv1.GetFailureRetryRequest{Id: r.GetId()})
		require.NoError(t, err)
		require.True(t, proto.Equal(r, got.GetRetry()), "GetFailureRetry answers what RetryFailedEvents did")

		list, err := b.client.ListFailureRetries(asReader(t), &adminv1.ListFailureRetriesRequest{Service: "stock", Limit: 2})
		require.NoError(t, err)
		require.Len(t, list.GetRetries(), 2)
		require.Equal(t, r.GetId(), list.GetRetries()[0].GetId(), "newest first")

		cancelled, err := b.client.CancelFailureRetry(asAdmin(t), &adminv1.CancelFailureRetryRequest{Service: "stock", Id: r.GetId()})
		require.NoError(t, err)
		require.Equal(t, adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANCELLED, cancelled.GetRetry().GetState())
		require.Equal(t, "ops", cancelled.GetRetry().GetCancelledBy())
		require.NotNil(t, cancelled.GetRetry().GetFinishedAt())

		_, err = b.client.CancelFailureRetry(asAdmin(t), &adminv1.CancelFailureRetryRequest{Id: r.GetId()})
		st := requireCode(t, err, codes.FailedPrecondition)
		require.Contains(t, st.Message(), "is cancelled")

		// Nothing failed is left in the pool's unknown-product group.
		_, err = b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{
			Filter: &adminv1.FailureFilter{Pool: "stock-events", Reason: "retries_exhausted"},
		})
		requireCode(t, err, codes.FailedPrecondition)
	})

	t.Run("EveryField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		cancelled, err := b.client.CancelFailureRetry(asAdmin(t), &adminv1.CancelFailureRetryRequest{Id: admintest.FailureRunningRetryID.String()})
		require.NoError(t, err)
		r := cancelled.GetRetry()
		// error and failed_again alone are zero in the fixture's running
		// retry; each is checked on its own below.
		r.Error, r.FailedAgain = "x", 1
		requireEveryField(t, r)
		require.Equal(t, int64(4), r.GetSelected())
		require.Equal(t, int64(2), r.GetSent())
		require.Equal(t, int64(1), r.GetResolved())

		done, err := b.client.GetFailureRetry(asReader(t), &adminv1.GetFailureRetryRequest{Service: "stock", Id: admintest.FailureRetryID.String()})
		require.NoError(t, err)
		require.Equal(t, adminv1.FailureRetryState_FAILURE_RETRY_STATE_DONE, done.GetRetry().GetState())
		require.Equal(t, int64(1), done.GetRetry().GetFailedAgain())
		require.Equal(t, "1 copy failed again", done.GetRetry().GetError())
		require.Equal(t, []string{admintest.FailureUnknownProductID.String()}, done.GetRetry().GetFilter().GetIds())
	})

	t.Run("UnknownRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.GetFailureRetry(asReader(t), &adminv1.GetFailureRetryRequest{Id: uuid.NewString()})
		requireCode(t, err, codes.NotFound)
		_, err = b.client.ListFailureRetries(asReader(t), &adminv1.ListFailureRetriesRequest{Service: "nope"})
		requireCode(t, err, codes.NotFound)
	})
}

func TestDiscardFailedEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp, err := b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{
		Filter: &adminv1.FailureFilter{Pool: "stock-events", Reason: "decode"}, Reason: "garbage in",
		Parked: adminv1.DiscardParked_DISCARD_PARKED_RELEASE,
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), resp.GetDiscarded())
	c := b.backend.CallsTo("DiscardFailedEvents")[0]
	require.Equal(t, failure.ParkedRelease, c.Parked)
	require.Equal(t, "garbage in", c.Reason)
	require.Equal(t, "ops", c.Actor)
	require.Equal(t, failure.Filter{Pool: "stock-events", Reason: "decode"}, c.Filter)

	_, err = b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{
		Filter: &adminv1.FailureFilter{Service: "stock"}, Parked: adminv1.DiscardParked_DISCARD_PARKED_DISCARD,
	})
	require.NoError(t, err)
	require.Equal(t, failure.ParkedDiscard, b.backend.CallsTo("DiscardFailedEvents")[1].Parked)
}

func TestEditFailedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	payload := `{"id":"` + admintest.FailureEventID.String() + `","payload":{"product":"p-12"}}`
	resp, err := b.client.EditFailedEvent(asAdmin(t), &adminv1.EditFailedEventRequest{
		Id: admintest.FailureUnknownProductID.String(), Payload: payload, Reason: "second try",
	})
	require.NoError(t, err)
	require.Equal(t, []byte(payload), resp.GetFailure().GetEditedBody())
	require.Contains(t, string(resp.GetFailure().GetBody()), `"p-1"`, "the original body is kept")
	require.Equal(t, "ops", resp.GetFailure().GetEditedBy())
	require.Len(t, resp.GetEdits(), 2)
	require.Equal(t, "second try", resp.GetEdits()[1].GetReason())

	c := b.backend.CallsTo("EditFailedEvent")[0]
	require.Equal(t, []byte(payload), c.Payload)
	require.Equal(t, admintest.FailureUnknownProductID, c.ID)

	_, err = b.client.EditFailedEvent(asAdmin(t), &adminv1.EditFailedEventRequest{Id: uuid.NewString(), Payload: "{}"})
	requireCode(t, err, codes.NotFound)
}

// TestFailureValidation checks that each bad request is refused with
// InvalidArgument naming its field, before the backend sees it.
func TestFailureValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	stock := func(ids ...string) *adminv1.FailureFilter { return &adminv1.FailureFilter{Service: "stock", Ids: ids} }
	good := admintest.FailureDecodeID.String()
	now := timestamppb.New(admintest.Now)

	for name, tc := range map[string]struct {
		call func(t *testing.T) error
		want string
	}{
		"ListNoService": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{})
			return err
		}, "filter.service: required unless filter.pool is set"},
		"ListBadID": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: stock(good, good, "nope")})
			return err
		}, "filter.ids[2]"},
		"ListNilID": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: stock(uuid.Nil.String())})
			return err
		}, "filter.ids[0] must not be the nil UUID"},
		"ListBadState": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Pool: "stock-events", State: "broken"},
			})
			return err
		}, `filter.state "broken"`},
		"ListBadRange": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Service: "stock", From: now, To: now},
			})
			return err
		}, "filter.from"},
		"ListNULText": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Service: "stock", Text: "a\x00b"},
			})
			return err
		}, "filter.text holds a NUL byte"},
		"ListLimit": {func(t *testing.T) error {
			_, err := b.client.ListFailedEvents(asReader(t), &adminv1.ListFailedEventsRequest{Filter: stock(), Limit: admin.ListLimitMax + 1})
			return err
		}, "limit 10001 out of range"},
		"GroupsNoService": {func(t *testing.T) error {
			_, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{})
			return err
		}, "service: required unless pool is set"},
		"GroupsBadKey": {func(t *testing.T) error {
			_, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{Service: "stock", GroupBy: []string{"reason", "colour"}})
			return err
		}, `group_by[1] "colour"`},
		"GroupsKeyTwice": {func(t *testing.T) error {
			_, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{Service: "stock", GroupBy: []string{"pool", "pool"}})
			return err
		}, `group_by[1] "pool" is named twice`},
		"GroupsBadState": {func(t *testing.T) error {
			_, err := b.client.ListFailureGroups(asReader(t), &adminv1.ListFailureGroupsRequest{Service: "stock", State: "FAILED"})
			return err
		}, `state "FAILED"`},
		"GetBadID": {func(t *testing.T) error {
			_, err := b.client.GetFailedEvent(asReader(t), &adminv1.GetFailedEventRequest{Id: "{" + good + "}"})
			return err
		}, "id "},
		"RetryNoFilter": {func(t *testing.T) error {
			_, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{DryRun: true})
			return err
		}, "filter.service: required unless filter.pool is set"},
		"RetryBadID": {func(t *testing.T) error {
			_, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{Filter: stock("x")})
			return err
		}, "filter.ids[0]"},
		"RetryCanary": {func(t *testing.T) error {
			_, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{Filter: stock(), Canary: -1})
			return err
		}, "canary"},
		"RetryRate": {func(t *testing.T) error {
			_, err := b.client.RetryFailedEvents(asAdmin(t), &adminv1.RetryFailedEventsRequest{Filter: stock(), Rate: admin.FailureRetryRateMax + 1})
			return err
		}, "rate"},
		"GetRetryBadID": {func(t *testing.T) error {
			_, err := b.client.GetFailureRetry(asReader(t), &adminv1.GetFailureRetryRequest{Id: "7"})
			return err
		}, `id "7"`},
		"ListRetriesLimit": {func(t *testing.T) error {
			_, err := b.client.ListFailureRetries(asReader(t), &adminv1.ListFailureRetriesRequest{Limit: -1})
			return err
		}, "limit -1"},
		"CancelBadID": {func(t *testing.T) error {
			_, err := b.client.CancelFailureRetry(asAdmin(t), &adminv1.CancelFailureRetryRequest{Service: "stock"})
			return err
		}, `id ""`},
		"DiscardNoFilter": {func(t *testing.T) error {
			_, err := b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{Reason: "x"})
			return err
		}, "filter.service: required unless filter.pool is set"},
		"DiscardParked": {func(t *testing.T) error {
			_, err := b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{Filter: stock(), Parked: 7})
			return err
		}, "parked 7"},
		"DiscardReason": {func(t *testing.T) error {
			_, err := b.client.DiscardFailedEvents(asAdmin(t), &adminv1.DiscardFailedEventsRequest{
				Filter: stock(), Reason: strings.Repeat("x", admin.MaxReasonBytes+1),
			})
			return err
		}, "reason"},
		"EditNotJSON": {func(t *testing.T) error {
			_, err := b.client.EditFailedEvent(asAdmin(t), &adminv1.EditFailedEventRequest{Id: good, Payload: `{"a":`})
			return err
		}, "payload: not JSON"},
		"EditBadID": {func(t *testing.T) error {
			_, err := b.client.EditFailedEvent(asAdmin(t), &adminv1.EditFailedEventRequest{Id: "nope", Payload: "{}"})
			return err
		}, `id "nope"`},
	} {
		t.Run(name, func(t *testing.T) {
			st := requireCode(t, tc.call(t), codes.InvalidArgument)
			require.Contains(t, st.Message(), tc.want)
		})
	}
	require.Empty(t, b.backend.Calls(), "no bad request reached the backend")
}
