package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConsoleOffWhenAbsent(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML, nil)
	require.NoError(t, err)
	require.False(t, c.Console.Enabled())
	require.Equal(t, ConsoleConfig{}, c.Console)

	c, err = parseWith(t, baseYAML+"console:\n", nil)
	require.NoError(t, err, "a null block is an absent one")
	require.False(t, c.Console.Enabled())
}

func TestConsoleDefaults(t *testing.T) {
	t.Parallel()
	c, err := parseWith(t, baseYAML+"console: {listen: 127.0.0.1:7071}\n", nil)
	require.NoError(t, err)
	require.True(t, c.Console.Enabled())
	require.Equal(t, ConsoleConfig{Listen: "127.0.0.1:7071", SessionTTL: ConsoleSessionTTLDefault,
		SampleEvery: ConsoleSampleEveryDefault}, c.Console)

	c, err = parseWith(t, baseYAML+"console: {listen: \"${CONSOLE_ADDR}\", session_ttl: 30m, sample_every: 1s}\n",
		env{"CONSOLE_ADDR": "0.0.0.0:8443"})
	require.NoError(t, err)
	require.Equal(t, ConsoleConfig{Listen: "0.0.0.0:8443", SessionTTL: 30 * time.Minute, SampleEvery: time.Second}, c.Console)
}

func TestConsoleMistakes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, path, msg string
		base                  string
	}{
		{name: "NoListen", yaml: "console: {session_ttl: 1h}", path: "console.listen", msg: "required"},
		{name: "EmptyListen", yaml: `console: {listen: ""}`, path: "console.listen", msg: "required"},
		{name: "BadListen", yaml: "console: {listen: localhost}", path: "console.listen", msg: `invalid address "localhost"`},
		{name: "SameAsAdmin", yaml: "console: {listen: 127.0.0.1:7070}", path: "console.listen", msg: "same address as admin.listen"},
		{name: "SameAsMetrics", yaml: "console: {listen: 127.0.0.1:9464}", path: "console.listen", msg: "same address as metrics.listen"},
		{name: "UnknownKey", yaml: "console: {listen: 127.0.0.1:7071, lisen: x}", path: "console.lisen", msg: "unknown key"},
		{name: "TTLTooShort", yaml: "console: {listen: 127.0.0.1:7071, session_ttl: 10ms}", path: "console.session_ttl", msg: "out of range, want 1s to 720h"},
		{name: "TTLBad", yaml: "console: {listen: 127.0.0.1:7071, session_ttl: soon}", path: "console.session_ttl", msg: `invalid duration "soon"`},
		{name: "SampleTooLong", yaml: "console: {listen: 127.0.0.1:7071, sample_every: 2m}", path: "console.sample_every", msg: "out of range"},
		{name: "NotAMapping", yaml: "console: 127.0.0.1:7071", path: "console", msg: "must be a mapping"},
		{
			name: "NoTokens", yaml: "console: {listen: 127.0.0.1:7071}", path: "console", msg: "needs at least one admin.tokens entry",
			base: strings.Replace(strings.Replace(baseYAML, `    - {name: ops, role: admin, token: "admin-token-0123456789"}`+"\n", "", 1),
				`    - {name: dash, role: read, token: "read-token-0123456789"}`+"\n", "", 1),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			base := baseYAML
			if tt.base != "" {
				base = strings.Replace(tt.base, "  tokens:\n", "", 1)
			}
			_, err := parseWith(t, base+tt.yaml+"\n", nil)
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "%v", ps)
			require.Equal(t, tt.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tt.msg)
		})
	}
}
