package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

const minimalYAML = `
kafka:
  brokers: [127.0.0.1:9092]
streams:
  - id: txs
    sql: SELECT * FROM eth.transactions
`

func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(nil))
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:1602", c.Amp.Addr)
	assert.Equal(t, ExactlyOnce, c.Kafka.Delivery)
	assert.Equal(t, "amp.{stream}", c.Streams[0].Topic)
	assert.Equal(t, uint64(128), c.Streams[0].RetentionBlocks)
	assert.Equal(t, 50000, c.Streams[0].Transaction.MaxRows)
	assert.Equal(t, 100*time.Millisecond, c.Streams[0].Transaction.MaxAge)
	assert.Equal(t, ByteSize(64<<20), c.Amp.MaxRecvBytes)
	assert.Equal(t, MemoryLimitAuto, c.MemoryLimit)
	assert.Equal(t, int64(0), c.MemoryLimitBytes(), "auto")
	assert.Equal(t, int64(144<<20+512<<10), c.AutoMemoryLimit(), "64MiB + read_ahead_bytes (32MiB) + 1.5 × max_buffered_bytes + 512KiB for the one stream")
}

func TestMemoryLimitConfig(t *testing.T) {
	for in, want := range map[string]int64{"off": -1, "auto": 0, "256MiB": 256 << 20, "1GiB": 1 << 30} {
		c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(map[string]string{"BRIDGE_MEMORY_LIMIT": in}))
		require.NoError(t, err, in)
		assert.Equal(t, want, c.MemoryLimitBytes(), in)
	}
	c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(map[string]string{"BRIDGE_KAFKA_MAX_BUFFERED_BYTES": "16MiB"}))
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20+32<<20+24<<20+512<<10), c.AutoMemoryLimit(), "follows kafka.max_buffered_bytes")
}

func TestLoadConfigEnvOverridesAndSecrets(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("file-token\n"), 0o600))
	c, err := LoadConfig(writeConfig(t, minimalYAML+"amp:\n  tls: {enabled: true}\n  token_file: "+tokenFile+"\n"), envMap(map[string]string{
		"BRIDGE_KAFKA_BROKERS":                 "a:1, b:2",
		"BRIDGE_STREAMS_0_SQL":                 "SELECT 1",
		"BRIDGE_STREAMS_0_TRANSACTION_MAX_AGE": "250ms",
		"BRIDGE_AMP_MAX_RECV_BYTES":            "128MiB",
		"BRIDGE_KAFKA_SASL_PASSWORD":           "hunter2",
		"BRIDGE_KAFKA_SASL_MECHANISM":          "SCRAM-SHA-512",
		"BRIDGE_KAFKA_SASL_USERNAME":           "bridge",
		"BRIDGE_STREAMS_0_RETENTION_BLOCKS":    "256",
		"BRIDGE_CHECKPOINT_REDIS_PASSWORD":     "pw",
	}))
	require.NoError(t, err)
	assert.Equal(t, []string{"a:1", "b:2"}, c.Kafka.Brokers)
	assert.Equal(t, "SELECT 1", c.Streams[0].SQL)
	assert.Equal(t, 250*time.Millisecond, c.Streams[0].Transaction.MaxAge)
	assert.Equal(t, ByteSize(128<<20), c.Amp.MaxRecvBytes)
	assert.Equal(t, uint64(256), c.Streams[0].RetentionBlocks)
	assert.Equal(t, Secret("file-token"), c.Amp.Token)
	assert.Equal(t, Secret("hunter2"), c.Kafka.SASL.Password)
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v", c, c, c), "hunter2", "secrets never print")
	assert.NotContains(t, fmt.Sprintf("%+v", c.Amp), "file-token")
}

// TestRegistryConfig: the registry's TLS, basic and bearer settings reach the
// client's configuration, secrets from the environment or files.
func TestRegistryConfig(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("bearer-secret\n"), 0o600))
	c, err := LoadConfig(writeConfig(t, minimalYAML+"registry:\n  url: https://r:8081\n  tls: {enabled: true, ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem}\n  token_file: "+tokenFile+"\n"), envMap(nil))
	require.NoError(t, err)
	r := c.SchemaRegistry()
	assert.Equal(t, "bearer-secret", r.Token)
	assert.Equal(t, "/ca.pem", r.TLS.CAFile)
	assert.True(t, r.TLS.Enabled)
	assert.Equal(t, 10*time.Second, r.Timeout)
	assert.NotContains(t, fmt.Sprintf("%v %+v %#v", c, c, c), "bearer-secret", "secrets never print")

	c, err = LoadConfig(writeConfig(t, minimalYAML+"registry: {url: 'http://r:8081', username: u, allow_plaintext_auth: true}\n"),
		envMap(map[string]string{"BRIDGE_REGISTRY_PASSWORD": "pw"}))
	require.NoError(t, err, "allow_plaintext_auth lets basic auth go over http")
	r = c.SchemaRegistry()
	assert.Equal(t, "u", r.Username)
	assert.Equal(t, "pw", r.Password)
	assert.True(t, r.AllowPlaintextAuth)
}

