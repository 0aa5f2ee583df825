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
// Secret gives, the token files its token Secret mounts and the migration
// files its ConfigMap mounts, each laid out where the pod sees it. The
// binary is the release one, as in the image: the chart's handlers must be
// ones it can run.
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
			// The pod's /etc/platformd: the config, and the ConfigMap's
			// files its volumes project below it.
			root := filepath.Join(dir, name)
			path := filepath.Join(root, "etc", "platformd", "platformd.yaml")
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
			require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
			require.Positive(t, writeProjected(t, root, m), "the chart mounts its migration files")
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

// writeProjected writes under root the files that the Deployment's
// ConfigMap volumes with items project (path by path, as the kubelet
// does), and returns how many.
func writeProjected(t *testing.T, root string, m *manifests) int {
	t.Helper()
	pod := m.deployment.Spec.Template.Spec
	mounts := map[string]string{}
	for _, vm := range pod.Containers[0].VolumeMounts {
		if vm.SubPath == "" {
			mounts[vm.Name] = vm.MountPath
		}
	}
	n := 0
	for _, v := range pod.Volumes {
		if v.ConfigMap == nil || len(v.ConfigMap.Items) == 0 {
			continue
		}
		require.Equal(t, m.configMap.Name, v.ConfigMap.Name)
		at, ok := mounts[v.Name]
		require.True(t, ok, "volume %s is mounted", v.Name)
		for _, it := range v.ConfigMap.Items {
			data, ok := m.configMap.Data[it.Key]
			require.True(t, ok, "ConfigMap key %s", it.Key)
			p := filepath.Join(root, at, it.Path)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
			require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
			n++
		}
	}
	return n
}
