package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const tracingBase = `services:
  - name: stock
    database: postgres://localhost/stock
    pools:
      - name: stock-events
        queue: stock.events
        bindings: ["order.#"]
        handlers: [stock.reserve]
`

func TestTracing(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, tracingBase, nil)
		require.NoError(t, err)
		require.Equal(t, TracingConfig{Protocol: TracingProtocolHTTP, SamplerRatio: 1}, c.Tracing)
	})

	t.Run("Block", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, tracingBase+"tracing: {endpoint: \"http://127.0.0.1:4317\", protocol: grpc, sampler_ratio: 0.1}\n", nil)
		require.NoError(t, err)
		require.Equal(t, TracingConfig{Endpoint: "http://127.0.0.1:4317", Protocol: TracingProtocolGRPC, SamplerRatio: 0.1}, c.Tracing)
	})

	t.Run("IntegerRatioAndZero", func(t *testing.T) {
		t.Parallel()
		for in, want := range map[string]float64{"0": 0, "1": 1, "0.0": 0, "1.0": 1, "0.05": 0.05} {
			c, err := parseWith(t, tracingBase+"tracing: {sampler_ratio: "+in+"}\n", nil)
			require.NoError(t, err, in)
			require.InDelta(t, want, c.Tracing.SamplerRatio, 1e-12, in)
		}
	})

	t.Run("FromEnvironment", func(t *testing.T) {
		t.Parallel()
		c, err := parseWith(t, tracingBase+"tracing: {endpoint: \"${OTLP:-http://collector:4318}\", sampler_ratio: \"${RATIO}\"}\n", env{"RATIO": " 0.25 "})
		require.NoError(t, err)
		require.Equal(t, "http://collector:4318", c.Tracing.Endpoint)
		require.InDelta(t, 0.25, c.Tracing.SamplerRatio, 1e-12)
	})

	t.Run("Mistakes", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ yaml, path, msg string }{
			{"{endpoint: 127.0.0.1:4317}", "tracing.endpoint", `must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318 (got "127.0.0.1:4317")`},
			{"{endpoint: \"http://u:secret@collector:4318\"}", "tracing.endpoint", "must not carry a query, a fragment or user information"},
			{"{protocol: http/json}", "tracing.protocol", `must be one of http/protobuf, grpc (got "http/json")`},
			{"{sampler_ratio: 1.5}", "tracing.sampler_ratio", "must be between 0 and 1 (got 1.5)"},
			{"{sampler_ratio: -0.1}", "tracing.sampler_ratio", "must be between 0 and 1 (got -0.1)"},
			{"{sampler_ratio: half}", "tracing.sampler_ratio", "must be a number"},
			{"{sampler_ratio: .nan}", "tracing.sampler_ratio", "must be a number"},
			{"{sample: 1}", "tracing.sample", "unknown key"},
		} {
			_, err := parseWith(t, tracingBase+"tracing: "+tc.yaml+"\n", nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, tc.yaml)
			require.Equal(t, tc.path, ps[0].Path, tc.yaml)
			require.Contains(t, ps[0].Message, tc.msg, tc.yaml)
			require.NotContains(t, ps[0].Message, "secret", tc.yaml)
		}
	})
}