func TestLoadConfigErrors(t *testing.T) {
	tests := []struct {
		name        string
		yaml        string
		env         map[string]string
		errContains []string
	}{
		{"unknown key", minimalYAML + "bogus: 1\n", nil, []string{"bogus"}},
		{"no brokers", "streams: [{id: a, sql: x}]\n", nil, []string{"kafka.brokers", "host:port"}},
		{"no streams", "kafka: {brokers: [a:1]}\n", nil, []string{"streams", "at least one"}},
		{"bad id", "kafka: {brokers: [a:1]}\nstreams: [{id: Bad!, sql: x}]\n", nil, []string{"streams[0] (Bad!).id", "lowercase"}},
		{"dup id", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x}, {id: a, sql: y}]\n", nil, []string{"used by two streams"}},
		{"empty sql", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: ' '}]\n", nil, []string{"streams[0] (a).sql"}},
		{"row key without columns", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, key: row}]\n", nil, []string{"key_columns", "key: row"}},
		{"bad envelope", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, envelope: json}]\n", nil, []string{"streams (a).envelope", `want "debezium" or "flat"`}},
		{"bad fixed_as", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, fixed_as: base64}]\n", nil, []string{"streams (a).fixed_as", `want "fixed", "hex" or "bytes"`}},
		{"bad retraction", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, retraction: none}]\n", nil, []string{"retraction"}},
		{"bad topic", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, topic: 'a b'}]\n", nil, []string{"topic"}},
		{"bad delivery", minimalYAML + "", map[string]string{"BRIDGE_KAFKA_DELIVERY": "maybe-once"}, []string{"kafka.delivery", `"maybe-once" is not "exactly-once" or "at-least-once"`}},
		{"bad compression", minimalYAML, map[string]string{"BRIDGE_KAFKA_COMPRESSION": "brotli"}, []string{"kafka.compression"}},
		{"small recv", minimalYAML, map[string]string{"BRIDGE_AMP_MAX_RECV_BYTES": "4MiB"}, []string{"amp.max_recv_bytes", "32 MiB"}},
		{"bad size", minimalYAML, map[string]string{"BRIDGE_AMP_MAX_RECV_BYTES": "lots"}, []string{"BRIDGE_AMP_MAX_RECV_BYTES", "unit"}},
		{"bad duration", minimalYAML, map[string]string{"BRIDGE_STREAMS_0_TRANSACTION_MAX_AGE": "soon"}, []string{"BRIDGE_STREAMS_0_TRANSACTION_MAX_AGE", "duration"}},
		{"sasl without password", minimalYAML, map[string]string{"BRIDGE_KAFKA_SASL_MECHANISM": "PLAIN", "BRIDGE_KAFKA_SASL_USERNAME": "u"}, []string{"kafka.sasl", "password"}},
		{"bad store", minimalYAML, map[string]string{"BRIDGE_CHECKPOINT_STORE": "s3"}, []string{"checkpoint.store", "redis or file"}},
		{"backfill to before from", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, backfill: {enabled: true, from: 10, to: 5}}]\n", nil,
			[]string{"streams[0] (a).backfill.to", "5 is not after backfill.from 10"}},
		{"backfill workers", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, backfill: {enabled: true, workers: 100}}]\n", nil,
			[]string{"backfill.workers", "1 to 64"}},
		{"backfill column", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, backfill: {enabled: true, column: 'block num'}}]\n", nil,
			[]string{"backfill.column", "plain column name"}},
		{"backfill at least once", "kafka: {brokers: [a:1], delivery: at-least-once}\nstreams: [{id: a, sql: x, backfill: {enabled: true}}]\n", nil,
			[]string{"backfill", "exactly-once"}},
		{"backfill unknown key", "kafka: {brokers: [a:1]}\nstreams: [{id: a, sql: x, backfill: {enable: true}}]\n", nil,
			[]string{"enable"}},
		{"registry url", minimalYAML + "registry: {url: 'registry:8081'}\n", nil, []string{"registry.url", "http://host:port"}},
		{"registry tls on http", minimalYAML + "registry: {url: 'http://r:8081', tls: {enabled: true}}\n", nil,
			[]string{"registry.tls.enabled", "https://"}},
		{"registry tls files without tls", minimalYAML + "registry: {url: 'https://r:8081', tls: {ca_file: ca.pem}}\n", nil,
			[]string{"registry.tls.ca_file is set but registry.tls.enabled is false"}},
		{"registry user without password", minimalYAML + "registry: {url: 'https://r:8081', username: u}\n", nil,
			[]string{"registry.username", "registry.password_file", "BRIDGE_REGISTRY_PASSWORD"}},
		{"registry password over http", minimalYAML + "registry: {url: 'http://r:8081', username: u}\n",
			map[string]string{"BRIDGE_REGISTRY_PASSWORD": "pw"}, []string{"clear text", "registry.allow_plaintext_auth"}},
		{"registry token over http", minimalYAML + "registry: {url: 'http://r:8081'}\n",
			map[string]string{"BRIDGE_REGISTRY_TOKEN": "tok"}, []string{"clear text", "registry.allow_plaintext_auth"}},
		{"registry basic and bearer", minimalYAML + "registry: {url: 'https://r:8081', username: u}\n",
			map[string]string{"BRIDGE_REGISTRY_PASSWORD": "pw", "BRIDGE_REGISTRY_TOKEN": "tok"}, []string{"registry.username", "registry.token_file", "one of them"}},
		{"registry credentials in url", minimalYAML + "registry: {url: 'https://u:pw@r:8081'}\n", nil, []string{"registry.url holds credentials"}},
		{"memory_limit word", minimalYAML + "memory_limit: lots\n", nil, []string{"memory_limit", `"lots"`, "want auto, off or a size"}},
		{"memory_limit small", minimalYAML + "memory_limit: 1MiB\n", nil, []string{"memory_limit", "at least 32MiB"}},
		{"registry options without url", minimalYAML + "registry: {username: u}\n", nil, []string{"registry.url", "is empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, tt.yaml), envMap(tt.env))
			require.Error(t, err)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"1": 1, "2KiB": 2048, "3 MiB": 3 << 20, "1GB": 1e9, "10B": 10} {
		got, err := parseByteSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "1.5MiB", "MiB", "12XB"} {
		_, err := parseByteSize(in)
		assert.Error(t, err, in)
		if err != nil {
			assert.Contains(t, err.Error(), "unit", in)
		}
	}
}

