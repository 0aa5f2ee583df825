package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecodeProblems(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		edits []string
		want  []Problem
	}{
		{
			name:  "UnknownTopLevelKey",
			edits: []string{"log: {", "logging: true\nlog: {"},
			want:  []Problem{{Path: "logging", Message: "unknown key"}},
		},
		{
			name:  "UnknownNestedKey",
			edits: []string{"        handlers: [shipping.track_status]\n", "        handlers: [shipping.track_status]\n        batchsize: 10\n"},
			want:  []Problem{{Path: "services[1].pools[0].batchsize", Message: "unknown key"}},
		},
		{
			name:  "UnknownKeyInFlowMapping",
			edits: []string{"batch: {size: 100, wait: 5ms}", "batch: {size: 100, wiat: 5ms}"},
			want:  []Problem{{Path: "services[0].pools[0].batch.wiat", Message: "unknown key"}},
		},
		{
			name:  "IntegerIsWord",
			edits: []string{"concurrency: 4", "concurrency: four"},
			want:  []Problem{{Path: "services[0].pools[0].concurrency", Message: "must be an integer"}},
		},
		{
			name:  "IntegerIsFloat",
			edits: []string{"concurrency: 4", "concurrency: 4.5"},
			want:  []Problem{{Path: "services[0].pools[0].concurrency", Message: "must be an integer"}},
		},
		{
			name:  "IntegerIsQuoted",
			edits: []string{"concurrency: 4", `concurrency: "4"`},
			want:  []Problem{{Path: "services[0].pools[0].concurrency", Message: "must be an integer"}},
		},
		{
			name:  "IntegerTooBig",
			edits: []string{"max_body_bytes: 1048576", "max_body_bytes: 99999999999999999999"},
			want:  []Problem{{Path: "broker.max_body_bytes", Message: "must be an integer"}},
		},
		{
			name:  "IntegerIsList",
			edits: []string{"batch_size: 10000", "batch_size: [1]"},
			want:  []Problem{{Path: "services[0].purge.batch_size", Message: "must be an integer"}},
		},
		{
			name:  "BadDuration",
			edits: []string{"horizon: 336h", "horizon: 3 days"},
			want:  []Problem{{Path: "services[0].horizon", Message: `invalid duration "3 days"`}},
		},
		{
			name:  "DurationWithoutUnit",
			edits: []string{"wait: 5ms", "wait: 5"},
			want:  []Problem{{Path: "services[0].pools[0].batch.wait", Message: `invalid duration "5" (a unit is required, e.g. "5s")`}},
		},
		{
			name:  "BadDurationInList",
			edits: []string{"delays: [1s, 10s, 1m, 10m]", "delays: [1s, 10 s, 1m, 10m]"},
			want:  []Problem{{Path: "services[0].pools[0].retry.delays[1]", Message: `invalid duration "10 s"`}},
		},
		{
			name:  "DurationIsMapping",
			edits: []string{"every: 15m", "every: {minutes: 15}"},
			want:  []Problem{{Path: "services[0].purge.every", Message: `must be a duration (e.g. "5s", "336h")`}},
		},
		{
			name:  "StringIsList",
			edits: []string{"queue: stock.events", "queue: [stock.events]"},
			want:  []Problem{{Path: "services[0].pools[0].queue", Message: "must be a string"}},
		},
		{
			name:  "ListIsScalar",
			edits: []string{"bindings: [order.order.placed.v1]", "bindings: order.order.placed.v1"},
			want:  []Problem{{Path: "services[0].pools[0].bindings", Message: "must be a list"}},
		},
		{
			name:  "MappingIsScalar",
			edits: []string{"log: {level: info, format: json}", "log: info"},
			want:  []Problem{{Path: "log", Message: "must be a mapping"}},
		},
		{
			name:  "ServicesIsMapping",
			edits: []string{"services:\n", "services:\n  stock:\n    name: x\nx-services:\n"},
			want: []Problem{
				{Path: "services", Message: "must be a list"},
				{Path: "x-services", Message: "unknown key"},
			},
		},
		{
			name:  "UnknownAlias",
			edits: []string{"queue_type: quorum", "queue_type: *qt"},
			want:  []Problem{{Path: "services[0].pools[0].queue_type", Message: "unknown alias *qt"}},
		},
		{
			name:  "SyntaxError",
			edits: []string{"log: {level: info, format: json}", "log: {level: info, format: json"},
			want:  []Problem{{Path: "test.yaml:2:1", Message: "invalid YAML: ',' or '}' must be specified"}},
		},
		{
			name:  "DuplicateKey",
			edits: []string{"    horizon: 336h\n", "    horizon: 336h\n    horizon: 48h\n"},
			want:  []Problem{{Path: "test.yaml:13:5", Message: `invalid YAML: mapping key "horizon" already defined at [12:5]`}},
		},
		{
			name:  "TwoDocuments",
			edits: []string{"log: {", "---\nlog: {level: info}\n---\nlog: {"},
			want:  []Problem{{Path: "test.yaml", Message: "document 2: only one YAML document is allowed"}},
		},
		{
			name:  "NotAMapping",
			edits: []string{baseYAML, "- a\n- b\n"},
			want:  []Problem{{Path: "test.yaml", Message: "must be a mapping"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWith(t, edit(t, baseYAML, tt.edits...), nil)
			require.Equal(t, tt.want, requireProblems(t, err))
		})
	}
}

