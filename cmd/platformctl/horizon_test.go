package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/admin/admintest"
)

func TestHorizonAdvise(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asReader, "horizon", "advise", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	rows := tableRows(r.stdout)
	require.Equal(t, []string{"SERVICE", "HORIZON", "ADVISED", "ADVISED_ROWS", "ADVISED_BYTES", "ROWS", "BYTES", "ROWS_PER_DAY", "BEYOND_HORIZON", "WINDOW"}, rows[0])
	require.Equal(t, []string{"stock", "336h0m0s", "744h0m0s", "3100000", "325058560", "1400000", "146800640", "100000", "2", "720h0m0s"}, rows[1])
	require.Equal(t, []string{"SOURCE", "COUNT", "P99", "P99.9", "MAX"}, rows[3])
	require.Equal(t, []string{"redelivery", "120", "20s", "28s", "30s"}, rows[4])
	require.Equal(t, []string{"replay", "3", "72h0m0s", "72h0m0s", "72h0m0s"}, rows[5])
	require.Equal(t, []string{"order", "720h0m0s", "stock-events"}, rows[8][:3])
	require.Contains(t, r.stdout, "REASONS\nThe archive of producer order keeps 30 days")

	r = b.run(t, asReader, "horizon", "advise", "stock", "--window", "7d", "--ignore-archive", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var resp adminv1.AdviseHorizonResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &resp))
	require.Equal(t, 96*time.Hour, resp.GetAdvice().GetAdvised().AsDuration())
	require.Equal(t, admintest.Call{Method: "AdviseHorizon", Service: "stock", Horizon: 7 * 24 * time.Hour, Force: true}, b.backend.CallsTo("AdviseHorizon")[1])

	r = b.run(t, asReader, "horizon", "advise", "stock", "--window", "seven")
	require.Equal(t, 4, r.code)
	require.Contains(t, r.stderr, `platformctl: InvalidArgument: window "seven"`)

	r = b.run(t, asReader, "horizon", "advise", "stock", "--window", "0d")
	require.Equal(t, 4, r.code)
	require.True(t, strings.HasPrefix(r.stderr, "platformctl: InvalidArgument: window must be positive"), r.stderr)

	r = b.run(t, asReader, "horizon", "advise", "billing")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "NotFound")
}
