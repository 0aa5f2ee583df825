package prometheus_test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/deploytest"
)

const promtoolWhy = "Debian's prometheus package ships it; scripts/services.sh installs it"

// TestPromtoolCheckRules: alerts.yaml is valid Prometheus rule syntax.
func TestPromtoolCheckRules(t *testing.T) {
	t.Parallel()
	promtool := deploytest.Tool(t, "promtool", promtoolWhy)
	out, err := exec.Command(promtool, "check", "rules", "alerts.yaml").CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s", out)
}

// TestPromtoolTestRules runs alerts_test.yaml: every alert fires when it
// should and stays silent when it should not.
func TestPromtoolTestRules(t *testing.T) {
	t.Parallel()
	promtool := deploytest.Tool(t, "promtool", promtoolWhy)
	out, err := exec.Command(promtool, "test", "rules", "alerts_test.yaml").CombinedOutput()
	require.NoError(t, err, "promtool test rules:\n%s", out)
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type testFile struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestAlertsCarryRunbooks: every alert has a severity, a summary, a remedy
// and the platformctl command that shows its cause, and alerts_test.yaml
// both fires it and keeps it silent at least once.
func TestAlertsCarryRunbooks(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("alerts.yaml")
	require.NoError(t, err)
	var rules ruleFile
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	raw, err = os.ReadFile("alerts_test.yaml")
	require.NoError(t, err)
	var tests testFile
	require.NoError(t, yaml.Unmarshal(raw, &tests))

	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s: severity", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
			require.NotEmpty(t, r.Annotations["remedy"], "%s: remedy", r.Alert)
			require.True(t, strings.HasPrefix(r.Annotations["command"], "platformctl "),
				"%s: annotation command must be a platformctl command, got %q", r.Alert, r.Annotations["command"])
			require.True(t, fires[r.Alert], "%s: no test case where it fires", r.Alert)
			require.True(t, silent[r.Alert], "%s: no test case where it stays silent", r.Alert)
		}
	}
	require.GreaterOrEqual(t, len(names), 11, "the issue lists eleven alerts")
	for n := range fires {
		require.True(t, slices.Contains(names, n), "alerts_test.yaml tests an unknown alert %s", n)
	}
}
