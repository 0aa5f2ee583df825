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
	raw, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	path := standIn(t, dir, string(raw))

	cmd := exec.Command(analyze, "verify", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "systemd-analyze verify:\n%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warned")
}

// standIn writes the unit text to dir with the binary's path pointed at a
// stand-in executable, and returns the unit's path.
func standIn(t *testing.T, dir, unit string) string {
	t.Helper()
	bin := filepath.Join(dir, "platformd")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	path := filepath.Join(dir, unitFile)
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/bin/platformd", bin)), 0o644))
	return path
}

// securityThreshold is the highest exposure `systemd-analyze security`
// may give the unit, in its tenths: 2.0, the top of its "OK" band.
const securityThreshold = "20"

// TestSystemdAnalyzeSecurity scores the unit's hardening offline
// (systemd-analyze security --offline): exposure at most 2.0. The unit
// without its hardening block scores far worse, which proves the check.
func TestSystemdAnalyzeSecurity(t *testing.T) {
	t.Parallel()
	analyze := deploytest.Tool(t, "systemd-analyze", "Debian's systemd package ships it")
	raw, err := os.ReadFile(unitFile)
	require.NoError(t, err)
	score := func(unit string) (string, error) {
		dir := t.TempDir()
		cmd := exec.Command(analyze, "security", "--offline=true", "--threshold="+securityThreshold, standIn(t, dir, unit))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1], err
	}
	last, err := score(string(raw))
	require.NoError(t, err, "exposure above 2.0: %s", last)
	t.Log(last)

	hardening := strings.Index(string(raw), "# Hardening.")
	install := strings.Index(string(raw), "[Install]")
	require.Positive(t, hardening)
	require.Greater(t, install, hardening)
	weak := string(raw[:hardening]) + string(raw[install:])
	last, err = score(weak)
	require.Error(t, err, "the unit without hardening passed the threshold: %s", last)
}
