package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A pool's limits: bad values are reported at their key path; a valid
// limits.concurrency stands for the pool's concurrency.
func TestPoolLimitsValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, limits, path, msg string
	}{
		{name: "NegativeRate", limits: "{rate: -1}", path: "services[0].pools[0].limits.rate", msg: "must be between 0 (no limit)"},
		{name: "NaNRate", limits: "{rate: .nan}", path: "services[0].pools[0].limits.rate", msg: "must be a number"},
		{name: "InfiniteRate", limits: "{rate: .inf}", path: "services[0].pools[0].limits.rate", msg: "must be a number"},
		{name: "NegativeBurst", limits: "{rate: 5, burst: -1}", path: "services[0].pools[0].limits.burst", msg: "must be between 0"},
		{name: "BurstWithoutRate", limits: "{burst: 10}", path: "services[0].pools[0].limits.burst", msg: "needs limits.rate"},
		{name: "NegativeConcurrency", limits: "{concurrency: -2}", path: "services[0].pools[0].limits.concurrency", msg: "must be between 1"},
		{name: "UnknownKey", limits: "{rat: 5}", path: "services[0].pools[0].limits.rat", msg: ""},
		{name: "Valid", limits: "{rate: 200, burst: 400, concurrency: 2}"},
		{name: "ZeroIsNone", limits: "{rate: 0}"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parseWith(t, edit(t, baseYAML, stockPoolEnd, stockPoolEnd+"        limits: "+tt.limits+"\n"), nil)
			if tt.path == "" {
				require.NoError(t, err)
				return
			}
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "problems: %v", ps)
			require.Equal(t, tt.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tt.msg)
			_ = cfg
		})
	}
	cfg, err := parseWith(t, edit(t, baseYAML, stockPoolEnd, stockPoolEnd+"        limits: {rate: 200, concurrency: 2}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, 2, cfg.Services[0].Pools[0].Concurrency, "limits.concurrency overrides concurrency")
	require.InDelta(t, 200, cfg.Services[0].Pools[0].Limits.Rate, 0)
}