func TestDecodeAnchorsAndMerge(t *testing.T) {
	t.Parallel()
	const data = `services:
  - name: stock
    database: postgres://localhost/stock
    pools:
      - &pool
        name: stock-events
        queue: stock.events
        bindings: &bindings ["order.order.placed.v1", "order.order.cancelled.v1", "order.order.expired.v1"]
        handlers: [stock.reserve]
        concurrency: 8
        batch: {size: 50, wait: 0s}
        retry: {delays: [2s]}
      - <<: *pool
        name: stock-release
        queue: stock.release
        handlers: [stock.release]
        bindings: [order.order.cancelled.v1, order.order.expired.v1]
`
	_, err := parseWith(t, data, nil)
	// The first pool also routes stock.release's events: reported, which
	// shows the merge worked (the second pool got its own bindings).
	require.Equal(t, []string{"services[0].pools[0].bindings[1]", "services[0].pools[0].bindings[2]"}, paths(requireProblems(t, err)))

	fixed := edit(t, data, `&bindings ["order.order.placed.v1", "order.order.cancelled.v1", "order.order.expired.v1"]`, `["order.order.placed.v1"]`)
	c, err := parseWith(t, fixed, nil)
	require.NoError(t, err)
	p0, p1 := c.Services[0].Pools[0], c.Services[0].Pools[1]
	require.Equal(t, "stock-release", p1.Name)
	require.Equal(t, "stock.release", p1.Queue)
	require.Equal(t, []string{"stock.release"}, p1.Handlers)
	require.Equal(t, 8, p1.Concurrency)
	require.Equal(t, p0.Batch, p1.Batch)
	require.Equal(t, BatchConfig{Size: 50, Wait: 0}, p1.Batch)
	require.Equal(t, []time.Duration{2 * time.Second}, p1.Retry.Delays)
	require.Equal(t, 8*50*2, p1.Prefetch)
}

// An anchor defined twice: each alias names the latest anchor before it
// (YAML 1.2, 3.2.2.2), not the last one of the document.
func TestDecodeRedefinedAnchor(t *testing.T) {
	t.Parallel()
	const data = `services:
  - name: stock
    database: postgres://localhost/stock
    pools:
      - name: stock-events
        queue: stock.events
        bindings: [order.order.placed.v1]
        handlers: [stock.reserve]
        concurrency: &n 2
        batch:
          size: *n
      - name: stock-release
        queue: stock.release
        bindings: [order.order.cancelled.v1, order.order.expired.v1]
        handlers: [stock.release]
        concurrency: &n 3
        batch:
          size: *n
`
	c, err := parseWith(t, data, nil)
	require.NoError(t, err)
	p0, p1 := c.Services[0].Pools[0], c.Services[0].Pools[1]
	require.Equal(t, 2, p0.Batch.Size, "the alias names the anchor before it, not the last of the document")
	require.Equal(t, 3, p1.Batch.Size)
}

