package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin/admintest"
	"github.com/platformd/platformd/internal/failure"
)

func TestFailuresGroups(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "failures", "groups", "--service", "stock", "--state", "failed")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Len(t, rows, 3)
	require.Equal(t, []string{"COUNT", "FIRST_FAILED_AT", "LAST_FAILED_AT", "EXAMPLE_ID", "REASON", "FINGERPRINT"}, rows[0])
	require.Equal(t, []string{"2", "2026-01-02T00:04:05Z", "2026-01-02T01:04:05Z", admintest.FailureUnknownProduct2ID.String(),
		"retries_exhausted", "stock.reserve:", "unknown", "product", `"?"`}, rows[1])
	require.Equal(t, "decode", rows[2][4])

	// --group-by repeated and comma-separated; --from as a duration ago.
	before := time.Now()
	r = b.run(t, asReader, "failures", "groups", "--pool", "stock-events", "--group-by", "pool", "--group-by", "handler,event_name",
		"--from", "90m", "-o", "json")
	after := time.Now()
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ListFailureGroupsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Empty(t, resp.GetGroups(), "the fixture's failures are older than 90 minutes ago")
	c := b.backend.CallsTo("ListFailureGroups")[1]
	require.Equal(t, []string{"pool", "handler", "event_name"}, c.GroupBy)
	require.Equal(t, "stock-events", c.Filter.Pool)
	require.False(t, c.Filter.From.Before(before.Add(-90*time.Minute).Truncate(time.Microsecond)), c.Filter.From)
	require.False(t, c.Filter.From.After(after.Add(-90*time.Minute)), c.Filter.From)
}

