package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// stageInternal are the stage fields no configuration key reaches, on
// purpose.
var stageInternal = map[string]string{
	"sink.MetricsNamespace":          "the metric names are part of the dashboards and alerts in deploy/",
	"sink.TLS.InsecureSkipVerify":    "tests only",
	"source.TLS.InsecureSkipVerify":  "tests only",
	"offsets.TLS.InsecureSkipVerify": "tests only",
	"encode.TLS.InsecureSkipVerify":  "tests only",
	// Both follow amp.receive_window_bytes and the number of streams, and
	// with the probe's single stream its share leaves gRPC's own window.
	"source.ReceiveWindow":        "a stream's share of amp.receive_window_bytes (TestReceiveWindowShares)",
	"source.ReceiveWindowStreams": "the number of streams and backfill workers",
}

// leafFields lists the exported leaf fields of a struct as dotted Go paths
// (an unexported one, such as sink.Config's shared compressor, is wiring the
// process sets, not a knob).
func leafFields(v reflect.Value, prefix string, out map[string]reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		p := prefix + "." + f.Name
		if v.Field(i).Kind() == reflect.Struct {
			leafFields(v.Field(i), p, out)
			continue
		}
		out[p] = v.Field(i)
	}
}

// keyFields lists the leaf fields of a Config that a key (or, for a
// Secret, its environment variable or file) sets, as dotted Go paths.
func keyFields(v reflect.Value, prefix string, out map[string]reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if yamlName(f) == "" && f.Type != reflect.TypeFor[Secret]() {
			continue
		}
		p := prefix + "." + f.Name
		if v.Field(i).Kind() == reflect.Struct {
			keyFields(v.Field(i), p, out)
			continue
		}
		out[p] = v.Field(i)
	}
}

// perturb changes v (a settable leaf) to another value of its type.
func perturb(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 7)
	case reflect.Uint64:
		v.SetUint(v.Uint() + 7)
	case reflect.Float64:
		v.SetFloat(v.Float() + 0.5)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.ValueOf("x").Convert(v.Type().Elem())))
	default:
		panic("perturb: " + v.Kind().String())
	}
}

// stageConfigs maps a Config onto every stage's config, by stage name.
func stageConfigs(c *Config) map[string]reflect.Value {
	return map[string]reflect.Value{
		"sink":    reflect.ValueOf(c.Sink()),
		"source":  reflect.ValueOf(c.Source()),
		"offsets": reflect.ValueOf(c.Redis()),
		"encode":  reflect.ValueOf(c.SchemaRegistry()),
	}
}

// TestStageFieldsReachable changes each key of the schema (and each secret)
// in turn and records which fields of sink.Config, source.Config and
// offsets.RedisConfig change: a stage field that no key reaches fails,
// unless stageInternal lists it with a reason.
func TestStageFieldsReachable(t *testing.T) {
	var base Config
	base.Defaults()
	baseLeaves := map[string]reflect.Value{}
	for stage, v := range stageConfigs(&base) {
		leafFields(v, stage, baseLeaves)
	}
	reached := map[string]bool{}
	var cfgLeaves []string
	all := map[string]reflect.Value{}
	var probe Config
	probe.Defaults()
	keyFields(reflect.ValueOf(&probe).Elem(), "", all)
	for p := range all {
		if !strings.HasPrefix(p, ".Streams") {
			cfgLeaves = append(cfgLeaves, p)
		}
	}
	for _, p := range cfgLeaves {
		c := base
		c.Kafka.Brokers = slices.Clone(base.Kafka.Brokers)
		fields := map[string]reflect.Value{}
		keyFields(reflect.ValueOf(&c).Elem(), "", fields)
		perturb(fields[p])
		got := map[string]reflect.Value{}
		for stage, v := range stageConfigs(&c) {
			leafFields(v, stage, got)
		}
		for name, v := range got {
			if !reflect.DeepEqual(v.Interface(), baseLeaves[name].Interface()) {
				reached[name] = true
			}
		}
	}
	for name := range baseLeaves {
		if _, ok := stageInternal[name]; ok {
			assert.False(t, reached[name], "%s is listed as internal but a key reaches it", name)
			continue
		}
		assert.True(t, reached[name], "%s: no bridge.yaml key reaches this stage field; add a key (and map it in Sink/Source/Redis) or list it in stageInternal with a reason", name)
	}
}