func TestBackfillConfigFromEnvAndDefaults(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(map[string]string{
		"BRIDGE_STREAMS_0_BACKFILL_ENABLED": "true", "BRIDGE_STREAMS_0_BACKFILL_FROM": "1000",
		"BRIDGE_STREAMS_0_RETENTION_BLOCKS": "256",
	}))
	require.NoError(t, err)
	bf := c.Streams[0].Backfill
	assert.Equal(t, BackfillConfig{Enabled: true, From: 1000, HandoverMargin: 256, Workers: 2, StepBlocks: 1000, Column: "_block_num"}, bf)
}

func TestEncodeConfig(t *testing.T) {
	sc := StreamConfig{ID: "s", Envelope: "flat", FixedAs: "bytes", KeyColumns: []string{"k"}}
	c, err := sc.EncodeConfig("t", "v1")
	require.NoError(t, err)
	assert.Equal(t, encode.Config{Stream: "s", Topic: "t", Version: "v1", KeyColumns: []string{"k"},
		Envelope: encode.EnvelopeFlat, FixedAs: encode.FixedAsBytes}, c)
	sc.FixedAs = "base64"
	_, err = sc.EncodeConfig("t", "v1")
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "streams (s).fixed_as")
}

// streamConfigs returns n streams, the first with a backfill of
// backfillWorkers workers when that is above 0.
func streamConfigs(n int, backfillWorkers int) []StreamConfig {
	out := make([]StreamConfig, n)
	if backfillWorkers > 0 {
		out[0].Backfill = BackfillConfig{Enabled: true, Workers: backfillWorkers}
	}
	return out
}

// TestReceiveWindowShares checks how amp.receive_window_bytes is shared
// by the Amp queries of a process: streams plus backfill workers, each an
// equal share, at least 64 KiB, and gRPC's own window (0) for a share of
// 16 MiB or more.
func TestReceiveWindowShares(t *testing.T) {
	for _, tc := range []struct {
		name    string
		total   ByteSize
		streams []StreamConfig
		want    int32
		queries int
	}{
		{"one stream keeps gRPC's window", 16 << 20, streamConfigs(1, 0), 0, 1},
		{"two streams", 16 << 20, streamConfigs(2, 0), 8 << 20, 2},
		{"100 streams", 16 << 20, streamConfigs(100, 0), 16 << 20 / 100, 100},
		{"backfill workers count", 16 << 20, streamConfigs(2, 2), 4 << 20, 4},
		{"at least 64 KiB", 16 << 20, streamConfigs(1000, 0), 64 << 10, 1000},
		{"0 keeps gRPC's window", 0, streamConfigs(100, 0), 0, 100},
	} {
		c := Config{Amp: AmpConfig{ReceiveWindowBytes: tc.total}, Streams: tc.streams}
		s := c.Source()
		assert.Equal(t, tc.want, s.ReceiveWindow, tc.name)
		assert.Equal(t, tc.queries, s.ReceiveWindowStreams, tc.name)
	}
}

// TestReadAheadIsTheProcesses checks that amp.read_ahead_bytes goes whole
// to the source Client, which all the streams and backfill workers share
// (source's TestReadBudgetIsTheClients): a share per query here would
// divide it twice.
func TestReadAheadIsTheProcesses(t *testing.T) {
	for _, streams := range [][]StreamConfig{streamConfigs(1, 0), streamConfigs(100, 0), streamConfigs(1, 4)} {
		for _, total := range []ByteSize{64 << 20, 0} {
			c := Config{Amp: AmpConfig{ReadAheadBytes: total}, Streams: streams}
			assert.Equal(t, int64(total), c.Source().ReadAheadBytes, "%d streams", len(streams))
		}
	}
}
