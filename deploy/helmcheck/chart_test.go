package helmcheck_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const chartDir = "../helm/platformd"

// valueSets are the configurations the chart must render cleanly: the
// defaults, and a test cluster's (one replica, no PDB, Secrets created).
var valueSets = map[string]map[string]any{
	"defaults": {},
	"dev": {
		"replicaCount":        1,
		"podDisruptionBudget": map[string]any{"enabled": false},
		"envSecret": map[string]any{"create": true, "data": map[string]any{
			"PLATFORMD_AMQP_URL": "amqp://guest:guest@rabbitmq:5672/",
			"PLATFORMD_STOCK_DB": "postgres://postgres@postgres:5432/stock",
		}},
		"tokenSecret":    map[string]any{"create": true, "data": map[string]any{"admin-token": "a", "read-token": "r"}},
		"serviceAccount": map[string]any{"create": false},
		"image":          map[string]any{"repository": "registry.example/platformd", "tag": "v1.2.3"},
	},
}

// TestHelmLint is `helm lint` with each value set: no warning or error.
func TestHelmLint(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			res := lint.RunAll(chartDir, vals, "platformd")
			for _, m := range res.Messages {
				t.Log(m.Error())
			}
			require.Less(t, res.HighestSeverity, support.WarningSev, "helm lint found problems")
		})
	}
}

// render is `helm template platformd deploy/helm/platformd -n ops` with
// vals, keyed by template path.
func render(t *testing.T, vals map[string]any) map[string]string {
	t.Helper()
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	rv, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{
		Name: "platformd", Namespace: "ops", Revision: 1, IsInstall: true,
	}, common.DefaultCapabilities)
	require.NoError(t, err)
	out, err := engine.Render(ch, rv)
	require.NoError(t, err)
	return out
}

// manifests is the rendered chart's objects, strictly decoded.
type manifests struct {
	deployment *appsv1.Deployment
	configMap  *corev1.ConfigMap
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	secrets    []*corev1.Secret
	accounts   []*corev1.ServiceAccount
}

// decodeStrict decodes one manifest into its typed struct, refusing
// unknown fields (what kubeconform's strict mode would refuse).
func decodeStrict(doc string, m *manifests) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return fmt.Errorf("error reading kind: %w", err)
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		m.deployment = &appsv1.Deployment{}
		obj = m.deployment
	case "v1/ConfigMap":
		m.configMap = &corev1.ConfigMap{}
		obj = m.configMap
	case "v1/Service":
		m.service = &corev1.Service{}
		obj = m.service
	case "policy/v1/PodDisruptionBudget":
		m.pdb = &policyv1.PodDisruptionBudget{}
		obj = m.pdb
	case "v1/Secret":
		s := &corev1.Secret{}
		m.secrets = append(m.secrets, s)
		obj = s
	case "v1/ServiceAccount":
		s := &corev1.ServiceAccount{}
		m.accounts = append(m.accounts, s)
		obj = s
	default:
		return fmt.Errorf("unexpected kind %s/%s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return fmt.Errorf("%s: %w", tm.Kind, err)
	}
	om := obj.(metav1.ObjectMetaAccessor).GetObjectMeta()
	if errs := validation.IsDNS1123Subdomain(om.GetName()); len(errs) > 0 {
		return fmt.Errorf("%s name %q: %v", tm.Kind, om.GetName(), errs)
	}
	for k, v := range om.GetLabels() {
		if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
			return fmt.Errorf("%s label %s=%s: %v", tm.Kind, k, v, errs)
		}
	}
	return nil
}

func decodeAll(t *testing.T, files map[string]string) *manifests {
	t.Helper()
	m := &manifests{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if filepath.Ext(name) != ".yaml" {
			continue
		}
		for doc := range strings.SplitSeq(files[name], "\n---") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			require.NoError(t, decodeStrict(doc, m), "%s", name)
		}
	}
	return m
}

