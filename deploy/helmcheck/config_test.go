package helmcheck_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChartConfigIsValid: the platformd.yaml the chart mounts is one
// platformd accepts (`platformd check`), with the environment its env
// Secret gives and the token files its token Secret mounts.
func TestChartConfigIsValid(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "platformd")
	build := exec.Command("go", "build", "-C", "../..", "-o", bin, "./cmd/platformd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as the image's binary; shares the suite's other builds' compile
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	dev := valueSets["dev"]
	env := dev["envSecret"].(map[string]any)["data"].(map[string]any)
	tokens := dev["tokenSecret"].(map[string]any)["data"].(map[string]any)
	tokenDir := filepath.Join(dir, "tokens")
	require.NoError(t, os.Mkdir(tokenDir, 0o700))
	for k := range tokens {
		// Real tokens: long enough for platformd's minimum.
		require.NoError(t, os.WriteFile(filepath.Join(tokenDir, k), []byte(strings.Repeat(k, 8)), 0o600))
	}
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			m := decodeAll(t, render(t, vals))
			cfg := strings.ReplaceAll(m.configMap.Data["platformd.yaml"], "/etc/platformd/tokens/", tokenDir+"/")
			path := filepath.Join(dir, name+".yaml")
			require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
			cmd := exec.Command(bin, "check", "-config", path)
			cmd.Env = os.Environ()
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v.(string))
			}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "platformd check of the chart's config:\n%s\n%s", out, cfg)
		})
	}
}
