package sink

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	pem := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(pem, []byte("x"), 0o600))
	valid := func() Config {
		c := DefaultConfig()
		c.Brokers = []string{"127.0.0.1:9092"}
		return c
	}
	tests := []struct {
		name        string
		mut         func(*Config)
		errContains []string
	}{
		{name: "defaults are valid", mut: func(*Config) {}},
		{name: "at-least-once", mut: func(c *Config) { c.Delivery = DeliveryAtLeastOnce }},
		{name: "no brokers", mut: func(c *Config) { c.Brokers = nil }, errContains: []string{"kafka.brokers", "at least one"}},
		{name: "broker without port", mut: func(c *Config) { c.Brokers = []string{"localhost"} }, errContains: []string{"kafka.brokers", "host:port"}},
		{name: "metadata min age", mut: func(c *Config) { c.MetadataMinAge = 0 }, errContains: []string{"kafka.metadata_min_age"}},
		{name: "bad delivery", mut: func(c *Config) { c.Delivery = "exactly-twice" }, errContains: []string{"kafka.delivery", "exactly-twice"}},
		{name: "bad prefix", mut: func(c *Config) { c.TransactionalIDPrefix = "a b" }, errContains: []string{"kafka.transactional_id_prefix"}},
		{name: "txn timeout too large", mut: func(c *Config) { c.TransactionTimeout = time.Hour }, errContains: []string{"kafka.transaction_timeout", "transaction.max.timeout.ms"}},
		{name: "txn timeout zero", mut: func(c *Config) { c.TransactionTimeout = 0 }, errContains: []string{"kafka.transaction_timeout"}},
		{name: "end txn timeout", mut: func(c *Config) { c.EndTxnTimeout = 0 }, errContains: []string{"kafka.end_txn_timeout"}},
		{name: "delivery timeout", mut: func(c *Config) { c.DeliveryTimeout = -time.Second }, errContains: []string{"kafka.delivery_timeout"}},
		{name: "compression", mut: func(c *Config) { c.Compression = "brotli" }, errContains: []string{"kafka.compression", "none, lz4, zstd, snappy, gzip"}},
		{name: "each compression", mut: func(c *Config) {
			for _, x := range []Compression{CompressionNone, CompressionLZ4, CompressionZstd, CompressionSnappy, CompressionGzip} {
				if _, err := x.codec(); err != nil {
					panic(err)
				}
			}
			c.Compression = CompressionGzip
		}},
		{name: "negative linger", mut: func(c *Config) { c.Linger = -1 }, errContains: []string{"kafka.linger"}},
		{name: "batch bytes", mut: func(c *Config) { c.BatchMaxBytes = 10 }, errContains: []string{"kafka.batch_max_bytes"}},
		{name: "buffer smaller than batch", mut: func(c *Config) { c.MaxBufferedBytes = 1 << 10 }, errContains: []string{"kafka.max_buffered_bytes", ">= batch_max_bytes"}},
		{name: "buffered records", mut: func(c *Config) { c.MaxBufferedRecords = 0 }, errContains: []string{"kafka.max_buffered_records"}},
		{name: "read timeout", mut: func(c *Config) { c.ReadTimeout = 0 }, errContains: []string{"kafka.read_timeout"}},
		{name: "read timeout below txn timeout", mut: func(c *Config) { c.ReadTimeout = 20 * time.Second }, errContains: []string{"kafka.read_timeout", "must exceed transaction_timeout"}},
		{name: "fetch bytes", mut: func(c *Config) { c.FetchMaxBytes = 1 }, errContains: []string{"kafka.fetch_max_bytes"}},
		{name: "namespace", mut: func(c *Config) { c.MetricsNamespace = "" }, errContains: []string{"MetricsNamespace"}},
		{name: "mtls half", mut: func(c *Config) { c.TLS = TLSConfig{Enabled: true, CertFile: pem} }, errContains: []string{"kafka.tls", "together"}},
		{name: "tls missing file", mut: func(c *Config) { c.TLS = TLSConfig{Enabled: true, CAFile: filepath.Join(dir, "nope.pem")} }, errContains: []string{"kafka.tls.ca_file", "nope.pem"}},
		{name: "tls files without enabled", mut: func(c *Config) { c.TLS = TLSConfig{CAFile: pem} }, errContains: []string{"tls.enabled is false"}},
		{name: "tls ok", mut: func(c *Config) { c.TLS = TLSConfig{Enabled: true, CAFile: pem} }},
		{name: "sasl plain ok", mut: func(c *Config) { c.SASL = SASLConfig{Mechanism: SASLPlain, Username: "u", Password: "p"} }},
		{name: "sasl scram ok", mut: func(c *Config) { c.SASL = SASLConfig{Mechanism: SASLScramSHA512, Username: "u", Password: "p"} }},
		{name: "sasl no password", mut: func(c *Config) { c.SASL = SASLConfig{Mechanism: SASLScramSHA256, Username: "u"} }, errContains: []string{"kafka.sasl", "password"}},
		{name: "sasl bad mechanism", mut: func(c *Config) { c.SASL = SASLConfig{Mechanism: "GSSAPI", Username: "u", Password: "p"} }, errContains: []string{"kafka.sasl.mechanism", "GSSAPI"}},
		{name: "sasl credentials without mechanism", mut: func(c *Config) { c.SASL = SASLConfig{Username: "u", Password: "p"} }, errContains: []string{"sasl.mechanism is empty"}},
		{name: "several errors at once", mut: func(c *Config) { c.Brokers = nil; c.ReadTimeout = 0 }, errContains: []string{"kafka.brokers", "kafka.read_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mut(&c)
			err := c.Validate()
			if len(tt.errContains) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, s := range tt.errContains {
				assert.ErrorContains(t, err, s)
			}
		})
	}
}

