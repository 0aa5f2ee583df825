package admin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

func TestAuthUnauthenticated(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	for name, values := range map[string][]string{
		"NoHeader":     nil,
		"Empty":        {""},
		"NoScheme":     {adminTokenValue},
		"BasicScheme":  {"Basic " + adminTokenValue},
		"BearerAlone":  {"Bearer"},
		"BearerBlank":  {"Bearer   "},
		"ExtraField":   {"Bearer " + adminTokenValue + " extra"},
		"TwoHeaders":   {"Bearer " + adminTokenValue, "Bearer " + readTokenValue},
		"WrongToken":   {"Bearer not-the-token"},
		"TokenPrefix":  {"Bearer " + adminTokenValue[:len(adminTokenValue)-1]},
		"TokenSuffix":  {"Bearer " + adminTokenValue + "x"},
		"TokenCaseMix": {"Bearer " + "ADM" + adminTokenValue[3:]},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			for _, v := range values {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
			}
			_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
			st := requireCode(t, err, codes.Unauthenticated)
			require.NotContains(t, st.Message(), adminTokenValue)
		})
	}
	require.Empty(t, b.backend.Calls())
}

func TestAuthSchemeCaseInsensitive(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "bearer "+readTokenValue)
	_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
	require.NoError(t, err)
}