// TestDefaultsComeFromTheStages: with nothing configured, each stage gets
// its own defaults through the schema.
func TestDefaultsComeFromTheStages(t *testing.T) {
	var c Config
	c.Defaults()
	want := sink.DefaultConfig()
	got := c.Sink()
	got.Brokers = nil
	assert.Equal(t, want, got)
	src := c.Source()
	wantSrc := source.DefaultConfig()
	wantSrc.Addr = c.Amp.Addr
	assert.Equal(t, wantSrc, src)
	r := c.Redis()
	wantR := offsets.DefaultRedisConfig()
	wantR.Addr = c.Checkpoint.Redis.Addr
	assert.Equal(t, wantR, r)
	assert.Equal(t, sink.CompressionZstd, c.Kafka.Compression, "README documents zstd")
}

// validKeys is the set of schema keys (sections included) with the stream
// index written [].
func validKeys() map[string]bool {
	out := map[string]bool{}
	for _, k := range schemaKeys() {
		out[k.path] = true
	}
	return out
}

// keyRE finds a configuration key in a message: a section name, an optional
// stream index or id ("streams[0]", "streams (s)", "streams[0] (s)"), then
// dotted names.
var keyRE = regexp.MustCompile(`(?:^|[^.\w-])(amp|kafka|registry|checkpoint|http|log|streams)((?:\[\d*\])?(?: \([^)]*\))?)((?:\.[a-z_]+)+)`)

var avroName = regexp.MustCompile(`^[a-z_.]+\.[A-Z]\w*$`)

// keysIn returns the keys a message names, normalized to the schema's form.
func keysIn(msg string) []string {
	var out []string
	for _, m := range keyRE.FindAllStringSubmatch(msg, -1) {
		k := m[1]
		if m[1] == "streams" {
			k += "[]"
		}
		out = append(out, k+m[3])
	}
	return out
}

// stageMessages are the texts of the stages' configuration errors: every
// Validate on broken configurations, the TLS loader and the encoder's
// configuration, plus every string literal of their sources and of this
// package that looks like it names a key.
func stageMessages(t *testing.T) []string {
	t.Helper()
	var msgs []string
	add := func(err error) {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	add(sink.Config{}.Validate())
	add(sink.Config{Brokers: []string{"x"}, TLS: tlsconfig.Config{Enabled: true, CAFile: "/nonexistent", CertFile: "x"},
		SASL: sink.SASLConfig{Mechanism: "x"}, Linger: -1, BatchMaxBytes: 1 << 20, MaxBufferedBytes: 1}.Validate())
	add(sink.Config{SASL: sink.SASLConfig{Username: "u"}, TLS: tlsconfig.Config{CAFile: "x"}}.Validate())
	add(sink.Config{SASL: sink.SASLConfig{Mechanism: sink.SASLPlain}}.Validate())
	add(source.Config{}.Validate())
	add(source.Config{Addr: "grpc://x", Token: "a b", ReadAheadBytes: -1, KeepaliveTime: time.Second,
		Backoff: source.BackoffConfig{Initial: time.Second, Jitter: 2, MaxAttempts: -1}}.Validate())
	add(offsets.RedisConfig{DB: -1, KeyPrefix: "{", DialTimeout: -1, ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -2,
		TLS: tlsconfig.Config{CAFile: "x", CertFile: "y"}}.Validate())
	for _, key := range []string{"amp.tls", "kafka.tls", "checkpoint.redis.tls"} {
		_, err := tlsconfig.Load(key, tlsconfig.Config{Enabled: true, CAFile: "/nonexistent"})
		add(err)
		_, err = tlsconfig.Load(key, tlsconfig.Config{Enabled: true, CertFile: "/nonexistent", KeyFile: "/nonexistent"})
		add(err)
	}
	_, err := StreamConfig{ID: "s", Envelope: "x"}.EncodeConfig("t", "v")
	add(err)
	_, err = StreamConfig{ID: "s", FixedAs: "x"}.EncodeConfig("t", "v")
	add(err)
	_, err = StreamConfig{ID: "s", Topic: "{network}"}.TopicName(nil)
	add(err)
	var c Config
	c.Defaults()
	c.Streams = []StreamConfig{{Backfill: BackfillConfig{Enabled: true, To: 1, From: 2}}}
	c.Kafka.Delivery = AtLeastOnce
	c.Checkpoint.Store = "x"
	add(c.Validate())

	for _, dir := range []string{"../../sink", "../../source", "../../offsets", "../../encode", "../tlsconfig", "."} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			require.NoError(t, err)
			ast.Inspect(file, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					// Avro full names (amp.bridge.control.StreamState) are no keys.
					if s, err := strconv.Unquote(lit.Value); err == nil && keyRE.MatchString(s) && !avroName.MatchString(s) {
						msgs = append(msgs, s)
					}
				}
				return true
			})
		}
	}
	return msgs
}

