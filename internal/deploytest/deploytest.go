// Package deploytest holds what the tests of deploy/ share: finding the
// external tools they run (promtool, systemd-analyze), which a developer's
// machine may lack but `make test` must have.
package deploytest

import (
	"os"
	"os/exec"
	"testing"
)

// RequireEnv is the environment variable that turns a missing tool from a
// skip into a failure. The Makefile's `unit` target sets it, after
// scripts/services.sh installed the tools, so that CI never passes by
// skipping.
const RequireEnv = "PLATFORMD_REQUIRE_DEPLOY_TOOLS"

// Tool returns the path of the named executable. When it is not on PATH,
// the test is skipped with why, or fails when RequireEnv is "1".
func Tool(t testing.TB, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s not found (%v) and %s=1: %s", name, err, RequireEnv, why)
	}
	t.Skipf("%s not found (%v): %s", name, err, why)
	return ""
}