// An alias before its anchor names nothing: an error at the alias's key
// path, not the anchor that comes later.
func TestDecodeForwardAlias(t *testing.T) {
	t.Parallel()
	data := edit(t, baseYAML, "queue_type: quorum", "queue_type: *qt", "concurrency: 4", "concurrency: 4\n        x-later: &qt quorum")
	_, err := parseWith(t, data, nil)
	problems := requireProblems(t, err)
	require.Contains(t, problems, Problem{Path: "services[0].pools[0].queue_type", Message: "alias *qt before its anchor &qt"})
}

func TestDecodeScalarsIntoStrings(t *testing.T) {
	t.Parallel()
	// A scalar that YAML reads as a number or a boolean keeps its source
	// text in a string field.
	data := edit(t, baseYAML,
		`token: "read-token-0123456789"`, "token: 0x12345678901234567",
		"exchange: events", "exchange: 0x1F",
	)
	c, err := parseWith(t, data, nil)
	require.NoError(t, err)
	require.Equal(t, "0x12345678901234567", c.Admin.Tokens[1].Token)
	require.Equal(t, "0x1F", c.Broker.Exchange)
}

func TestDecodeRecursiveMerge(t *testing.T) {
	t.Parallel()
	data := edit(t, baseYAML, "log: {level: info, format: json}", "log: &l {level: info, <<: *l}")
	_, err := parseWith(t, data, nil)
	require.Equal(t, []Problem{{Path: "log.<<", Message: "recursive merge key"}}, requireProblems(t, err))
}

// The decoder is generic: it walks any struct by its yaml tags.
type genericPart struct {
	X int    `yaml:"x"`
	Y string `yaml:"y"`
}

type genericSample struct {
	A     genericPart `yaml:"a"`
	B     genericPart `yaml:"b"`
	C     genericPart `yaml:"c,omitempty"`
	Flag  bool        `yaml:"flag"`
	Delta int8        `yaml:"delta"`
	Count uint8       `yaml:"count"`
	NoTag string
	Skip  string `yaml:"-"`
}

func TestDecodeGeneric(t *testing.T) {
	t.Parallel()

	decodeSample := func(t *testing.T, data string, e env) (genericSample, map[string]bool, []Problem) {
		t.Helper()
		ps := newProblems("sample.yaml")
		var out genericSample
		set := decodeYAML(ps, []byte(data), &out, e.lookup)
		return out, set, ps.list
	}

	t.Run("Values", func(t *testing.T) {
		t.Parallel()
		out, set, problems := decodeSample(t, `a: &a {x: 1, y: one}
b: &b {x: 2}
c: {<<: [*b, *a]}
flag: ${FLAG}
delta: -5
count: 0x07
notag: hi
`, env{"FLAG": "true"})
		require.Empty(t, problems)
		require.Equal(t, genericSample{
			A:     genericPart{X: 1, Y: "one"},
			B:     genericPart{X: 2},
			C:     genericPart{X: 2, Y: "one"}, // earlier merged mappings win
			Flag:  true,
			Delta: -5,
			Count: 7,
			NoTag: "hi",
		}, out)
		require.True(t, set["c.y"])
		require.False(t, set["b.y"])
	})

	t.Run("ExplicitKeyOverridesMerge", func(t *testing.T) {
		t.Parallel()
		out, _, problems := decodeSample(t, "a: &a {x: 1, y: one}\nb: {<<: *a, x: 5}\n", nil)
		require.Empty(t, problems)
		require.Equal(t, genericPart{X: 5, Y: "one"}, out.B)
	})

	t.Run("Problems", func(t *testing.T) {
		t.Parallel()
		_, _, problems := decodeSample(t, `flag: yes
delta: !!str 5
count: 300
skip: x
a: {x: -1, <<: 3}
b: {x: "${NOPE:-many}"}
`, nil)
		require.Equal(t, []Problem{
			{Path: "flag", Message: "must be a boolean"},
			{Path: "delta", Message: "must be an integer"},
			{Path: "count", Message: "integer out of range"},
			{Path: "skip", Message: "unknown key"},
			{Path: "a.<<", Message: "must be a mapping"},
			{Path: "b.x", Message: `must be an integer (got "many")`},
		}, problems)
	})
}