// TestErrorsNameRealKeys: every key an error of the stages or of this
// package names exists in the schema.
func TestErrorsNameRealKeys(t *testing.T) {
	valid := validKeys()
	var checked int
	for _, msg := range stageMessages(t) {
		for _, k := range keysIn(msg) {
			checked++
			assert.True(t, valid[k], "%q names %s, which is no bridge.yaml key", msg, k)
		}
	}
	assert.Greater(t, checked, 50, "the scan must find the keys of the messages")
}

func TestKeysIn(t *testing.T) {
	assert.Equal(t, []string{"streams[].backfill.to", "amp.tls.ca_file", "streams[].topic"},
		keysIn(`streams[0] (a).backfill.to is bad; reading amp.tls.ca_file: x; streams (s).topic`))
}

func TestSetUnknownKeys(t *testing.T) {
	tests := []struct {
		name        string
		set         string
		errContains string
	}{
		{name: "known", set: "kafka.brokers=a:1"},
		{name: "stream index", set: "streams.3.partitions=6"},
		{name: "bracket index", set: "streams[1].backfill.workers=4"},
		{name: "new limit", set: "kafka.transaction_timeout=1m"},
		{name: "typo", set: "kafka.broker=x", errContains: "unknown key kafka.broker; did you mean kafka.brokers?"},
		{name: "stream typo", set: "streams.0.partitons=6", errContains: "unknown key streams.0.partitons; did you mean streams.0.partitions?"},
		{name: "far off", set: "zzzzzzzzzzzz=1", errContains: "unknown key zzzzzzzzzzzz"},
		{name: "section", set: "kafka.tls=true", errContains: "unknown key kafka.tls"},
		{name: "secret", set: "amp.token=x", errContains: "BRIDGE_AMP_TOKEN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := SetFlags{}.Set(tt.set)
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errContains)
		})
	}
}

