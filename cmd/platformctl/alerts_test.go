package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/require"
)

// TestAlertCommandsExist: every alert rule's `command` annotation
// (deploy/prometheus/alerts.yaml, the command that shows an alert's cause)
// is a platformctl command line that this platformctl accepts: an existing
// command, known flags, the right number of arguments.
func TestAlertCommandsExist(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	label := regexp.MustCompile(`\{\{ \$labels\.(\w+) \}\}`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			line := label.ReplaceAllString(r.Annotations["command"], "$1-value")
			args := strings.Fields(line)
			require.NotEmpty(t, args, r.Alert)
			require.Equal(t, "platformctl", args[0], r.Alert)
			root := newRootCmd(&app{getenv: func(string) string { return "" }})
			cmd, rest, err := root.Find(args[1:])
			require.NoError(t, err, "%s: %s", r.Alert, line)
			require.NotEqual(t, root, cmd, "%s: %q names no command", r.Alert, line)
			require.NoError(t, cmd.ParseFlags(rest), "%s: %s", r.Alert, line)
			require.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "%s: %s", r.Alert, line)
			require.True(t, cmd.Runnable(), "%s: %q is a group, not a command", r.Alert, line)
			n++
		}
	}
	require.Positive(t, n)
}
