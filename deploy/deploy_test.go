// Package deploy_test checks the deployment files under deploy/: the
// Kubernetes manifests (kubernetes_test.go), the systemd unit, the Prometheus
// alert rules and the Grafana dashboard. Every YAML and JSON file must parse,
// each ConfigMap's bridge.yaml must load with the bridge's config loader and
// pass `bridge validate`, and every metric name used by the
// alerts and the dashboard must be one the bridge really exports (read from
// the Go sources of cmd/bridge and sink, and from franz-go's kprom and
// client_golang's collectors in the module cache).
package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"gopkg.in/yaml.v3"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/cluster"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

const (
	// shutdownBudget is the longest graceful shutdown of `bridge run`:
	// streamRunner.shutdown bounds the commit or abort and the checkpoint
	// write with 30 s, then the HTTP server gets 5 s.
	shutdownBudget = 35 * time.Second
	bridgeJob      = `job="amp-kafka-bridge"`
	metricsPort    = 9464
)

// repoRoot is the module root (the tests run in deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"), "the deploy tests must run inside the module")
	return root
}

// decodeAll decodes every document of a multi-document YAML stream.
func decodeAll(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "parsing %s (document %d)", path, len(docs)+1)
		if doc != nil {
			docs = append(docs, doc)
		}
	}
	require.NotEmpty(t, docs, "%s has no YAML document", path)
	return docs
}

func TestYAMLFilesParse(t *testing.T) {
	var files []string
	for _, dir := range []string{"kubernetes", "prometheus"} {
		require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return err
		}))
	}
	require.ElementsMatch(t, []string{
		filepath.Join("kubernetes", "cluster.yaml"),
		filepath.Join("kubernetes", "sidecar.yaml"),
		filepath.Join("prometheus", "alerts.yaml"),
		filepath.Join("prometheus", "alerts_test.yaml"),
	}, files)
	for _, f := range files {
		t.Run(f, func(t *testing.T) { decodeAll(t, f) })
	}
}

// ---- the bridge binary ---------------------------------------------------

var (
	buildOnce sync.Once
	bridgeBin string
	buildErr  error
)

// bridgeBinary builds cmd/bridge once per test run.
func bridgeBinary(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "deploy-test-bridge-")
		if err != nil {
			buildErr = err
			return
		}
		bridgeBin = filepath.Join(dir, "bridge")
		cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bridgeBin, "./cmd/bridge")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building ./cmd/bridge: %w\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return bridgeBin
}

// validate runs `bridge validate -c path` with only the given BRIDGE_*
// variables (the caller's BRIDGE_* are removed).
func validate(t *testing.T, path string, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bridgeBinary(t), "validate", "-c", path)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BRIDGE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// ---- systemd -------------------------------------------------------------

// unitKeys reads a systemd unit into section -> key -> values.
func unitKeys(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = strings.Trim(line, "[]")
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s:%d: not key=value: %q", path, n, line)
			require.NotEmpty(t, section, "%s:%d: key outside a section", path, n)
			out[section][k] = append(out[section][k], v)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("systemd", "amp-kafka-bridge.service")
	u := unitKeys(t, path)
	svc := u["Service"]
	require.NotNil(t, svc, "no [Service] section")
	want := map[string]string{
		"Restart":         "on-failure",
		"KillSignal":      "SIGTERM",
		"NoNewPrivileges": "yes",
		"ProtectSystem":   "strict",
		"ProtectHome":     "yes",
		"PrivateTmp":      "yes",
		"DynamicUser":     "yes",
	}
	for k, v := range want {
		assert.Equal(t, []string{v}, svc[k], "[Service] %s", k)
	}
	assert.Contains(t, svc["EnvironmentFile"], "/etc/amp-kafka-bridge/bridge.env")
	require.Len(t, svc["ExecStart"], 1)
	assert.Contains(t, svc["ExecStart"][0], "bridge run -c /etc/amp-kafka-bridge/bridge.yaml")
	require.Len(t, svc["RestartSec"], 1)
	rs, err := time.ParseDuration(svc["RestartSec"][0])
	require.NoError(t, err)
	assert.Positive(t, rs, "restart backoff")
	require.Len(t, svc["TimeoutStopSec"], 1)
	stop, err := time.ParseDuration(svc["TimeoutStopSec"][0])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, stop, shutdownBudget+10*time.Second, "TimeoutStopSec must cover the graceful shutdown")
	assert.Equal(t, []string{"multi-user.target"}, u["Install"]["WantedBy"])
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit (with the
// binary path pointing at a freshly built bridge).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd); the unit's syntax is not verified")
	}
	b, err := os.ReadFile(filepath.Join("systemd", "amp-kafka-bridge.service"))
	require.NoError(t, err)
	dir := t.TempDir()
	unit := filepath.Join(dir, "amp-kafka-bridge.service")
	require.NoError(t, os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/bridge"), []byte(bridgeBinary(t))), 0o644))
	out, _ := exec.CommandContext(t.Context(), analyze, "verify", "--man=no", unit).CombinedOutput()
	// systemd < 254 does not know the restart backoff steps and ignores them.
	tolerated := regexp.MustCompile(`Unknown key '(RestartSteps|RestartMaxDelaySec)'`)
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" && !tolerated.MatchString(line) {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}

func TestSystemdEnvExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("systemd", "bridge.env.example"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "internal", "config", "*.go"))
	require.NoError(t, err)
	var src []byte
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		src = append(src, b...)
	}
	re := regexp.MustCompile(`(?m)^(BRIDGE_[A-Z0-9_]+)=`)
	ms := re.FindAllStringSubmatch(string(b), -1)
	require.NotEmpty(t, ms)
	for _, m := range ms {
		assert.Contains(t, string(src), strconv.Quote(m[1]), "bridge.env.example sets %s, which the bridge does not read as a secret", m[1])
	}
}

