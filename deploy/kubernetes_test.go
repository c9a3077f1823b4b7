package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
)

// leaveBudget bounds leaving the cluster group after the streams stopped:
// cluster.Member.Run gives the release and the LeaveGroup request
// cluster.release_timeout plus 5 s together.
const leaveBudget = 5 * time.Second

// manifest is one of deploy/kubernetes/: a Deployment of pods that run the
// bridge, its ConfigMap and Secret, and a PodDisruptionBudget.
type manifest struct {
	// file is its name under deploy/kubernetes/.
	file string
	// containers is how many containers its pods have (the bridge, and an
	// application beside a sidecar).
	containers int
	// streams is how many streams its bridge.yaml configures.
	streams int
	// replicas is the Deployment's replica count.
	replicas int
}

// manifests are every Kubernetes example; TestYAMLFilesParse fails on a
// file that is not listed here.
var manifests = []manifest{
	{file: "sidecar.yaml", containers: 2, streams: 2, replicas: 3},
	{file: "cluster.yaml", containers: 1, streams: 4, replicas: 3},
}

// manifestSecrets are the BRIDGE_* variables the manifests take from their
// Secret.
func manifestSecrets() map[string]string {
	return map[string]string{
		"BRIDGE_AMP_TOKEN":                 "test-token",
		"BRIDGE_KAFKA_SASL_PASSWORD":       "test-password",
		"BRIDGE_CHECKPOINT_REDIS_PASSWORD": "test-password",
	}
}

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Spec       struct {
		Replicas        *int `yaml:"replicas"`
		MinReadySeconds int  `yaml:"minReadySeconds"`
		Strategy        struct {
			Type          string `yaml:"type"`
			RollingUpdate *struct {
				MaxSurge       yaml.Node `yaml:"maxSurge"`
				MaxUnavailable yaml.Node `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		// Selector is a Deployment's or a PodDisruptionBudget's.
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		// MaxUnavailable and MinAvailable are a PodDisruptionBudget's.
		MaxUnavailable yaml.Node `yaml:"maxUnavailable"`
		MinAvailable   yaml.Node `yaml:"minAvailable"`
		Template       struct {
			Metadata struct {
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container `yaml:"containers"`
				Volumes                       []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

// objects reads a manifest's objects by kind (one of each).
func (m manifest) objects(t *testing.T) map[string]k8sObject {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("kubernetes", m.file))
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	objs := map[string]k8sObject{}
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err, "kubernetes/%s", m.file)
		}
		require.NotContains(t, objs, o.Kind, "kubernetes/%s: two objects of kind %s", m.file, o.Kind)
		objs[o.Kind] = o
	}
	for _, kind := range []string{"ConfigMap", "Secret", "Deployment", "PodDisruptionBudget"} {
		require.Contains(t, objs, kind, "kubernetes/%s needs a %s", m.file, kind)
	}
	return objs
}

// loadConfig loads the ConfigMap's bridge.yaml with the bridge's own
// loader (config.LoadConfig: the file, then the BRIDGE_* variables env
// holds, then Validate), as `bridge run` does in the pod.
func loadConfig(t *testing.T, cm k8sObject, env map[string]string) (*config.Config, string, error) {
	t.Helper()
	text, ok := cm.Data["bridge.yaml"]
	require.True(t, ok, "ConfigMap %s has no bridge.yaml", cm.Metadata.Name)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	cfg, err := config.LoadConfig(path, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	return cfg, path, err
}

// intOrPercent reads a Kubernetes IntOrString of a count of replicas
// ("25%" rounds as the field's kind says: up for maxSurge, down for
// maxUnavailable); ok is false when the field is absent.
func intOrPercent(t *testing.T, n yaml.Node, replicas int, roundUp bool) (int, bool) {
	t.Helper()
	if n.Kind == 0 {
		return 0, false
	}
	if pct, isPct := strings.CutSuffix(n.Value, "%"); isPct {
		p, err := strconv.Atoi(pct)
		require.NoError(t, err, "percentage %q", n.Value)
		if roundUp {
			return (p*replicas + 99) / 100, true
		}
		return p * replicas / 100, true
	}
	v, err := strconv.Atoi(n.Value)
	require.NoError(t, err, "want a count or a percentage, got %q", n.Value)
	return v, true
}

// TestKubernetesManifests checks each manifest's objects against each
// other and against its bridge.yaml, loaded by the real config loader:
// several replicas need cluster mode, a rolling update that never stops a
// member before its replacement is ready, a PodDisruptionBudget on the
// same pods that lets one go at a time, and a termination grace period
// that covers the release of the streams and the leave.
func TestKubernetesManifests(t *testing.T) {
	for _, m := range manifests {
		t.Run(m.file, func(t *testing.T) {
			objs := m.objects(t)
			cm, secret, dep, pdb := objs["ConfigMap"], objs["Secret"], objs["Deployment"], objs["PodDisruptionBudget"]
			cfg, _, err := loadConfig(t, cm, manifestSecrets())
			require.NoError(t, err, "the ConfigMap's bridge.yaml does not load")

			require.NotNil(t, dep.Spec.Replicas)
			replicas := *dep.Spec.Replicas
			assert.Equal(t, m.replicas, replicas)
			if replicas > 1 {
				assert.True(t, cfg.Cluster.Enabled,
					"%d replicas with the same streams need cluster.enabled: without it they fence each other through the transactional ids", replicas)
			}
			if cfg.Cluster.Enabled {
				checkClusterRollout(t, dep, pdb, replicas, cfg)
			} else {
				require.Equal(t, 1, replicas, "without cluster mode only one replica may run the streams")
				assert.Equal(t, "Recreate", dep.Spec.Strategy.Type, "without cluster mode a rolling update runs two instances of the same stream ids")
			}
			checkBridgePod(t, m, cm, secret, dep, cfg)
		})
	}
}

// checkClusterRollout checks the Deployment's strategy, its
// PodDisruptionBudget and its grace period for cluster mode.
func checkClusterRollout(t *testing.T, dep, pdb k8sObject, replicas int, cfg *config.Config) {
	t.Helper()
	st := dep.Spec.Strategy
	assert.Equal(t, "RollingUpdate", st.Type, "cluster mode rolls pods one at a time: the others take the streams over")
	require.NotNil(t, st.RollingUpdate, "spell out rollingUpdate")
	unavailable, ok := intOrPercent(t, st.RollingUpdate.MaxUnavailable, replicas, false)
	assert.True(t, ok && unavailable == 0, "rollingUpdate.maxUnavailable: want 0, so a member stops only once its replacement is ready")
	surge, ok := intOrPercent(t, st.RollingUpdate.MaxSurge, replicas, true)
	assert.True(t, ok && surge >= 1, "rollingUpdate.maxSurge: want at least 1 (with maxUnavailable 0 the rollout cannot proceed otherwise)")
	assert.Positive(t, dep.Spec.MinReadySeconds, "minReadySeconds: a new member's first round may leave it briefly ready with nothing")

	// The PodDisruptionBudget selects the Deployment's pods and lets a
	// drain take one, but never all of them.
	require.NotEmpty(t, dep.Spec.Selector.MatchLabels)
	assert.Equal(t, dep.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels, "the PodDisruptionBudget must select the Deployment's pods")
	labels := dep.Spec.Template.Metadata.Labels
	for k, v := range dep.Spec.Selector.MatchLabels {
		assert.Equal(t, v, labels[k], "the pod template lacks the selector's label %s", k)
	}
	maxUn, hasMax := intOrPercent(t, pdb.Spec.MaxUnavailable, replicas, true)
	minAv, hasMin := intOrPercent(t, pdb.Spec.MinAvailable, replicas, true)
	require.NotEqual(t, hasMax, hasMin, "the PodDisruptionBudget needs exactly one of maxUnavailable and minAvailable")
	if hasMin {
		maxUn = replicas - minAv
	}
	assert.GreaterOrEqual(t, maxUn, 1, "the PodDisruptionBudget allows no disruption: node drains would block for ever")
	assert.Less(t, maxUn, replicas, "the PodDisruptionBudget lets a drain stop every member at once")

	// SIGTERM: the streams stop (each bounded by the stream's shutdown and
	// the member by cluster.release_timeout), the member leaves, the HTTP
	// server stops.
	pod := dep.Spec.Template.Spec
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	need := cfg.Cluster.ReleaseTimeout + shutdownBudget + leaveBudget + 10*time.Second
	assert.GreaterOrEqual(t, grace, need,
		"terminationGracePeriodSeconds must cover cluster.release_timeout (%s), a stream's shutdown and the HTTP stop (%s) and the leave (%s) with a margin",
		cfg.Cluster.ReleaseTimeout, shutdownBudget, leaveBudget)
	assert.Equal(t, config.StoreRedis, cfg.Checkpoint.Store, "the members share the checkpoints")
	assert.Empty(t, cfg.Cluster.InstanceID,
		"a Deployment's pods share one bridge.yaml: a static cluster.instance_id there would be every member's (set it per pod, from a StatefulSet's pod name)")
}

// checkBridgePod checks the pod that runs the bridge: command, probes,
// resources, secrets from the Secret, the config mounted where the
// command reads it, the HTTP address the probes reach.
func checkBridgePod(t *testing.T, m manifest, cm, secret, dep k8sObject, cfg *config.Config) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	assert.GreaterOrEqual(t, time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second, shutdownBudget+10*time.Second,
		"terminationGracePeriodSeconds must cover the graceful shutdown (%s) with a margin", shutdownBudget)

	ann := dep.Spec.Template.Metadata.Annotations
	assert.Equal(t, "true", ann["prometheus.io/scrape"])
	assert.Equal(t, strconv.Itoa(metricsPort), ann["prometheus.io/port"])
	assert.Equal(t, "/metrics", ann["prometheus.io/path"])

	require.Len(t, pod.Containers, m.containers)
	i := slices.IndexFunc(pod.Containers, func(c container) bool { return strings.HasPrefix(c.Image, "amp-kafka-bridge:") })
	require.GreaterOrEqual(t, i, 0, "no container runs the amp-kafka-bridge image")
	br := pod.Containers[i]
	assert.Equal(t, "amp-kafka-bridge:VERSION", br.Image)
	assert.Equal(t, []string{"bridge", "run", "-c", "/etc/bridge/bridge.yaml"}, append(slices.Clone(br.Command), br.Args...))

	ports := map[string]int{}
	for _, p := range br.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, pr := range map[string]*probe{"/livez": br.LivenessProbe, "/readyz": br.ReadinessProbe} {
		require.NotNil(t, pr, "probe on %s missing", name)
		require.NotNil(t, pr.HTTPGet, "probe on %s must be httpGet", name)
		assert.Equal(t, name, pr.HTTPGet.Path)
		port, err := strconv.Atoi(pr.HTTPGet.Port.Value)
		if err != nil {
			port = ports[pr.HTTPGet.Port.Value]
		}
		assert.Equal(t, metricsPort, port, "probe on %s: port %q", name, pr.HTTPGet.Port.Value)
	}

	for kind, res := range map[string]map[string]string{"requests": br.Resources.Requests, "limits": br.Resources.Limits} {
		assert.NotEmpty(t, res["cpu"], "bridge resources.%s.cpu", kind)
		assert.NotEmpty(t, res["memory"], "bridge resources.%s.memory", kind)
	}

	// Secrets come from the Secret through the environment, and each
	// referenced key exists.
	fromSecret := map[string]bool{}
	for _, e := range br.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		assert.Equal(t, secret.Metadata.Name, ref.Name, "env %s", e.Name)
		assert.Contains(t, secret.StringData, ref.Key, "env %s refers to a key the Secret lacks", e.Name)
		fromSecret[e.Name] = true
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(manifestSecrets())), slices.Collect(maps.Keys(fromSecret)),
		"the bridge's secrets must come from the Secret")
	assert.NotContains(t, cm.Data["bridge.yaml"], "password:", "no secret in the ConfigMap")

	// The config file is mounted where the command reads it.
	var cfgVolume string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == cm.Metadata.Name {
			cfgVolume = v.Name
		}
	}
	require.NotEmpty(t, cfgVolume, "no volume mounts the ConfigMap %s", cm.Metadata.Name)
	assert.True(t, slices.ContainsFunc(br.VolumeMounts, func(m struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	}) bool {
		return m.Name == cfgVolume && m.MountPath == "/etc/bridge"
	}), "the ConfigMap must be mounted at /etc/bridge")

	assert.Equal(t, fmt.Sprintf("0.0.0.0:%d", metricsPort), cfg.HTTP.Addr, "probes and Prometheus reach the pod IP")
	assert.Len(t, cfg.Streams, m.streams)
}

// TestKubernetesConfigsValidate loads each ConfigMap's bridge.yaml with
// the config loader and with `bridge validate`, and proves both refuse it
// without a secret the Secret provides.
func TestKubernetesConfigsValidate(t *testing.T) {
	for _, m := range manifests {
		t.Run(m.file, func(t *testing.T) {
			cm := m.objects(t)["ConfigMap"]
			secrets := manifestSecrets()
			_, path, err := loadConfig(t, cm, secrets)
			require.NoError(t, err, "config.LoadConfig rejected the ConfigMap's bridge.yaml")
			out, err := validate(t, path, secrets)
			require.NoError(t, err, "bridge validate rejected the ConfigMap's bridge.yaml:\n%s", out)
			assert.Contains(t, out, fmt.Sprintf("valid, %d stream(s)", m.streams))

			// The validation is real: without the SASL password from the
			// Secret the same file is refused, naming the key.
			delete(secrets, "BRIDGE_KAFKA_SASL_PASSWORD")
			_, _, err = loadConfig(t, cm, secrets)
			require.Error(t, err, "config.LoadConfig accepted SASL without a password")
			assert.Contains(t, err.Error(), "kafka.sasl")
			out, err = validate(t, path, secrets)
			require.Error(t, err, "validate accepted SASL without a password:\n%s", out)
			assert.Contains(t, out, "kafka.sasl")
		})
	}
}

// TestKubernetesManifestsListed keeps manifests equal to the files of
// deploy/kubernetes/, so a new example is checked too.
func TestKubernetesManifestsListed(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	require.NoError(t, err)
	var listed []string
	for _, m := range manifests {
		listed = append(listed, filepath.Join("kubernetes", m.file))
	}
	assert.ElementsMatch(t, files, listed)
}