func TestFailuresList(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "failures", "list", "--service", "stock", "--pool", "stock-events", "--reason", "retries_exhausted",
		"--handler", "stock.reserve", "--event-name", "order.order.placed.v1", "--fingerprint", admintest.FingerprintUnknownProduct,
		"--state", "failed", "--text", "p-", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-03T00:00:00Z",
		"--id", admintest.FailureUnknownProductID.String(), "--id", admintest.FailureUnknownProduct2ID.String(), "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Equal(t, []string{"ID", "SERVICE", "POOL", "STATE", "REASON", "EVENT_NAME", "ATTEMPT", "COPIES", "FAILED_AT", "ERROR"}, rows[0])
	require.Equal(t, []string{admintest.FailureUnknownProduct2ID.String(), "stock", "stock-events", "failed", "retries_exhausted",
		"order.order.placed.v1", "5", "1", "2026-01-02T01:04:05Z", "stock.reserve:", "unknown", "product", `"p-2"`}, rows[1])
	require.Equal(t, []string{}, rows[2])
	require.Equal(t, "NEXT_PAGE_TOKEN", rows[3][0])

	c := b.backend.CallsTo("ListFailedEvents")[0]
	require.Equal(t, failure.Filter{
		Pool: "stock-events", Reason: "retries_exhausted", Handler: "stock.reserve", EventName: "order.order.placed.v1",
		Fingerprint: admintest.FingerprintUnknownProduct, State: "failed", Text: "p-",
		From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2026, 1, 3, 0, 0, 0, 0, time.UTC),
		IDs: []uuid.UUID{admintest.FailureUnknownProductID, admintest.FailureUnknownProduct2ID},
	}, c.Filter)
	require.Equal(t, "stock", c.Service)
	require.Equal(t, 1, c.Limit)

	r = b.run(t, asReader, "failures", "list", "--pool", "stock-events", "--limit", "1", "--page-token", rows[3][1], "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.ListFailedEventsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Len(t, resp.GetFailures(), 1)
	// The token is the fake's offset: the second newest of the pool.
	require.Equal(t, admintest.FailureUnknownProduct2ID.String(), resp.GetFailures()[0].GetId())
	require.Equal(t, rows[3][1], b.backend.CallsTo("ListFailedEvents")[1].PageToken)

	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"NoService": {[]string{"failures", "list"}, 4, "filter.service: required unless filter.pool is set"},
		"BadID":     {[]string{"failures", "list", "--service", "stock", "--id", admintest.FailureDecodeID.String() + ",nope"}, 4, "filter.ids[1]"},
		"BadFrom":   {[]string{"failures", "list", "--service", "stock", "--from", "yesterday"}, 4, "--from \"yesterday\""},
		"NegAgo":    {[]string{"failures", "list", "--service", "stock", "--to", "-1h"}, 4, "--to"},
		"UnknownPl": {[]string{"failures", "list", "--pool", "nope"}, 3, "NotFound"},
		"ExtraArg":  {[]string{"failures", "list", "x"}, 2, "unknown command"},
	} {
		t.Run(name, func(t *testing.T) {
			r := b.run(t, asReader, tc.args...)
			require.Equal(t, tc.code, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}

func TestFailuresGet(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "failures", "get", admintest.FailureUnknownProductID.String())
	require.Equal(t, 0, r.code, r.stderr)
	fields := map[string][]string{}
	rows := tableRows(r.stdout)
	for _, row := range rows[1:] {
		if len(row) == 0 {
			break
		}
		fields[row[0]] = row[1:]
	}
	require.Equal(t, []string{admintest.FailureEventID.String()}, fields["event_id"])
	require.Equal(t, []string{"2"}, fields["copies"])
	require.Equal(t, []string{"order-p-1"}, fields["sequence_key"])
	require.Equal(t, []string{admintest.FailureRetryID.String()}, fields["retry_id"])
	require.Equal(t, []string{`{"x-attempt":5,"x-pool":"stock-events"}`}, fields["headers"])
	require.Contains(t, fields["edited_body"][0], `"p-11"`)
	require.Equal(t, []string{"EDITED_AT", "EDITED_BY", "REASON", "DIFF"}, rows[len(rows)-2])
	require.Equal(t, "ops", rows[len(rows)-1][1])

	r = b.run(t, asReader, "failures", "get", admintest.FailureDecodeID.String(), "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.GetFailedEventResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, []byte("{not json"), resp.GetFailure().GetBody())
	require.Equal(t, "decode", resp.GetFailure().GetReason())

	r = b.run(t, asReader, "failures", "get", uuid.NewString())
	require.Equal(t, 3, r.code, r.stderr)
	r = b.run(t, asReader, "failures", "get")
	require.Equal(t, 2, r.code, r.stderr)
}

func TestFailuresRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "failures", "retry", "--pool", "stock-events", "--dry-run")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{
		{"ID", "SERVICE", "STATE", "SELECTED", "SENT", "RESOLVED", "FAILED_AGAIN", "CANARY", "RATE", "CREATED_BY", "CREATED_AT", "FINISHED_AT", "ERROR"},
		{"-", "stock", "dry_run", "3", "0", "0", "0", "0", "200", "-", "-", "-", "-"},
	}, tableRows(r.stdout))

	r = b.run(t, asReader, "failures", "retry", "--pool", "stock-events")
	require.Equal(t, 5, r.code, r.stderr) // PermissionDenied

	r = b.run(t, asAdmin, "failures", "retry", "--service", "stock", "--reason", "retries_exhausted", "--canary", "1", "--rate", "20",
		"--override-beyond-horizon", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.RetryFailedEventsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, adminv1.FailureRetryState_FAILURE_RETRY_STATE_CANARY, resp.GetRetry().GetState())
	require.Equal(t, int64(2), resp.GetRetry().GetSelected())
	c := b.backend.CallsTo("RetryFailedEvents")[1]
	require.Equal(t, failure.RetryRequest{
		Filter: failure.Filter{Reason: "retries_exhausted"}, Canary: 1, Rate: 20, OverrideBeyondHorizon: true,
	}, c.Retry)
	id := resp.GetRetry().GetId()

	r = b.run(t, asReader, "failures", "retries")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Len(t, rows, 4)
	require.Equal(t, []string{id, "stock", "canary"}, rows[1][:3])
	require.Equal(t, []string{admintest.FailureRunningRetryID.String(), "stock", "running"}, rows[2][:3])

	r = b.run(t, asReader, "failures", "retries", "--service", "stock", "--limit", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, tableRows(r.stdout), 2)
	require.Equal(t, 1, b.backend.CallsTo("ListFailureRetries")[1].Limit)

	r = b.run(t, asReader, "failures", "retries", "get", admintest.FailureRetryID.String(), "--service", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, []string{admintest.FailureRetryID.String(), "stock", "done", "1", "1", "0", "1"}, tableRows(r.stdout)[1][:7])
	require.Equal(t, "stock", b.backend.CallsTo("GetFailureRetry")[0].Service)

	r = b.run(t, asReader, "failures", "retries", "cancel", id)
	require.Equal(t, 5, r.code, r.stderr)
	r = b.run(t, asAdmin, "failures", "retries", "cancel", id)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "cancelled", tableRows(r.stdout)[1][2])
	r = b.run(t, asAdmin, "failures", "retries", "cancel", id)
	require.Equal(t, 4, r.code, r.stderr) // FailedPrecondition: finished
	require.Contains(t, r.stderr, "FailedPrecondition")

	r = b.run(t, asAdmin, "failures", "retries", "bogus")
	require.Equal(t, 2, r.code, r.stderr)
	r = b.run(t, asAdmin, "failures", "retry", "--service", "stock", "--canary", "-1")
	require.Equal(t, 4, r.code, r.stderr)
}