func TestAuthRoles(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	id := admintest.StockEventID.String()

	calls := map[string]func(ctx context.Context) error{
		"ListServices": func(ctx context.Context) error {
			_, err := b.client.ListServices(ctx, &adminv1.ListServicesRequest{})
			return err
		},
		"ListPools": func(ctx context.Context) error {
			_, err := b.client.ListPools(ctx, &adminv1.ListPoolsRequest{})
			return err
		},
		"ListDelayQueues": func(ctx context.Context) error {
			_, err := b.client.ListDelayQueues(ctx, &adminv1.ListDelayQueuesRequest{})
			return err
		},
		"LookupEvent": func(ctx context.Context) error {
			_, err := b.client.LookupEvent(ctx, &adminv1.LookupEventRequest{EventId: id})
			return err
		},
		"AdviseHorizon": func(ctx context.Context) error {
			_, err := b.client.AdviseHorizon(ctx, &adminv1.AdviseHorizonRequest{Service: "stock"})
			return err
		},
		"GetHorizon": func(ctx context.Context) error {
			_, err := b.client.GetHorizon(ctx, &adminv1.GetHorizonRequest{Service: "stock"})
			return err
		},
		"ListPurgeRuns": func(ctx context.Context) error {
			_, err := b.client.ListPurgeRuns(ctx, &adminv1.ListPurgeRunsRequest{Service: "stock"})
			return err
		},
		"ListFailedMessages": func(ctx context.Context) error {
			_, err := b.client.ListFailedMessages(ctx, &adminv1.ListFailedMessagesRequest{Pool: "stock-events"})
			return err
		},
		"PausePool": func(ctx context.Context) error {
			_, err := b.client.PausePool(ctx, &adminv1.PausePoolRequest{Pool: "stock-events"})
			return err
		},
		"ResumePool": func(ctx context.Context) error {
			_, err := b.client.ResumePool(ctx, &adminv1.ResumePoolRequest{Pool: "stock-events"})
			return err
		},
		"SetHorizon": func(ctx context.Context) error {
			_, err := b.client.SetHorizon(ctx, &adminv1.SetHorizonRequest{Service: "stock", Horizon: durationpb.New(336 * 3600e9)})
			return err
		},
		"RunPurge": func(ctx context.Context) error {
			_, err := b.client.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: "stock", DryRun: true})
			return err
		},
		"RetryFailedMessages": func(ctx context.Context) error {
			_, err := b.client.RetryFailedMessages(ctx, &adminv1.RetryFailedMessagesRequest{Pool: "shipping-events", All: true})
			return err
		},
		"DescribeService": func(ctx context.Context) error {
			_, err := b.client.DescribeService(ctx, &adminv1.DescribeServiceRequest{Service: "stock"})
			return err
		},
		"ListAudit": func(ctx context.Context) error {
			_, err := b.client.ListAudit(ctx, &adminv1.ListAuditRequest{})
			return err
		},
		"ReplayEvents": func(ctx context.Context) error {
			_, err := b.client.ReplayEvents(ctx, &adminv1.ReplayEventsRequest{Service: "stock", EventIds: []string{id}, DryRun: true})
			return err
		},
		"GetReplay": func(ctx context.Context) error {
			_, err := b.client.GetReplay(ctx, &adminv1.GetReplayRequest{Service: "stock", Id: admintest.ReplayID.String()})
			return err
		},
		"ListReplays": func(ctx context.Context) error {
			_, err := b.client.ListReplays(ctx, &adminv1.ListReplaysRequest{Service: "stock"})
			return err
		},
		"CancelReplay": func(ctx context.Context) error {
			_, err := b.client.CancelReplay(ctx, &adminv1.CancelReplayRequest{Service: "stock", Id: admintest.ReplayID.String()})
			return err
		},
		"ReloadConfig": func(ctx context.Context) error {
			_, err := b.client.ReloadConfig(ctx, &adminv1.ReloadConfigRequest{})
			return err
		},
		"ListFailureGroups": func(ctx context.Context) error {
			_, err := b.client.ListFailureGroups(ctx, &adminv1.ListFailureGroupsRequest{Service: "stock"})
			return err
		},
		"ListFailedEvents": func(ctx context.Context) error {
			_, err := b.client.ListFailedEvents(ctx, &adminv1.ListFailedEventsRequest{Filter: &adminv1.FailureFilter{Service: "stock"}})
			return err
		},
		"GetFailedEvent": func(ctx context.Context) error {
			_, err := b.client.GetFailedEvent(ctx, &adminv1.GetFailedEventRequest{Id: admintest.FailureDecodeID.String()})
			return err
		},
		"RetryFailedEvents": func(ctx context.Context) error {
			_, err := b.client.RetryFailedEvents(ctx, &adminv1.RetryFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Pool: "stock-events"}, DryRun: true,
			})
			return err
		},
		"GetFailureRetry": func(ctx context.Context) error {
			_, err := b.client.GetFailureRetry(ctx, &adminv1.GetFailureRetryRequest{Id: admintest.FailureRetryID.String()})
			return err
		},
		"ListFailureRetries": func(ctx context.Context) error {
			_, err := b.client.ListFailureRetries(ctx, &adminv1.ListFailureRetriesRequest{})
			return err
		},
		"CancelFailureRetry": func(ctx context.Context) error {
			_, err := b.client.CancelFailureRetry(ctx, &adminv1.CancelFailureRetryRequest{Id: admintest.FailureRunningRetryID.String()})
			return err
		},
		"DiscardFailedEvents": func(ctx context.Context) error {
			_, err := b.client.DiscardFailedEvents(ctx, &adminv1.DiscardFailedEventsRequest{
				Filter: &adminv1.FailureFilter{Service: "stock", Ids: []string{admintest.FailureDecodeID.String()}},
			})
			return err
		},
		"EditFailedEvent": func(ctx context.Context) error {
			_, err := b.client.EditFailedEvent(ctx, &adminv1.EditFailedEventRequest{
				Id: admintest.FailureUnknownProduct2ID.String(), Payload: `{"product":"p-22"}`,
			})
			return err
		},
		// Live limits (limits.go).
		"SetPoolLimits": func(ctx context.Context) error {
			_, err := b.client.SetPoolLimits(ctx, &adminv1.SetPoolLimitsRequest{Pool: "stock-events", Rate: 200, Reason: "payment API"})
			return err
		},
		"GetPoolLimits": func(ctx context.Context) error {
			_, err := b.client.GetPoolLimits(ctx, &adminv1.GetPoolLimitsRequest{Pool: "stock-events"})
			return err
		},
		"PauseAll": func(ctx context.Context) error {
			_, err := b.client.PauseAll(ctx, &adminv1.PauseAllRequest{Reason: "incident"})
			return err
		},
		"ResumeAll": func(ctx context.Context) error {
			_, err := b.client.ResumeAll(ctx, &adminv1.ResumeAllRequest{})
			return err
		},
	}
	readAllowed := map[string]bool{
		"GetPoolLimits": true,
		"ListServices":  true, "ListPools": true, "ListDelayQueues": true, "LookupEvent": true,
		"GetHorizon": true, "AdviseHorizon": true, "ListPurgeRuns": true, "ListFailedMessages": true,
		"DescribeService": true, "ListAudit": true, "GetReplay": true, "ListReplays": true,
		"ListFailureGroups": true, "ListFailedEvents": true, "GetFailedEvent": true,
		"GetFailureRetry": true, "ListFailureRetries": true,
	}
	require.Len(t, calls, len(adminv1.AdminService_ServiceDesc.Methods), "every RPC is covered")

	for method, call := range calls {
		t.Run(method, func(t *testing.T) {
			require.NoError(t, call(asAdmin(t)), "admin may call everything")
			err := call(asReader(t))
			if readAllowed[method] {
				require.NoError(t, err)
				return
			}
			st := requireCode(t, err, codes.PermissionDenied)
			require.Contains(t, st.Message(), "dashboards")
			require.NotContains(t, st.Message(), readTokenValue)
		})
	}
	for _, c := range b.backend.Calls() {
		if c.Actor != "" {
			require.Equal(t, "ops", c.Actor, "only the admin token reached audited methods")
		}
	}
}

func TestAuthNoTokenConfigured(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{cfg: &admin.ServerConfig{}})

	_, err := b.client.ListServices(asAdmin(t), &adminv1.ListServicesRequest{})
	requireCode(t, err, codes.Unauthenticated)
	_, err = b.client.ListServices(t.Context(), &adminv1.ListServicesRequest{})
	requireCode(t, err, codes.Unauthenticated)

	resp, err := grpc_health_v1.NewHealthClient(b.conn).Check(t.Context(), &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err, "health needs no token")
	require.Equal(t, grpc_health_v1.HealthCheckResponse_SERVING, resp.GetStatus())

	_, err = listReflectionServices(t, b.conn)
	requireCode(t, err, codes.Unauthenticated)
	require.Empty(t, b.backend.Calls())
}