// TestHelmTemplate renders each value set and checks the objects against
// the Kubernetes API types and against what the issue asks of the chart.
func TestHelmTemplate(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			m := decodeAll(t, render(t, vals))
			require.NotNil(t, m.deployment)
			require.NotNil(t, m.configMap)
			require.NotNil(t, m.service)

			// Config as a ConfigMap, mounted where the image's command reads it.
			var cfg struct {
				Admin struct {
					Listen string `json:"listen"`
					Tokens []struct {
						Token     string `json:"token"`
						TokenFile string `json:"token_file"`
					} `json:"tokens"`
				} `json:"admin"`
				Metrics struct {
					Listen string `json:"listen"`
				} `json:"metrics"`
				Broker struct {
					URL string `json:"url"`
				} `json:"broker"`
				Services []struct {
					Database string `json:"database"`
				} `json:"services"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(m.configMap.Data["platformd.yaml"]), &cfg))
			// Secrets stay out of the ConfigMap: tokens are files, DSNs ${VAR}.
			require.NotEmpty(t, cfg.Admin.Tokens)
			for _, tok := range cfg.Admin.Tokens {
				require.Empty(t, tok.Token, "a token in the ConfigMap")
				require.True(t, strings.HasPrefix(tok.TokenFile, "/etc/platformd/tokens/"), tok.TokenFile)
			}
			require.True(t, strings.HasPrefix(cfg.Broker.URL, "${"), "broker URL from the Secret's env")
			for _, s := range cfg.Services {
				require.True(t, strings.HasPrefix(s.Database, "${"), "DSN from the Secret's env")
			}

			d := m.deployment
			pod := d.Spec.Template
			require.Len(t, pod.Spec.Containers, 1)
			c := pod.Spec.Containers[0]
			require.Equal(t, []string{"run", "-config", "/etc/platformd/platformd.yaml"}, c.Args)
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			require.True(t, strings.HasSuffix(cfg.Admin.Listen, fmt.Sprintf(":%d", ports["grpc-admin"])), "admin.listen matches the port")
			require.True(t, strings.HasSuffix(cfg.Metrics.Listen, fmt.Sprintf(":%d", ports["metrics"])), "metrics.listen matches the port")

			// Probes on grpc.health.v1 at the admin port.
			for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
				require.NotNil(t, p)
				require.NotNil(t, p.GRPC, "gRPC health probe")
				require.Equal(t, ports["grpc-admin"], p.GRPC.Port)
			}
			// Metrics port annotated on the pod and the Service.
			for _, ann := range []map[string]string{pod.Annotations, m.service.Annotations} {
				require.Equal(t, "true", ann["prometheus.io/scrape"])
				require.Equal(t, fmt.Sprint(ports["metrics"]), ann["prometheus.io/port"])
			}
			require.NotEmpty(t, pod.Annotations["checksum/config"])
			// Resources.
			require.False(t, c.Resources.Requests.Cpu().IsZero())
			require.False(t, c.Resources.Requests.Memory().IsZero())
			require.False(t, c.Resources.Limits.Memory().IsZero())
			// Non-root, read-only, no capabilities.
			require.True(t, *pod.Spec.SecurityContext.RunAsNonRoot)
			require.Equal(t, int64(65532), *pod.Spec.SecurityContext.RunAsUser)
			require.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
			require.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
			require.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
			// Env from the env Secret, tokens mounted from the token Secret.
			require.Len(t, c.EnvFrom, 1)
			envSecret := c.EnvFrom[0].SecretRef.Name
			mounts := map[string]string{}
			for _, vm := range c.VolumeMounts {
				mounts[vm.Name] = vm.MountPath
			}
			require.Equal(t, "/etc/platformd/platformd.yaml", mounts["config"])
			require.Equal(t, "/etc/platformd/tokens", mounts["tokens"])
			// The services' migration files beside the config, where its
			// relative `migrations: migrations/<service>` points.
			require.Equal(t, "/etc/platformd/migrations", mounts["migrations"])
			var tokenSecret string
			for _, v := range pod.Spec.Volumes {
				switch v.Name {
				case "config":
					require.Equal(t, m.configMap.Name, v.ConfigMap.Name)
				case "tokens":
					tokenSecret = v.Secret.SecretName
				}
			}
			// The Service and the PDB select the Deployment's pods.
			sel, err := metav1.LabelSelectorAsMap(d.Spec.Selector)
			require.NoError(t, err)
			for k, v := range sel {
				require.Equal(t, v, pod.Labels[k])
			}
			require.Equal(t, sel, m.service.Spec.Selector)

			if name == "dev" {
				require.Equal(t, int32(1), *d.Spec.Replicas)
				require.Nil(t, m.pdb, "PDB disabled")
				require.Equal(t, "registry.example/platformd:v1.2.3", c.Image)
				names := []string{}
				for _, s := range m.secrets {
					names = append(names, s.Name)
				}
				require.ElementsMatch(t, []string{envSecret, tokenSecret}, names)
				require.Empty(t, m.accounts)
				return
			}
			require.Equal(t, int32(2), *d.Spec.Replicas)
			require.NotNil(t, m.pdb, "a PodDisruptionBudget")
			pdbSel, err := metav1.LabelSelectorAsMap(m.pdb.Spec.Selector)
			require.NoError(t, err)
			require.Equal(t, sel, pdbSel)
			require.Equal(t, 1, m.pdb.Spec.MaxUnavailable.IntValue())
			require.Empty(t, m.secrets, "production values reference existing Secrets")
			require.Len(t, m.accounts, 1)
		})
	}
}

// TestStrictDecodeRejects proves the schema check bites: a misspelt field
// or a wrong type in a manifest fails, as kubeconform -strict would.
func TestStrictDecodeRejects(t *testing.T) {
	files := render(t, map[string]any{})
	dep := files["platformd/templates/deployment.yaml"]
	require.NotEmpty(t, dep)
	require.NoError(t, decodeStrict(dep, &manifests{}))
	misspelt := strings.Replace(dep, "readinessProbe:", "readinesProbe:", 1)
	require.ErrorContains(t, decodeStrict(misspelt, &manifests{}), "readinesProbe")
	wrongType := strings.Replace(dep, "terminationGracePeriodSeconds: 60", "terminationGracePeriodSeconds: soon", 1)
	require.Error(t, decodeStrict(wrongType, &manifests{}))
	badName := strings.Replace(dep, "name: platformd\n", "name: Platform_D\n", 1)
	require.Error(t, decodeStrict(badName, &manifests{}))
}

// TestValuesSchema: values.schema.json refuses a mistyped value, in lint
// and at render (helm install/template), offline.
func TestValuesSchema(t *testing.T) {
	bad := map[string]any{"replicaCount": "two", "ports": map[string]any{"admin": 70000}}
	res := lint.RunAll(chartDir, bad, "platformd")
	require.GreaterOrEqual(t, res.HighestSeverity, support.ErrorSev, "lint accepted %v", bad)
	ch, err := loader.Load(chartDir)
	require.NoError(t, err)
	_, err = util.ToRenderValues(ch, bad, common.ReleaseOptions{Name: "platformd", Namespace: "ops"}, common.DefaultCapabilities)
	require.ErrorContains(t, err, "replicaCount")
}
