package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/deploytest"
)

const unitFile = "platformd.service"

// directives reads the unit's Key=Value lines (the last one wins, as in
// systemd, except for keys that accumulate, which the test does not read).
func directives(t *testing.T) map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	d := map[string][]string{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "not Key=Value: %q", line)
		d[k] = append(d[k], v)
	}
	return d
}

// TestUnitContract: the unit runs the daemon the way the image does, sends
// SIGHUP on reload (live reload), and keeps the hardening the issue asks for.
func TestUnitContract(t *testing.T) {
	t.Parallel()
	d := directives(t)
	want := map[string]string{
		"Type":                  "exec",
		"ExecStart":             "/usr/bin/platformd run -config /etc/platformd/platformd.yaml",
		"ExecReload":            "/bin/kill -HUP $MAINPID",
		"DynamicUser":           "yes",
		"ProtectSystem":         "strict",
		"NoNewPrivileges":       "yes",
		"CapabilityBoundingSet": "",
		"AmbientCapabilities":   "",
		"ProtectHome":           "yes",
		"PrivateTmp":            "yes",
		"RestrictSUIDSGID":      "yes",
	}
	for k, v := range want {
		require.Contains(t, d, k, "directive %s missing", k)
		require.Equal(t, v, d[k][len(d[k])-1], "directive %s", k)
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on the unit, with
// the binary's path pointed at a stand-in executable (verify checks that
// every command exists). Any warning fails: verify exits 0 on an unknown
// directive and only says so on stderr.
func TestSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	analyze := deploytest.Tool(t, "systemd-analyze", "Debian's systemd package ships it")
	dir := t.TempDir()
	bin := filepath.Join(dir, "platformd")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	raw, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	unit := strings.ReplaceAll(string(raw), "/usr/bin/platformd", bin)
	path := filepath.Join(dir, unitFile)
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))

	cmd := exec.Command(analyze, "verify", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify:\n%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warned")
}