func TestConfigRedactsSecrets(t *testing.T) {
	c := DefaultConfig()
	c.Brokers = []string{"b:9092"}
	c.SASL = SASLConfig{Mechanism: SASLScramSHA256, Username: "bridge", Password: "hunter2-secret"}
	var logBuf bytes.Buffer
	slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("config", "kafka", c, "sasl", c.SASL)
	outputs := map[string]string{
		"%v":       fmt.Sprintf("%v", c),
		"%+v":      fmt.Sprintf("%+v", c),
		"%#v":      fmt.Sprintf("%#v", c),
		"%s":       fmt.Sprintf("%s", c), //nolint:staticcheck // S1025: the test checks what the %s verb prints, not String()
		"sasl %+v": fmt.Sprintf("%+v", c.SASL),
		"sasl %#v": fmt.Sprintf("%#v", c.SASL),
		"slog":     logBuf.String(),
	}
	for name, out := range outputs {
		assert.NotContains(t, out, "hunter2", name)
		assert.Contains(t, out, redacted, name)
		assert.Contains(t, out, "bridge", name)
	}
}

func TestBudget(t *testing.T) {
	b := DefaultBudget()
	require.NoError(t, b.Validate())
	assert.Equal(t, 50_000, b.MaxRows)
	assert.Equal(t, 100*time.Millisecond, b.MaxAge)
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name string
		rows int
		age  time.Duration
		due  bool
	}{
		{"empty and young", 0, 0, false},
		{"rows below limit", 49_999, 99 * time.Millisecond, false},
		{"rows at limit", 50_000, 0, true},
		{"age at limit", 1, 100 * time.Millisecond, true},
		{"both over", 60_000, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.due, b.Due(tt.rows, t0, t0.Add(tt.age)))
		})
	}
	assert.Equal(t, 40*time.Millisecond, b.Remaining(t0, t0.Add(60*time.Millisecond)))
	assert.Equal(t, time.Duration(0), b.Remaining(t0, t0.Add(time.Second)))
	err := Budget{}.Validate()
	assert.ErrorContains(t, err, "transaction.max_rows")
	assert.ErrorContains(t, err, "transaction.max_age")
}

