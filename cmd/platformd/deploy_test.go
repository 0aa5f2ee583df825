package main_test

import (
	"bufio"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/testdb"
	"github.com/platformd/platformd/internal/testenv"
)

// notDaemonMetrics are names a query may use that platformd itself does not
// export: `up` is Prometheus' own per target.
var notDaemonMetrics = map[string]string{
	"up": "Prometheus' scrape health series",
}

// notDaemonLabels are the label names of notDaemonMetrics' families (none:
// `up` has only the target's labels).
var notDaemonLabels = map[string][]string{}

// targetLabels are added by Prometheus to every series it scrapes.
var targetLabels = []string{"instance", "job"}

var (
	promqlIdent = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// promqlWords are PromQL's keywords and the names that are not series.
	promqlWords = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true,
		// aggregation operators, which may be followed by by/without
		// before their "(".
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
		"limitk": true, "limit_ratio": true,
	}
	grouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// promqlSelector is a metric name in a PromQL expression and the label
// names its {...} matchers use.
type promqlSelector struct {
	name   string
	labels []string
}

var promqlMatcher = regexp.MustCompile("([a-zA-Z_][a-zA-Z0-9_]*)\\s*(?:=~|!~|!=|=)\\s*[\"'`]")

// promqlMetricNames returns the metric names a PromQL expression selects.
func promqlMetricNames(expr string) []string {
	var names []string
	for _, s := range promqlSelectors(expr) {
		names = append(names, s.name)
	}
	return names
}

// promqlSelectors returns the metric selectors of a PromQL expression.
// A tokenizer, not a parser (Prometheus' parser would bring the prometheus
// module, all of it, into the product's go.mod): it drops strings, label
// matchers {..}, ranges [..], numbers and $variables, the label lists of
// by/without/on/ignoring/group_*, keywords and function names (an
// identifier followed by "("); what is left are metric names.
func promqlSelectors(expr string) []promqlSelector {
	var names []promqlSelector
	skipTo := func(i int, open, closing byte) int {
		depth := 0
		for ; i < len(expr); i++ {
			switch expr[i] {
			case '"', '\'', '`':
				q := expr[i]
				for i++; i < len(expr) && expr[i] != q; i++ {
					if expr[i] == '\\' {
						i++
					}
				}
			case open:
				depth++
			case closing:
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	nextNonSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '{':
			i = skipTo(i, '{', '}')
		case c == '[':
			i = skipTo(i, '[', ']')
		case c == '$':
			i++
			for i < len(expr) && (expr[i] == '_' || expr[i] == '{' || expr[i] == '}' || promqlIdent.MatchString(expr[i:i+1]) || (expr[i] >= '0' && expr[i] <= '9')) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (promqlIdent.MatchString(expr[i:i+1]) || expr[i] == '.' || (expr[i] >= '0' && expr[i] <= '9')) {
				i++
			}
		default:
			id := promqlIdent.FindString(expr[i:])
			if id == "" {
				i++
				continue
			}
			i += len(id)
			j := nextNonSpace(i)
			switch {
			case grouping[id]:
				if j < len(expr) && expr[j] == '(' {
					i = skipTo(j, '(', ')')
				}
			case promqlWords[id]:
			case j < len(expr) && expr[j] == '(':
				// a function or an aggregation
			default:
				sel := promqlSelector{name: id}
				if j < len(expr) && expr[j] == '{' {
					end := skipTo(j, '{', '}')
					for _, m := range promqlMatcher.FindAllStringSubmatch(expr[j:end], -1) {
						sel.labels = append(sel.labels, m[1])
					}
					i = end
				}
				names = append(names, sel)
			}
		}
	}
	return names
}

func TestPromqlMetricNames(t *testing.T) {
	t.Parallel()
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (le, pool) (rate(platformd_batch_duration_seconds_bucket{service=~"$service",pool="a{b}"}[$__rate_interval])))`: {"platformd_batch_duration_seconds_bucket"},
		`time() - max by (service) (x_seconds{a="1"}) > 7200`:                                {"x_seconds"},
		`a / on (pool) group_left (service) b unless ignoring(x) c offset 5m`:                {"a", "b", "c"},
		`sum(rate(m_sum[5m])) / sum(rate(m_count[5m])) > 1e3 and bool up == 0`:               {"m_sum", "m_count", "up"},
		`max by (node) (platformd_broker_connected) == 0`:                                    {"platformd_broker_connected"},
		`absent(up{job="platformd"})`:                                                        {"up"},
		`label_values(platformd_pool_in_flight{service=~"$service"}, pool)`:                  {"platformd_pool_in_flight", "pool"},
		`process_resident_memory_bytes{job="platformd",instance=~"$instance"} / 1e6`:         {"process_resident_memory_bytes"},
		"sum without (instance) (platformd_messages_total{outcome=\"retried\"})\n  / sum(x)": {"platformd_messages_total", "x"},
	} {
		require.Equal(t, want, promqlMetricNames(expr), expr)
	}
	require.Equal(t, []promqlSelector{
		{name: "a", labels: []string{"service", "pool", "outcome"}},
		{name: "b"},
	}, promqlSelectors(`sum by (pool) (rate(a{service=~"$s", pool = "x,y=\"z\"", outcome!='retried'}[5m])) / on(pool) b`))
}

// dashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets and the template variables' label_values(...) metric.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/grafana/platformd.json")
	require.NoError(t, err)
	var dash any
	require.NoError(t, json.Unmarshal(raw, &dash))
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			if d, ok := v["definition"].(string); ok {
				// label_values(metric{...}, label): only the first argument
				// is a selector.
				inner := strings.TrimSuffix(strings.TrimPrefix(d, "label_values("), ")")
				if i := strings.LastIndex(inner, ","); i >= 0 {
					inner = inner[:i]
				}
				exprs = append(exprs, inner)
			}
			for _, k := range slices.Sorted(maps.Keys(v)) {
				walk(v[k])
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	return exprs
}

// alertQueries returns every alert's expression of alerts.yaml.
func alertQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	require.NoError(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &rules))
	var exprs []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

// seriesNames expands a family to the series names a query sees.
func seriesNames(family, typ string, into map[string]bool) {
	into[family] = true
	if typ == "histogram" || typ == "summary" {
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			into[family+s] = true
		}
	}
}

// registeredFamilies are the families metrics.New declares, whether used
// yet or not (a vector appears on /metrics only after its first use), as
// series name -> label names.
func registeredFamilies(t *testing.T) map[string][]string {
	t.Helper()
	fq := regexp.MustCompile(`fqName: "([^"]+)".*constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}`)
	out := map[string][]string{}
	collectorType := reflect.TypeFor[prometheus.Collector]()
	var visit func(v reflect.Value)
	visit = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			if f.Kind() == reflect.Struct {
				visit(f)
				continue
			}
			if !f.Type().Implements(collectorType) || f.IsNil() {
				continue
			}
			typ := ""
			if _, ok := f.Interface().(*prometheus.HistogramVec); ok {
				typ = "histogram"
			}
			ch := make(chan *prometheus.Desc, 16)
			go func() { f.Interface().(prometheus.Collector).Describe(ch); close(ch) }()
			for d := range ch {
				m := fq.FindStringSubmatch(d.String())
				require.NotNil(t, m, d.String())
				var labels []string
				for _, l := range strings.Split(m[2], ",") {
					if k, _, ok := strings.Cut(l, "="); ok {
						labels = append(labels, k)
					}
				}
				for _, l := range strings.Split(m[3], ",") {
					if l != "" {
						labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
					}
				}
				series := map[string]bool{}
				seriesNames(m[1], typ, series)
				for n := range series {
					out[n] = labels
					if strings.HasSuffix(n, "_bucket") {
						out[n] = append(slices.Clone(labels), "le")
					}
				}
			}
		}
	}
	visit(reflect.ValueOf(*metrics.New()))
	return out
}