// ---- metric names --------------------------------------------------------

// externalMetrics are not exported by the bridge but by Prometheus itself
// and kube-state-metrics (Kubernetes-only alerts).
var externalMetrics = map[string]string{
	"up":                              "Prometheus",
	"kube_pod_container_status_ready": "kube-state-metrics",
	"kube_pod_container_status_restarts_total": "kube-state-metrics",
}

// promKeywords are PromQL words that are not metric names.
var promKeywords = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
	"and": true, "or": true, "unless": true, "atan2": true, "offset": true, "bool": true,
	"inf": true, "nan": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true,
}

var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// skipString returns the index after the string literal starting at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d", i)
}

// skipTo returns the index after the first close at or after i, skipping
// string literals.
func skipTo(s string, i int, close byte) (int, error) {
	for j := i; j < len(s); {
		switch s[j] {
		case '"', '\'', '`':
			k, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = k
		case close:
			return j + 1, nil
		default:
			j++
		}
	}
	return 0, fmt.Errorf("missing %q after offset %d", close, i)
}

// metricNames returns the metric names a PromQL expression (with Grafana
// variables) selects: identifiers outside label matchers, ranges, strings
// and grouping lists that are neither functions nor keywords.
func metricNames(expr string) ([]string, error) {
	var names []string
	depth := 0
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j, err := skipString(expr, i)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '{':
			j, err := skipTo(expr, i+1, '}')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '[':
			j, err := skipTo(expr, i+1, ']')
			if err != nil {
				return nil, err
			}
			i = j
		case c == '$': // Grafana variable: $x, ${x}
			i++
			if i < len(expr) && expr[i] == '{' {
				j, err := skipTo(expr, i+1, '}')
				if err != nil {
					return nil, err
				}
				i = j
			}
			for i < len(expr) && isIdent(expr[i]) {
				i++
			}
		case c >= '0' && c <= '9' || c == '.': // numbers and durations
			for i < len(expr) && (isIdent(expr[i]) || expr[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdent(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			nextParen := k < len(expr) && expr[k] == '('
			switch {
			case groupingKeywords[strings.ToLower(word)] && nextParen:
				end, err := skipTo(expr, k+1, ')')
				if err != nil {
					return nil, err
				}
				j = end
			case nextParen, promKeywords[strings.ToLower(word)]:
			default:
				names = append(names, word)
			}
			i = j
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ')' at offset %d", i)
			}
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed '('", depth)
	}
	return names, nil
}

// unknownMetrics returns the metric names of expr that are not in known
// (a histogram's _bucket, _sum and _count series count as its name).
func unknownMetrics(expr string, known map[string]bool) ([]string, error) {
	names, err := metricNames(expr)
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", expr, err)
	}
	var bad []string
	for _, n := range names {
		if known[n] || externalMetrics[n] != "" {
			continue
		}
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if base != n && known[base] {
			continue
		}
		bad = append(bad, n)
	}
	return bad, nil
}

