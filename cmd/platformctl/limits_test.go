package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

func TestPoolLimitAndKillSwitch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	r := b.run(t, asAdmin, "pool", "limit", "stock-events", "--rate", "12000/m", "--concurrency", "2", "--reason", "PSP", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	var set adminv1.SetPoolLimitsResponse
	require.NoError(t, protojson.Unmarshal([]byte(r.stdout), &set))
	require.InDelta(t, 200, set.GetLimits().GetRate(), 1e-9, "12000/m is 200/s")
	require.Equal(t, int32(2), set.GetLimits().GetConcurrency())

	r = b.run(t, asReader, "pool", "limits", "stock-events")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "200/s")

	r = b.run(t, asAdmin, "pool", "limit", "stock-events", "--rate", "fast")
	require.Equal(t, 2, r.code, "a rate that is no number is a usage error")
	r = b.run(t, asAdmin, "pool", "limit", "stock-events", "--rate", "-1/s")
	require.Equal(t, 4, r.code, r.stderr)
	require.Contains(t, r.stderr, "InvalidArgument")
	require.Contains(t, r.stderr, "rate")

	r = b.run(t, asAdmin, "pause-all")
	require.Equal(t, 2, r.code, "pause-all needs --reason")
	r = b.run(t, asAdmin, "pause-all", "--reason", "incident", "--service", "stock")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "incident")
	r = b.run(t, asReader, "resume-all")
	require.Equal(t, 5, r.code, "resume-all needs an admin token")
	r = b.run(t, asAdmin, "resume-all")
	require.Equal(t, 0, r.code, r.stderr)
}