// TestDeployMetricNames runs a daemon, drives messages, a duplicate, a
// purge and a reload through it, and checks that every metric name the
// Grafana dashboard and the alert rules query is one platformd exports:
// on its live /metrics, or (for a vector not used yet) declared by
// internal/metrics; and that every label a selector matches on is one of
// that family's (or a target label Prometheus adds). The daemon is the
// release binary, the one the deploy artifacts run, with the shop's
// effects as SQL handlers.
func TestDeployMetricNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := e.start(t, e.sqlConfig(t))
	e.publishOrders(t, 6, 2)
	cli, ctx := adminClient(t, e.adminAddr, adminToken)
	_, err := cli.RunPurge(ctx, &adminv1.RunPurgeRequest{Service: "stock"})
	require.NoError(t, err)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))

	scrape := func() (map[string]bool, string) {
		resp, err := http.Get("http://" + e.metrics + "/metrics")
		if err != nil {
			return nil, err.Error()
		}
		defer resp.Body.Close()
		live := map[string]bool{}
		var text strings.Builder
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			text.WriteString(line + "\n")
			if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				seriesNames(f[2], f[3], live)
			}
		}
		return live, text.String()
	}
	var live map[string]bool
	var text string
	require.Eventually(t, func() bool {
		live, text = scrape()
		return strings.Contains(text, `platformd_messages_total{outcome="processed",pool="stock-events-`+e.suffix+`",service="stock"} `) &&
			live["platformd_duplicates_total"] && live["platformd_purge_rows_deleted_total"] && live["platformd_config_reloads_total"]
	}, 30*time.Second, 100*time.Millisecond, "metrics never showed the messages, a duplicate, the purge and the reload:\n%s\n%s", text, d.stderr)

	registered := registeredFamilies(t)
	var fromRegistry []string
	check := func(source string, exprs []string) {
		require.NotEmpty(t, exprs, source)
		for _, expr := range exprs {
			sels := promqlSelectors(expr)
			require.NotEmpty(t, sels, "%s: a query with no metric: %s", source, expr)
			for _, sel := range sels {
				n := sel.name
				switch {
				case live[n]:
				case registered[n] != nil:
					fromRegistry = append(fromRegistry, n)
				case notDaemonMetrics[n] != "":
				default:
					t.Errorf("%s queries %q, which platformd does not export (query: %s)", source, n, expr)
					continue
				}
				// The matchers name labels the family has.
				known := registered[n]
				if known == nil {
					known = notDaemonLabels[n]
				}
				if known == nil {
					continue // Go and process collectors, up: not platformd's labels
				}
				for _, l := range sel.labels {
					if !slices.Contains(known, l) && !slices.Contains(targetLabels, l) {
						t.Errorf("%s matches label %q of %s, which has %v (query: %s)", source, l, n, known, expr)
					}
				}
			}
		}
	}
	check("deploy/grafana/platformd.json", dashboardQueries(t))
	check("deploy/prometheus/alerts.yaml", alertQueries(t))
	slices.Sort(fromRegistry)
	t.Logf("declared by internal/metrics, not used yet on the live daemon: %v", slices.Compact(fromRegistry))
}