func TestUnknownEnvironment(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		errContains []string
	}{
		{name: "known and exempt", env: map[string]string{"BRIDGE_KAFKA_BROKERS": "a:1", "BRIDGE_TEST_KAFKA_SEEDS": "x",
			"BRIDGE_LOCAL_DIR": "/tmp", "BRIDGE_PYTHON": "python3", "BRIDGE_AMP_TOKEN": "t", "BRIDGE_AMP_TLS_ENABLED": "true", "BRIDGE_STREAMS_0_SQL": "SELECT 2"}},
		{name: "typo", env: map[string]string{"BRIDGE_KAFKA_BROKER": "a:1"},
			errContains: []string{"BRIDGE_KAFKA_BROKER", "did you mean BRIDGE_KAFKA_BROKERS (kafka.brokers)?"}},
		{name: "stream typo", env: map[string]string{"BRIDGE_STREAMS_0_PARTITONS": "6"},
			errContains: []string{"did you mean BRIDGE_STREAMS_0_PARTITIONS (streams.0.partitions)?"}},
		{name: "stream gap", env: map[string]string{"BRIDGE_STREAMS_5_SQL": "SELECT 1"},
			errContains: []string{"BRIDGE_STREAMS_5_SQL", "no streams[5]"}},
		{name: "new stream from the environment", env: map[string]string{"BRIDGE_STREAMS_1_ID": "b", "BRIDGE_STREAMS_1_SQL": "SELECT 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := make([]string, 0, len(tt.env))
			for k := range tt.env {
				names = append(names, k)
			}
			c, err := load(writeConfig(t, minimalYAML), envMap(tt.env), names)
			if tt.errContains == nil {
				require.NoError(t, err)
				if v, ok := tt.env["BRIDGE_STREAMS_1_SQL"]; ok {
					require.Len(t, c.Streams, 2)
					assert.Equal(t, v, c.Streams[1].SQL)
				}
				return
			}
			require.Error(t, err)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

// TestLoadConfigReadsTheProcessEnvironment: LoadConfig finds unknown
// variables in the real environment.
func TestLoadConfigReadsTheProcessEnvironment(t *testing.T) {
	t.Setenv("BRIDGE_KAFKA_COMPRESION", "lz4")
	_, err := LoadConfig(writeConfig(t, minimalYAML), os.LookupEnv)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did you mean BRIDGE_KAFKA_COMPRESSION (kafka.compression)?")
}

func TestYAMLUnknownKeysWithPaths(t *testing.T) {
	body := `kafka:
  brokers: [a:1]
  broker: x
  tls: {enabeld: true}
amp:
  token: secret
  reconnect_min: soon
streams:
  - id: a
    sql: x
    topc: t
    partitions: many
  - id: b
    sql: y
    backfill:
      enable: true
`
	_, err := LoadConfig(writeConfig(t, body), envMap(nil))
	require.Error(t, err)
	for _, s := range []string{
		":3: config kafka.broker: unknown key; did you mean kafka.brokers?",
		":4: config kafka.tls.enabeld: unknown key; did you mean kafka.tls.enabled?",
		":6: config amp.token: secrets are never read from the file; set BRIDGE_AMP_TOKEN or amp.token_file",
		":7: config amp.reconnect_min: cannot unmarshal",
		":11: config streams[0].topc: unknown key; did you mean streams[0].topic?",
		":12: config streams[0].partitions: cannot unmarshal",
		":16: config streams[1].backfill.enable: unknown key; did you mean streams[1].backfill.enabled?",
	} {
		assert.Contains(t, err.Error(), s)
	}
	assert.NotContains(t, err.Error(), "main.StreamConfig")
	assert.NotContains(t, err.Error(), "not found in type")
}

// TestValidateReportsWhatRunReports: each configuration error that `bridge
// run` would report offline (the stages' own checks when they are built)
// is reported by Validate, so `bridge validate` catches it.
func TestValidateReportsWhatRunReports(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		env         map[string]string
		errContains string
	}{
		{name: "amp addr with a scheme", env: map[string]string{"BRIDGE_AMP_ADDR": "grpc://amp:1602"}, errContains: `amp.addr "grpc://amp:1602" is not host:port`},
		{name: "amp token with a newline", env: map[string]string{"BRIDGE_AMP_TOKEN": "tok\n", "BRIDGE_AMP_TLS_ENABLED": "true"}, errContains: "BRIDGE_AMP_TOKEN or amp.token_file"},
		{name: "amp token over plaintext", env: map[string]string{"BRIDGE_AMP_TOKEN": "tok"}, errContains: "an Amp token is set (BRIDGE_AMP_TOKEN or amp.token_file) but amp.tls.enabled is false"},
		{name: "amp token file over plaintext", yaml: "amp:\n  token_file: TOKENFILE\n", errContains: "amp.allow_plaintext_token: true"},
		{name: "amp tls files without tls", env: map[string]string{"BRIDGE_AMP_TLS_CA_FILE": "ca.pem"}, errContains: "amp.tls.ca_file is set but amp.tls.enabled is false"},
		{name: "amp jitter", env: map[string]string{"BRIDGE_AMP_RECONNECT_JITTER": "2"}, errContains: "amp.reconnect_jitter"},
		{name: "broker without port", env: map[string]string{"BRIDGE_KAFKA_BROKERS": "kafka"}, errContains: `kafka.brokers: entry 0 "kafka" is not host:port`},
		{name: "transaction timeout", env: map[string]string{"BRIDGE_KAFKA_TRANSACTION_TIMEOUT": "1h"}, errContains: "kafka.transaction_timeout"},
		{name: "read timeout below transaction timeout", env: map[string]string{"BRIDGE_KAFKA_READ_TIMEOUT": "10s"}, errContains: "kafka.read_timeout"},
		{name: "batch too large", env: map[string]string{"BRIDGE_KAFKA_BATCH_MAX_BYTES": "4GiB"}, errContains: "kafka.batch_max_bytes"},
		{name: "kafka tls file missing", env: map[string]string{"BRIDGE_KAFKA_TLS_ENABLED": "true", "BRIDGE_KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem"}, errContains: "kafka.tls.ca_file"},
		{name: "sasl password without mechanism", env: map[string]string{"BRIDGE_KAFKA_SASL_PASSWORD": "pw"}, errContains: "kafka.sasl"},
		{name: "redis addr", env: map[string]string{"BRIDGE_CHECKPOINT_REDIS_ADDR": "redis"}, errContains: `checkpoint.redis.addr "redis"`},
		{name: "redis key prefix", env: map[string]string{"BRIDGE_CHECKPOINT_REDIS_KEY_PREFIX": "a{b"}, errContains: "checkpoint.redis.key_prefix"},
		{name: "redis cert without key", env: map[string]string{"BRIDGE_CHECKPOINT_REDIS_TLS_ENABLED": "true", "BRIDGE_CHECKPOINT_REDIS_TLS_CERT_FILE": "c.pem"}, errContains: "checkpoint.redis.tls.cert_file and checkpoint.redis.tls.key_file"},
		{name: "topic too long", env: map[string]string{"BRIDGE_STREAMS_0_TOPIC": strings.Repeat("t", 250)}, errContains: "streams[0] (txs).topic"},
		{name: "duplicate key column", env: map[string]string{"BRIDGE_STREAMS_0_KEY": "row", "BRIDGE_STREAMS_0_KEY_COLUMNS": "a,a"}, errContains: `key_columns: "a" is listed twice`},
		{name: "backfill of unpartitionable sql", env: map[string]string{"BRIDGE_STREAMS_0_BACKFILL_ENABLED": "true", "BRIDGE_STREAMS_0_SQL": "SELECT 1 SETTINGS foo = 1"}, errContains: "streams[0] (txs).sql: cannot be backfilled"},
		{name: "registry url", env: map[string]string{"BRIDGE_REGISTRY_URL": "registry:8081"}, errContains: "registry.url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokenFile := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(tokenFile, []byte("tok"), 0o600))
			yaml := strings.ReplaceAll(minimalYAML+tt.yaml, "TOKENFILE", tokenFile)
			_, err := LoadConfig(writeConfig(t, yaml), envMap(tt.env))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.errContains)
		})
	}
}

