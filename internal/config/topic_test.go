package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTopicMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, key string
		want         bool
	}{
		{"order.order.placed.v1", "order.order.placed.v1", true},
		{"order.order.placed.v1", "order.order.placed.v2", false},
		{"order.order.placed", "order.order.placed.v1", false},
		{"order.*.placed.v1", "order.order.placed.v1", true},
		{"order.*.v1", "order.order.placed.v1", false},
		{"*", "order", true},
		{"*", "order.placed", false},
		{"#", "order.order.placed.v1", true},
		{"order.#", "order", true},
		{"order.#", "order.order.placed.v1", true},
		{"order.#", "shipping.order", false},
		{"#.v1", "order.order.placed.v1", true},
		{"#.v1", "v1", true},
		{"#.v1", "order.v2", false},
		{"order.#.v1", "order.v1", true},
		{"order.#.v1", "order.a.b.c.v1", true},
		{"order.#.#.v1", "order.v1", true},
		{"#.*", "order", true},
		{"#.*.#", "order.placed", true},
		{"*.*", "order", false},
		{"order.#.placed.*", "order.x.placed", false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, topicMatch(tt.pattern, tt.key), "topicMatch(%q, %q)", tt.pattern, tt.key)
	}
}

func TestCheckBinding(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"#", "*", "order.#", "*.order.*", "order.order.placed.v1", "a-b_c.d"} {
		require.Empty(t, checkBinding(ok), ok)
	}
	for _, bad := range []string{"", ".", "order.", ".order", "order..placed", "order.*x", "order.#x", "ord#er", "**"} {
		require.NotEmpty(t, checkBinding(bad), bad)
	}
}
