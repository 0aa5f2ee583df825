package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExpand(t *testing.T) {
	t.Parallel()
	e := env{"A": "alpha", "EMPTY": "", "DOLLAR": "$B"}
	tests := []struct {
		in       string
		want     string
		refs     bool
		problems []string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "alpha", refs: true},
		{in: "x-${A}-y", want: "x-alpha-y", refs: true},
		{in: "${A}${A}", want: "alphaalpha", refs: true},
		{in: "${MISSING:-def}", want: "def", refs: true},
		{in: "${EMPTY:-def}", want: "def", refs: true},
		{in: "${EMPTY}", want: "", refs: true},
		{in: "${MISSING:-}", want: "", refs: true},
		{in: "${A:-def}", want: "alpha", refs: true},
		{in: "${MISSING:-a:-b}", want: "a:-b", refs: true},
		{in: "$$", want: "$"},
		{in: "$${A}", want: "${A}"},
		{in: "$$$${A}", want: "$${A}"},
		{in: "$$${A}", want: "$alpha", refs: true},
		{in: "a$b", want: "a$b"},
		{in: "trailing$", want: "trailing$"},
		{in: "${DOLLAR}", want: "$B", refs: true}, // values are not expanded again
		{in: "${MISSING}", refs: true, problems: []string{`environment variable "MISSING" is not set`}},
		{in: "${M1}-${M2}", refs: true, problems: []string{`environment variable "M1" is not set`, `environment variable "M2" is not set`}},
		{in: "${}", refs: true, problems: []string{`invalid variable reference "${}" (want ${NAME} or ${NAME:-default})`}},
		{in: "${A B}", refs: true, problems: []string{`invalid variable reference "${A B}" (want ${NAME} or ${NAME:-default})`}},
		{in: "${A-def}", refs: true, problems: []string{`invalid variable reference "${A-def}" (want ${NAME} or ${NAME:-default})`}},
		{in: "x${A", refs: true, problems: []string{`unterminated variable reference "${A"`}},
	}
	for _, tt := range tests {
		got, refs, problems := expand(tt.in, e.lookup)
		require.Equal(t, tt.problems, problems, tt.in)
		require.Equal(t, tt.refs, refs, tt.in)
		if tt.problems == nil {
			require.Equal(t, tt.want, got, tt.in)
		}
	}
}