// TestPlaintextToken: a token without TLS is refused by Validate (and so
// by `bridge validate` and `bridge run`) with an error that names the token,
// amp.tls.enabled and amp.allow_plaintext_token, and not the token itself;
// amp.allow_plaintext_token or TLS admits it.
func TestPlaintextToken(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		ok   bool
	}{
		{name: "env token, no tls", env: map[string]string{"BRIDGE_AMP_TOKEN": "s3cr3t-tok"}},
		{name: "token file, no tls", yaml: "amp:\n  token_file: TOKENFILE\n"},
		{name: "explicitly false", yaml: "amp:\n  allow_plaintext_token: false\n", env: map[string]string{"BRIDGE_AMP_TOKEN": "s3cr3t-tok"}},
		{name: "allowed in the file", yaml: "amp:\n  allow_plaintext_token: true\n", env: map[string]string{"BRIDGE_AMP_TOKEN": "s3cr3t-tok"}, ok: true},
		{name: "allowed by the environment", env: map[string]string{"BRIDGE_AMP_TOKEN": "s3cr3t-tok", "BRIDGE_AMP_ALLOW_PLAINTEXT_TOKEN": "true"}, ok: true},
		{name: "tls", yaml: "amp:\n  tls: {enabled: true}\n  token_file: TOKENFILE\n", ok: true},
		{name: "no token", yaml: "amp:\n  allow_plaintext_token: false\n", ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tokenFile := filepath.Join(t.TempDir(), "token")
			require.NoError(t, os.WriteFile(tokenFile, []byte("s3cr3t-tok\n"), 0o600))
			yaml := strings.ReplaceAll(minimalYAML+tt.yaml, "TOKENFILE", tokenFile)
			c, err := LoadConfig(writeConfig(t, yaml), envMap(tt.env))
			if tt.ok {
				require.NoError(t, err)
				assert.Equal(t, c.Amp.AllowPlaintextToken, c.Source().AllowPlaintextToken)
				return
			}
			require.Error(t, err)
			for _, s := range []string{"BRIDGE_AMP_TOKEN or amp.token_file", "amp.tls.enabled", "amp.allow_plaintext_token"} {
				assert.ErrorContains(t, err, s)
			}
			assert.NotContains(t, err.Error(), "s3cr3t-tok")
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"kafka.broker", "kafka.brokers", 1}, {"partitons", "partitions", 1}, {"abc", "", 3}, {"kitten", "sitting", 3}} {
		assert.Equal(t, tt.want, editDistance(tt.a, tt.b), "%s/%s", tt.a, tt.b)
	}
}
