package admin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

func TestDescribeService(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	resp, err := b.client.DescribeService(asReader(t), &adminv1.DescribeServiceRequest{Service: "stock"})
	require.NoError(t, err)
	require.Equal(t, "stock", resp.GetService())
	require.Equal(t, 11*time.Second, resp.GetRetrySpan().AsDuration())
	require.Equal(t, int64(2), resp.GetProcessedRowsEstimate())
	require.Equal(t, int64(42), resp.GetLastRun().GetDeleted())

	// A service that never purged has no last run.
	resp, err = b.client.DescribeService(asReader(t), &adminv1.DescribeServiceRequest{Service: "shipping"})
	require.NoError(t, err)
	require.Nil(t, resp.GetLastRun())

	_, err = b.client.DescribeService(asReader(t), &adminv1.DescribeServiceRequest{})
	requireCode(t, err, codes.InvalidArgument)
	_, err = b.client.DescribeService(asReader(t), &adminv1.DescribeServiceRequest{Service: "nope"})
	requireCode(t, err, codes.NotFound)
}

func TestListAudit(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	_, err := b.client.PausePool(asAdmin(t), &adminv1.PausePoolRequest{Pool: "stock-events", Reason: "incident 42"})
	require.NoError(t, err)
	_, err = b.client.RunPurge(asAdmin(t), &adminv1.RunPurgeRequest{Service: "shipping", DryRun: true})
	require.NoError(t, err)

	resp, err := b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 2)
	newest, oldest := resp.GetEntries()[0], resp.GetEntries()[1]
	require.Equal(t, "purge.run", newest.GetAction())
	require.Equal(t, "shipping", newest.GetService())
	require.True(t, newest.GetDetail().GetFields()["dry_run"].GetBoolValue())
	require.Equal(t, "pool.pause", oldest.GetAction())
	require.Equal(t, "ops", oldest.GetActor())
	require.Equal(t, "stock-events", oldest.GetTarget())
	require.Equal(t, "incident 42", oldest.GetDetail().GetFields()["reason"].GetStringValue())
	require.False(t, oldest.GetAt().AsTime().IsZero())

	resp, err = b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{Service: "stock", Limit: 5})
	require.NoError(t, err)
	require.Len(t, resp.GetEntries(), 1)
	require.Equal(t, 5, b.backend.CallsTo("ListAudit")[1].Limit)

	_, err = b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{Limit: -1})
	requireCode(t, err, codes.InvalidArgument)
	_, err = b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{Service: "nope"})
	requireCode(t, err, codes.NotFound)

	// One database away: the others' entries, and the one named.
	b.backend.SetDatabaseError("shipping", "its database is not reachable")
	resp, err = b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{})
	require.NoError(t, err)
	require.Equal(t, []string{"shipping"}, resp.GetUnavailableServices())
	require.Len(t, resp.GetEntries(), 1)
	require.Equal(t, "stock", resp.GetEntries()[0].GetService())
	_, err = b.client.ListAudit(asReader(t), &adminv1.ListAuditRequest{Service: "shipping"})
	requireCode(t, err, codes.Unavailable)
}
