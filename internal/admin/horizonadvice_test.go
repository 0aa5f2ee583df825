package admin_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/admin/admintest"
)

// AdviseHorizon is a read-role call; its window defaults to 30 days; an
// unknown service is NotFound; a window <= 0 or over a year is
// InvalidArgument naming the field, and never reaches the backend.
func TestAdviseHorizon(t *testing.T) {
	t.Parallel()

	t.Run("ReadRoleAndDefaultWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		resp, err := b.client.AdviseHorizon(asReader(t), &adminv1.AdviseHorizonRequest{Service: "stock"})
		require.NoError(t, err)
		a := resp.GetAdvice()
		require.Equal(t, "stock", a.GetService())
		require.Equal(t, 31*24*time.Hour, a.GetAdvised().AsDuration())
		require.Equal(t, "order", a.GetArchives()[0].GetProducer())
		require.Len(t, a.GetSources(), 2)
		require.Equal(t, 30*time.Second, a.GetSources()[0].GetMax().AsDuration())
		require.NotEmpty(t, a.GetReasons())
		require.Equal(t, []admintest.Call{{Method: "AdviseHorizon", Service: "stock", Horizon: admin.AdviseWindowDefault}}, b.backend.Calls())

		resp, err = b.client.AdviseHorizon(asReader(t), &adminv1.AdviseHorizonRequest{Service: "stock", Window: durationpb.New(7 * 24 * time.Hour), IgnoreArchive: true})
		require.NoError(t, err)
		require.Equal(t, 4*24*time.Hour, resp.GetAdvice().GetAdvised().AsDuration())
		require.Equal(t, admintest.Call{Method: "AdviseHorizon", Service: "stock", Horizon: 7 * 24 * time.Hour, Force: true}, b.backend.CallsTo("AdviseHorizon")[1])
	})

	t.Run("UnknownService", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		_, err := b.client.AdviseHorizon(asReader(t), &adminv1.AdviseHorizonRequest{Service: "billing"})
		st := requireCode(t, err, codes.NotFound)
		require.Contains(t, st.Message(), "billing")
	})

	t.Run("BadArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		for name, tc := range map[string]struct {
			req   *adminv1.AdviseHorizonRequest
			field string
		}{
			"NoService":  {&adminv1.AdviseHorizonRequest{}, "service"},
			"ZeroWindow": {&adminv1.AdviseHorizonRequest{Service: "stock", Window: durationpb.New(0)}, "window"},
			"Negative":   {&adminv1.AdviseHorizonRequest{Service: "stock", Window: durationpb.New(-time.Hour)}, "window"},
			"OverAYear":  {&adminv1.AdviseHorizonRequest{Service: "stock", Window: durationpb.New(367 * 24 * time.Hour)}, "window"},
			"BadNanos":   {&adminv1.AdviseHorizonRequest{Service: "stock", Window: &durationpb.Duration{Seconds: 1, Nanos: 2_000_000_000}}, "window"},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := b.client.AdviseHorizon(asReader(t), tc.req)
				st := requireCode(t, err, codes.InvalidArgument)
				require.Contains(t, st.Message(), tc.field)
			})
		}
		require.Empty(t, b.backend.Calls())
	})
}