func readSource(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// gatheredMetrics returns the names of the metrics the bridge's registry
// holds after one transaction of a stream: the pipeline's (pipeline.NewMetrics,
// every series created), a cluster member's (cluster.New), the sink's and
// franz-go's kprom client metrics (a sink.Producer on that registry commits
// one record to kfake), and the Go and process collectors cmd/bridge
// registers. own are the bridge's own metrics: the pipeline's, the cluster
// member's and the sink's.
func gatheredMetrics(t *testing.T) (known, own map[string]bool) {
	t.Helper()
	names := func(reg *prometheus.Registry) map[string]bool {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	ownReg := prometheus.NewRegistry()
	pipeline.NewMetrics(ownReg).Init("s", "mainnet")
	health.New(health.Config{}, ownReg, nil, nil).Stream("s")
	own = names(ownReg)
	// A cluster member's (cluster mode): families that exist before the
	// first rebalance are read from the collectors' descriptions.
	clusterReg := &describingRegisterer{Registry: prometheus.NewRegistry()}
	cluster.New(cluster.Config{}, cluster.Deps{Registerer: clusterReg})
	for n := range clusterReg.described(t) {
		own[n] = true
	}

	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	defer kc.Close()
	ctx := t.Context()
	cfg := sink.DefaultConfig()
	cfg.Brokers = kc.ListenAddrs()
	sinkReg := &describingRegisterer{Registry: prometheus.NewRegistry()}
	deps := sink.Deps{Registerer: sinkReg}
	admin, err := sink.NewAdmin(ctx, cfg, deps)
	require.NoError(t, err)
	defer admin.Close()
	_, err = admin.EnsureTopics(ctx, sink.TopicSpec{Name: "t", Kind: sink.TopicData, KeyMode: sink.KeyBatch, Partitions: 1,
		ReplicationFactor: 1, CleanupPolicy: sink.CleanupDelete})
	require.NoError(t, err)
	prod, err := sink.NewProducer(ctx, cfg, "s", deps)
	require.NoError(t, err)
	defer func() { _ = prod.Close(ctx) }()
	require.NoError(t, prod.Begin())
	require.NoError(t, prod.Produce(ctx, sink.Record{Topic: "t", Key: []byte("k"), Value: []byte("v"), Op: "c"}))
	_, err = prod.Commit(ctx)
	require.NoError(t, err)
	require.NoError(t, prod.Begin())
	require.NoError(t, prod.Abort(ctx))
	known = names(sinkReg.Registry)
	// Series that only errors create (kprom's error counters) are not
	// gathered: their families come from the registered collectors'
	// descriptions.
	for n := range sinkReg.described(t) {
		known[n] = true
	}
	for n := range known {
		if strings.HasPrefix(n, cfg.MetricsNamespace+"_") && !strings.Contains(n, "_kafka_") {
			own[n] = true
		}
	}
	require.True(t, known[cfg.MetricsNamespace+"_kafka_produce_bytes_total"], "kprom's produce_bytes_total not gathered: %v", known)
	for n := range own {
		known[n] = true
	}

	// client_golang's Go and process collectors, when cmd/bridge registers them.
	run := readSource(t, filepath.Join(repoRoot(t), "cmd", "bridge", "run.go"))
	std := prometheus.NewRegistry()
	if strings.Contains(run, "collectors.NewGoCollector(") {
		std.MustRegister(collectors.NewGoCollector())
	}
	if strings.Contains(run, "collectors.NewProcessCollector(") {
		std.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for n := range names(std) {
		known[n] = true
	}
	require.GreaterOrEqual(t, len(own), 10, "gathered only %v", own)
	return known, own
}

// describingRegisterer is a registry that keeps the collectors registered
// on it, to list the metric families they describe.
type describingRegisterer struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

// Register implements prometheus.Registerer.
func (d *describingRegisterer) Register(c prometheus.Collector) error {
	d.mu.Lock()
	d.collectors = append(d.collectors, c)
	d.mu.Unlock()
	return d.Registry.Register(c)
}

// MustRegister implements prometheus.Registerer.
func (d *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqName = regexp.MustCompile(`fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)

// described returns the fully qualified names the registered collectors
// describe (client_golang's Desc has no accessor but its String).
func (d *describingRegisterer) described(t *testing.T) map[string]bool {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]bool{}
	for _, c := range d.collectors {
		ch := make(chan *prometheus.Desc)
		go func() { c.Describe(ch); close(ch) }()
		for desc := range ch {
			m := fqName.FindStringSubmatch(desc.String())
			require.NotNil(t, m, "no fqName in %s", desc)
			out[m[1]] = true
		}
	}
	require.NotEmpty(t, out)
	return out
}

type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("grafana", "dashboard.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d), "grafana/dashboard.json")
	return d
}

func TestDashboard(t *testing.T) {
	d := readDashboard(t)
	assert.GreaterOrEqual(t, d.SchemaVersion, 36)
	assert.True(t, slices.ContainsFunc(d.Templating.List, func(v struct {
		Name       string `json:"name"`
		Type       string `json:"type"`
		Definition string `json:"definition"`
	}) bool {
		return v.Name == "stream" && v.Type == "query"
	}), "the dashboard needs a stream template variable")
	ids := map[int]bool{}
	for _, p := range d.Panels {
		assert.False(t, ids[p.ID], "panel id %d used twice", p.ID)
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "amp_bridge_") && !memberOnly(t, tg.Expr) {
				assert.Contains(t, tg.Expr, `stream=~"$stream"`, "panel %q ignores the stream variable: %s", p.Title, tg.Expr)
			}
		}
	}
}

// memberMetrics are a cluster member's metrics without a stream label
// (internal/cluster/metrics.go): a panel of only these cannot filter by
// stream.
var memberMetrics = map[string]bool{
	"amp_bridge_cluster_owned_streams": true, "amp_bridge_cluster_generation": true,
	"amp_bridge_cluster_rebalances_total": true, "amp_bridge_cluster_rebalance_seconds_bucket": true,
	"amp_bridge_cluster_release_seconds_bucket": true,
}

// memberOnly reports whether every amp_bridge_ metric of expr is one of
// memberMetrics.
func memberOnly(t *testing.T, expr string) bool {
	t.Helper()
	names, err := metricNames(expr)
	require.NoError(t, err, expr)
	for _, n := range names {
		if strings.HasPrefix(n, "amp_bridge_") && !memberMetrics[n] {
			return false
		}
	}
	return true
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yaml"))
	require.NoError(t, err)
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rf), "prometheus/alerts.yaml")
	require.NotEmpty(t, rf.Groups)
	return rf
}

func TestAlertRules(t *testing.T) {
	rf := readRules(t)
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Alert, "group %s: a rule without alert name", g.Name)
			assert.False(t, seen[r.Alert], "alert %s defined twice", r.Alert)
			seen[r.Alert] = true
			assert.NotEmpty(t, strings.TrimSpace(r.Expr), "%s: expr", r.Alert)
			assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], "%s: severity", r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], "%s: summary", r.Alert)
			assert.Greater(t, len(r.Annotations["description"]), 80, "%s: the description must say what to do", r.Alert)
			if r.For != "" {
				_, err := time.ParseDuration(r.For)
				require.NoError(t, err, "%s: for", r.Alert)
			}
			if strings.Contains(r.Expr, "amp_bridge_") {
				assert.Contains(t, r.Expr, bridgeJob, "%s: select the bridge's targets", r.Alert)
			}
		}
	}
	// The situations the operators asked alerts for.
	for _, a := range []string{"AmpBridgeDown", "AmpBridgeNotReady", "AmpBridgeNoCommits", "AmpBridgeStuck",
		"AmpBridgeCheckpointOld", "AmpBridgeTxnAborts", "AmpBridgeStreamRestarts", "AmpBridgeDeepReorg",
		"AmpBridgeCheckpointErrors", "AmpBridgeReconciliationRefused"} {
		assert.True(t, seen[a], "alert %s missing", a)
	}
}

// TestMetricNamesExist fails on any metric name in the alerts or the
// dashboard that the bridge does not export, and on any of the bridge's own
// metrics the dashboard does not show.
func TestMetricNamesExist(t *testing.T) {
	known, own := gatheredMetrics(t)
	type use struct{ where, expr string }
	var uses []use
	for _, g := range readRules(t).Groups {
		for _, r := range g.Rules {
			uses = append(uses, use{"alert " + r.Alert, r.Expr})
		}
	}
	d := readDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			uses = append(uses, use{"panel " + p.Title, tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			m := labelValues.FindStringSubmatch(v.Definition)
			require.NotNil(t, m, "variable %s: want label_values(metric, label), got %q", v.Name, v.Definition)
			uses = append(uses, use{"variable " + v.Name, m[1]})
		}
	}
	require.Greater(t, len(uses), 20)
	onDashboard := map[string]bool{}
	for _, u := range uses {
		bad, err := unknownMetrics(u.expr, known)
		require.NoError(t, err, u.where)
		assert.Empty(t, bad, "%s uses metrics the bridge does not export: %s", u.where, u.expr)
		if strings.HasPrefix(u.where, "panel ") {
			names, _ := metricNames(u.expr)
			for _, n := range names {
				for _, suf := range []string{"", "_bucket", "_sum", "_count"} {
					onDashboard[strings.TrimSuffix(n, suf)] = true
				}
			}
		}
	}
	for n := range own {
		assert.True(t, onDashboard[n], "the dashboard shows no panel for %s", n)
	}
}

// TestMetricChecker proves the name check can fail.
func TestMetricChecker(t *testing.T) {
	known := map[string]bool{"amp_bridge_txn_commit_seconds": true, "amp_bridge_reorgs_total": true}
	tests := []struct {
		name    string
		expr    string
		unknown []string
		wantErr bool
	}{
		{"unknown counter", `rate(amp_bridge_rows_published_total[5m])`, []string{"amp_bridge_rows_published_total"}, false},
		{"histogram suffix", `histogram_quantile(0.99, sum by (le, stream) (rate(amp_bridge_txn_commit_seconds_bucket{stream=~"$stream"}[$__rate_interval])))`, nil, false},
		{"suffix of an unknown base", `amp_bridge_reorgs_bucket`, []string{"amp_bridge_reorgs_bucket"}, false},
		{"grouping lists and keywords", `sum by (instance, stream) (increase(amp_bridge_reorgs_total{job="x", le="64"}[1h])) > 0 and on (instance) up == 1 unless amp_bridge_reorgs_total offset 10m`, nil, false},
		{"label names in strings are not metrics", `label_replace(amp_bridge_reorgs_total, "dst", "$1", "src", "(.*)")`, nil, false},
		{"two unknown", `foo_total / bar_total`, []string{"foo_total", "bar_total"}, false},
		{"unbalanced", `sum(rate(amp_bridge_reorgs_total[5m])`, nil, true},
		{"unterminated matcher", `amp_bridge_reorgs_total{job="x"`, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := unknownMetrics(tt.expr, known)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.unknown, got)
		})
	}
}

// ---- promtool --------------------------------------------------------------

// promtool returns the path of promtool: BRIDGE_TEST_PROMTOOL (written by
// deploy/local/stack.sh start tools, which make test runs), else the PATH.
// Without it the test fails when BRIDGE_TEST_REQUIRE names promtool (or
// all), and skips naming the variable otherwise.
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("BRIDGE_TEST_PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool is not installed: set BRIDGE_TEST_PROMTOOL or run deploy/local/stack.sh start tools (Debian package prometheus)"
	if testenv.Required("promtool") {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func runPromtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
}

// TestAlertRulesPromtool checks the rules with promtool and runs the alert
// unit tests of prometheus/alerts_test.yaml against a copy of the rules
// without annotations (promtool compares expanded annotations as well, and
// the runbook texts are not repeated in the unit tests).
func TestIntegrationAlertRulesPromtool(t *testing.T) {
	runPromtool(t, "prometheus", "check", "rules", "alerts.yaml")

	var rules map[string]any
	b, err := os.ReadFile(filepath.Join("prometheus", "alerts.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &rules))
	groups, ok := rules["groups"].([]any)
	require.True(t, ok, "alerts.yaml: groups is not a list")
	for _, g := range groups {
		rs, ok := g.(map[string]any)["rules"].([]any)
		require.True(t, ok, "alerts.yaml: a group without rules")
		for _, r := range rs {
			delete(r.(map[string]any), "annotations")
		}
	}
	stripped, err := yaml.Marshal(rules)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yaml"), stripped, 0o600))
	tests, err := os.ReadFile(filepath.Join("prometheus", "alerts_test.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600))
	runPromtool(t, dir, "test", "rules", "alerts_test.yaml")
}

// TestDashboardQueriesPromtool checks the PromQL syntax of every dashboard
// query by handing them to promtool as recording rules, with the Grafana
// variables replaced.
func TestIntegrationDashboardQueriesPromtool(t *testing.T) {
	bin := promtool(t)
	vars := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$stream", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rs []rule
	for _, p := range readDashboard(t).Panels {
		for i, tg := range p.Targets {
			rs = append(rs, rule{Record: fmt.Sprintf("dashboard:panel%d_%d", p.ID, i), Expr: vars.Replace(tg.Expr)})
		}
	}
	require.NotEmpty(t, rs)
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rs}}})
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	out, err := exec.CommandContext(t.Context(), bin, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "dashboard queries that are not valid PromQL:\n%s", out)
}