func TestTopicSpecValidate(t *testing.T) {
	tests := []struct {
		name        string
		spec        TopicSpec
		errContains []string
	}{
		{name: "data batch delete", spec: TopicSpec{Name: "d", Kind: TopicData, Partitions: 3, ReplicationFactor: -1}},
		{name: "data row compact", spec: TopicSpec{Name: "d", Kind: TopicData, KeyMode: KeyRow, Partitions: 3, ReplicationFactor: 1, CleanupPolicy: "delete,compact"}},
		{name: "control defaults", spec: TopicSpec{Name: "c", Kind: TopicControl, ReplicationFactor: -1}},
		{name: "data batch compacted", spec: TopicSpec{Name: "d", Kind: TopicData, Partitions: 1, ReplicationFactor: 1, CleanupPolicy: "compact,delete"},
			errContains: []string{`topic "d"`, "batch-key mode", "key: row"}},
		{name: "data row pure compact", spec: TopicSpec{Name: "d", Kind: TopicData, KeyMode: KeyRow, Partitions: 1, ReplicationFactor: 1, CleanupPolicy: "compact"},
			errContains: []string{"compact,delete"}},
		{name: "bad key mode", spec: TopicSpec{Name: "d", Kind: TopicData, KeyMode: "column", Partitions: 1, ReplicationFactor: 1},
			errContains: []string{"key mode"}},
		{name: "control with 3 partitions", spec: TopicSpec{Name: "c", Kind: TopicControl, Partitions: 3, ReplicationFactor: 1},
			errContains: []string{"control topic with 3 partitions", "exactly 1"}},
		{name: "control compacted", spec: TopicSpec{Name: "c", Kind: TopicControl, ReplicationFactor: 1, CleanupPolicy: "compact"},
			errContains: []string{"control topic cleanup policy"}},
		{name: "control key mode", spec: TopicSpec{Name: "c", Kind: TopicControl, KeyMode: KeyRow, ReplicationFactor: 1},
			errContains: []string{"key mode set on the control topic"}},
		{name: "bad name", spec: TopicSpec{Name: "a/b", Kind: TopicData, Partitions: 1, ReplicationFactor: 1},
			errContains: []string{"legal Kafka topic name"}},
		{name: "bad kind", spec: TopicSpec{Name: "x", Kind: "other", Partitions: 1, ReplicationFactor: 1},
			errContains: []string{`kind "other"`}},
		{name: "zero partitions", spec: TopicSpec{Name: "x", Kind: TopicData, ReplicationFactor: 1},
			errContains: []string{"partitions 0"}},
		{name: "zero replication", spec: TopicSpec{Name: "x", Kind: TopicData, Partitions: 1},
			errContains: []string{"replication factor 0"}},
		{name: "cleanup in configs", spec: TopicSpec{Name: "x", Kind: TopicData, Partitions: 1, ReplicationFactor: 1, Configs: map[string]string{"cleanup.policy": "compact"}},
			errContains: []string{"configs sets cleanup.policy"}},
		{name: "bad retention", spec: TopicSpec{Name: "x", Kind: TopicData, Partitions: 1, ReplicationFactor: 1, RetentionMs: -5},
			errContains: []string{"retention.ms -5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if len(tt.errContains) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrTopicInvalid)
			for _, s := range tt.errContains {
				assert.ErrorContains(t, err, s)
			}
		})
	}
}

func TestRetentionText(t *testing.T) {
	for ms, want := range map[int64]string{0: "broker default", -1: "infinite", 86_400_000: "24h0m0s", 1500: "1.5s"} {
		assert.Equal(t, want, retentionText(ms), "retention.ms %d", ms)
	}
}