// TestDashboardCovers: the dashboard shows what the issue lists
// (throughput by outcome, duplicates by source, batch size and latency,
// pool states, outbox, purge, reloads, conflicts), and its panels have
// unique ids.
func TestDashboardCovers(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	for _, e := range dashboardQueries(t) {
		for _, n := range promqlMetricNames(e) {
			used[n] = true
		}
	}
	for _, n := range []string{
		"platformd_messages_total", "platformd_duplicates_total", "platformd_batch_size_bucket",
		"platformd_batch_duration_seconds_bucket", "platformd_pool_paused", "platformd_pool_in_flight",
		"platformd_outbox_pending", "platformd_outbox_oldest_seconds", "platformd_purge_rows_deleted_total",
		"platformd_purge_last_success_timestamp_seconds", "platformd_config_reloads_total", "platformd_tx_conflicts_total",
		"platformd_queue_messages_ready",
	} {
		require.True(t, used[n], "the dashboard does not show %s", n)
	}
	raw, err := os.ReadFile("../../deploy/grafana/platformd.json")
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID int `json:"id"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "platformd", dash.UID)
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
	}
}

// The Helm chart's sample config is one the release binary runs: with its
// migration files laid out as the chart mounts them
// (/etc/platformd/migrations/<service>/<file>, next to the config), the
// release binary's migrate applies them to an empty service database and
// prepares the sample's SQL handlers against it. (The chart's rendering and
// `check` are deploy/helmcheck's; this is the part that needs PostgreSQL.)
func TestHelmSampleMigratesOnTheReleaseBinary(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/helm/platformd/values.yaml")
	require.NoError(t, err)
	var values struct {
		Config     map[string]any               `yaml:"config"`
		Migrations map[string]map[string]string `yaml:"migrations"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &values))
	require.NotEmpty(t, values.Migrations)

	etc := filepath.Join(t.TempDir(), "etc", "platformd")
	for service, files := range values.Migrations {
		require.NoError(t, os.MkdirAll(filepath.Join(etc, "migrations", service), 0o700))
		for name, text := range files {
			require.NoError(t, os.WriteFile(filepath.Join(etc, "migrations", service, name), []byte(text), 0o600))
		}
	}
	tokens := filepath.Join(etc, "tokens")
	require.NoError(t, os.MkdirAll(tokens, 0o700))
	for _, name := range []string{"admin-token", "read-token"} {
		require.NoError(t, os.WriteFile(filepath.Join(tokens, name), []byte(strings.Repeat(name, 4)), 0o600))
	}
	cfg, err := yaml.Marshal(values.Config)
	require.NoError(t, err)
	path := filepath.Join(etc, "platformd.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(string(cfg), "/etc/platformd/tokens/", tokens+"/")), 0o600))

	dsn := testdb.New(t, "e2e_helm_stock")
	cmd := exec.Command(binary, "migrate", "-config", path)
	cmd.Env = append(os.Environ(), "PLATFORMD_STOCK_DB="+dsn, "PLATFORMD_AMQP_URL="+testenv.AMQPURL())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "release binary, migrate of the chart's sample:\n%s", out)
	require.Zero(t, count(t, dsn, `SELECT count(*) FROM reservation`), "the chart's migration made the sample's table")
}