func TestFailuresDiscard(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "failures", "discard", "--pool", "stock-events", "--reason", "decode")
	require.Equal(t, 5, r.code, r.stderr)

	r = b.run(t, asAdmin, "failures", "discard", "--pool", "stock-events", "--reason", "decode", "--why", "test producer", "--parked", "release")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, [][]string{{"DISCARDED"}, {"1"}}, tableRows(r.stdout))
	c := b.backend.CallsTo("DiscardFailedEvents")[0]
	require.Equal(t, failure.Filter{Pool: "stock-events", Reason: "decode"}, c.Filter)
	require.Equal(t, failure.ParkedRelease, c.Parked)
	require.Equal(t, "test producer", c.Reason)

	r = b.run(t, asAdmin, "failures", "discard", "--service", "stock", "--parked", "discard", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.DiscardFailedEventsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, int64(2), resp.GetDiscarded())
	require.Equal(t, failure.ParkedDiscard, b.backend.CallsTo("DiscardFailedEvents")[1].Parked)

	r = b.run(t, asAdmin, "failures", "discard", "--service", "stock", "--parked", "keep")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `--parked "keep"`)
	require.Len(t, b.backend.CallsTo("DiscardFailedEvents"), 2)
}

func TestFailuresEdit(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := admintest.FailureUnknownProduct2ID.String()
	payload := `{"id":"x","payload":{"product":"p-22"}}`

	r := b.run(t, asReader, "failures", "edit", id, "--payload", payload)
	require.Equal(t, 5, r.code, r.stderr)

	r = b.run(t, asAdmin, "failures", "edit", id, "--payload", payload, "--reason", "typo")
	require.Equal(t, 0, r.code, r.stderr)
	c := b.backend.CallsTo("EditFailedEvent")[0]
	require.Equal(t, []byte(payload), c.Payload)
	require.Equal(t, "typo", c.Reason)
	require.Contains(t, r.stdout, "EDITED_AT")

	file, fromFile := filepath.Join(t.TempDir(), "body.json"), []byte(`{"from":"file"}`)
	require.NoError(t, os.WriteFile(file, fromFile, 0o600))
	r = b.run(t, asAdmin, "failures", "edit", id, "--payload", "@"+file, "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.EditFailedEventResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, fromFile, resp.GetFailure().GetEditedBody(), "the file's bytes, as they are")
	require.Len(t, resp.GetEdits(), 2)

	r = b.run(t, asAdmin, "failures", "edit", id)
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--payload is required")
	r = b.run(t, asAdmin, "failures", "edit", id, "--payload", "@"+filepath.Join(t.TempDir(), "missing.json"))
	require.Equal(t, 1, r.code, r.stderr)
	r = b.run(t, asAdmin, "failures", "edit", id, "--payload", "{")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, "payload: not JSON")
	require.Len(t, b.backend.CallsTo("EditFailedEvent"), 2)
}
