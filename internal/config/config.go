// Package config is the bridge's one configuration schema: the YAML file,
// its BRIDGE_… environment overrides and -set flags, the defaults, the
// validation with errors that name the key, and the mapping onto each
// stage's Config.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// Config is the whole bridge configuration: one YAML file, every key
// overridable by a BRIDGE_… environment variable (see applyEnv) and by flags.
type Config struct {
	// Amp is the Amp server the streams query.
	Amp AmpConfig `yaml:"amp"`
	// Kafka is the cluster the streams publish to.
	Kafka KafkaConfig `yaml:"kafka"`
	// Registry is the Confluent-compatible schema registry; empty URL means
	// Avro single-object encoding without a registry.
	Registry RegistryConfig `yaml:"registry"`
	// Checkpoint says where stream checkpoints live.
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
	// HTTP serves /metrics, /livez and /readyz.
	HTTP HTTPConfig `yaml:"http"`
	// Log configures structured logging.
	Log LogConfig `yaml:"log"`
	// Streams are the SQL queries published to Kafka.
	Streams []StreamConfig `yaml:"streams"`
}

// AmpConfig configures the Arrow Flight connection to Amp.
type AmpConfig struct {
	// Addr is host:port of Amp's Flight endpoint. Default 127.0.0.1:1602.
	Addr string `yaml:"addr"`
	// TLS enables TLS with the system roots or CAFile.
	TLS TLSConfig `yaml:"tls"`
	// TokenFile holds the bearer token; BRIDGE_AMP_TOKEN may hold it instead.
	TokenFile string `yaml:"token_file"`
	// Token is set only from the environment (BRIDGE_AMP_TOKEN) or TokenFile; never from YAML.
	Token Secret `yaml:"-"`
	// MaxRecvBytes is the gRPC receive limit. Default 64 MiB, at least 32 MiB.
	MaxRecvBytes ByteSize `yaml:"max_recv_bytes"`
	// ReconnectMin and ReconnectMax bound the reconnect backoff. Defaults 250ms and 30s.
	ReconnectMin time.Duration `yaml:"reconnect_min"`
	// ReconnectMax is the longest wait between reconnects.
	ReconnectMax time.Duration `yaml:"reconnect_max"`
}

// TLSConfig is a client TLS setting.
type TLSConfig struct {
	// Enabled turns TLS on.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM bundle of roots; empty means the system roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are the client certificate for mTLS.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the client key for mTLS.
	KeyFile string `yaml:"key_file"`
	// ServerName overrides the name checked in the server certificate.
	ServerName string `yaml:"server_name"`
}

// KafkaConfig configures the producer and the topics.
type KafkaConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string `yaml:"brokers"`
	// TransactionalIDPrefix prefixes each stream's transactional id
	// ({prefix}.{stream}). Default "amp-kafka-bridge".
	TransactionalIDPrefix string `yaml:"transactional_id_prefix"`
	// Delivery is exactly-once (default) or at-least-once.
	Delivery Delivery `yaml:"delivery"`
	// Compression is none, lz4, zstd (default), snappy or gzip.
	Compression string `yaml:"compression"`
	// ControlTopic records watermarks and undos. Default "amp-kafka-bridge.control".
	ControlTopic string `yaml:"control_topic"`
	// ReplicationFactor of topics the bridge creates. Default 3, or -1 for the broker default.
	ReplicationFactor int `yaml:"replication_factor"`
	// MaxBufferedBytes bounds the producer buffer (backpressure). Default 64 MiB.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// TLS for the brokers.
	TLS TLSConfig `yaml:"tls"`
	// SASL authentication.
	SASL SASLConfig `yaml:"sasl"`
}

// SASLConfig is Kafka SASL authentication.
type SASLConfig struct {
	// Mechanism is "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `yaml:"mechanism"`
	// Username is the SASL user.
	Username string `yaml:"username"`
	// PasswordFile holds the password; BRIDGE_KAFKA_SASL_PASSWORD may hold it instead.
	PasswordFile string `yaml:"password_file"`
	// Password is set only from the environment or PasswordFile.
	Password Secret `yaml:"-"`
}

// RegistryConfig is the Confluent-compatible schema registry.
type RegistryConfig struct {
	// URL of the registry; empty means single-object encoding.
	URL string `yaml:"url"`
	// Username for basic auth.
	Username string `yaml:"username"`
	// PasswordFile holds the basic-auth password; BRIDGE_REGISTRY_PASSWORD may hold it instead.
	PasswordFile string `yaml:"password_file"`
	// Password is set only from the environment or PasswordFile.
	Password Secret `yaml:"-"`
}

// CheckpointConfig says where checkpoints live.
type CheckpointConfig struct {
	// Store is redis (default) or file.
	Store string `yaml:"store"`
	// Dir is the directory of the file store. Default ".bridge-state".
	Dir string `yaml:"dir"`
	// Redis is the Redis store.
	Redis RedisConfig `yaml:"redis"`
}

// RedisConfig is the Redis checkpoint store.
type RedisConfig struct {
	// Addr is host:port. Default 127.0.0.1:6379.
	Addr string `yaml:"addr"`
	// Username is the ACL user.
	Username string `yaml:"username"`
	// PasswordFile holds the password; BRIDGE_CHECKPOINT_REDIS_PASSWORD may hold it instead.
	PasswordFile string `yaml:"password_file"`
	// Password is set only from the environment or PasswordFile.
	Password Secret `yaml:"-"`
	// DB is the database number.
	DB int `yaml:"db"`
	// KeyPrefix namespaces the keys. Default "ampbridge".
	KeyPrefix string `yaml:"key_prefix"`
	// TLS for Redis.
	TLS TLSConfig `yaml:"tls"`
}

// HTTPConfig is the operations endpoint.
type HTTPConfig struct {
	// Addr serves /metrics, /livez, /readyz. Default 127.0.0.1:9464; "off"
	// disables the endpoint.
	Addr string `yaml:"addr"`
	// Pprof also serves Go's CPU, heap and goroutine profiles under
	// /debug/pprof/ on Addr, for profiling a running bridge (the throughput
	// harness of test/perf uses it). Default false: profiles reveal
	// internals and cost CPU while they run, so enable it only on a
	// trusted address.
	Pprof bool `yaml:"pprof"`
}

// LogConfig configures slog.
type LogConfig struct {
	// Level is debug, info (default), warn or error.
	Level string `yaml:"level"`
	// Format is text (default) or json.
	Format string `yaml:"format"`
}

// StreamConfig is one SQL query published to Kafka.
type StreamConfig struct {
	// ID names the stream ([a-z0-9_.-]+). It keys the checkpoint, the
	// transactional id and the metrics; never change it for a running stream.
	ID string `yaml:"id"`
	// SQL is the query at Amp.
	SQL string `yaml:"sql"`
	// Topic is the data topic; may use {stream} and {network}. Default "amp.{stream}".
	Topic string `yaml:"topic"`
	// Partitions of the data topic when the bridge creates it. Default 1.
	Partitions int `yaml:"partitions"`
	// Key is batch (default: the batch id) or row (KeyColumns).
	Key KeyMode `yaml:"key"`
	// KeyColumns are the row-key columns in row mode.
	KeyColumns []string `yaml:"key_columns"`
	// Envelope is debezium (default) or flat.
	Envelope string `yaml:"envelope"`
	// FixedAs is how FixedSizeBinary columns (hashes, addresses) are
	// written: fixed (default: Avro fixed Bytes<n>), bytes (Avro bytes, for
	// readers that cannot read a fixed as bytes) or hex ("0x…" strings).
	FixedAs string `yaml:"fixed_as"`
	// Retraction is both (default), retract or tombstone.
	Retraction string `yaml:"retraction"`
	// RetentionBlocks is how deep a reorg can be undone. Default 128.
	RetentionBlocks uint64 `yaml:"retention_blocks"`
	// Transaction is the transaction budget.
	Transaction TxnBudget `yaml:"transaction"`
	// HeadPollInterval is how often the bridge asks Amp how far the
	// stream's tables are synced, for amp_bridge_behind_head_blocks.
	// Default 30s; a negative value (-1s) disables it.
	HeadPollInterval time.Duration `yaml:"head_poll_interval"`
	// Backfill publishes the stream's history in parallel batch queries
	// before it goes live.
	Backfill BackfillConfig `yaml:"backfill"`
}

// BackfillConfig publishes a stream's history [From, To) in parallel
// partitions of batch queries (rows with op r, source.snapshot true), then
// hands over to the live stream at To without gap or duplicate (design.md
// §7). It applies to a stream that has not gone live yet; once the stream
// is live it is ignored.
type BackfillConfig struct {
	// Enabled turns the backfill on.
	Enabled bool `yaml:"enabled"`
	// From is the first block to publish. Default 0.
	From uint64 `yaml:"from"`
	// To is the end of the backfill, exclusive: the live stream starts
	// there. 0 means HandoverMargin blocks below the head Amp has synced
	// when the backfill starts.
	To uint64 `yaml:"to"`
	// HandoverMargin is how far below Amp's synced head the backfill ends
	// and the live stream takes over: blocks that deep must be final,
	// because a reorg cannot undo backfilled rows. Default:
	// retention_blocks.
	HandoverMargin uint64 `yaml:"handover_margin"`
	// Workers is how many partitions run at a time. Default 2.
	Workers int `yaml:"workers"`
	// PartitionSize is the blocks per partition. Default: [From, To)
	// divided by Workers.
	PartitionSize uint64 `yaml:"partition_size"`
	// StepBlocks is the blocks per batch query and Kafka transaction
	// within a partition: the unit of progress. Default 1000.
	StepBlocks uint64 `yaml:"step_blocks"`
	// Column is the block number column of the query's output that the
	// partitions filter on. Default _block_num.
	Column string `yaml:"column"`
}

// EncodeConfig is the encoder configuration of the stream's data topic.
func (s StreamConfig) EncodeConfig(topic, version string) (encode.Config, error) {
	c := encode.Config{Stream: s.ID, Topic: topic, KeyColumns: s.KeyColumns, Version: version}
	var err error
	if c.Envelope, err = encode.ParseEnvelope(s.Envelope); err != nil {
		return c, fmt.Errorf("config streams (%s).envelope: %w: %w", s.ID, err, ErrInvalid)
	}
	if c.FixedAs, err = encode.ParseFixedAs(s.FixedAs); err != nil {
		return c, fmt.Errorf("config streams (%s).fixed_as: %w: %w", s.ID, err, ErrInvalid)
	}
	return c, nil
}

// TxnBudget closes a transaction at the first complete watermark after
// MaxRows rows or MaxAge.
type TxnBudget struct {
	// MaxRows per transaction. Default 50000.
	MaxRows int `yaml:"max_rows"`
	// MaxAge of a transaction. Default 100ms.
	MaxAge time.Duration `yaml:"max_age"`
}

// Delivery is the delivery guarantee.
type Delivery string

// Delivery modes.
const (
	ExactlyOnce  Delivery = "exactly-once"
	AtLeastOnce  Delivery = "at-least-once"
	defaultTopic          = "amp.{stream}"
)

// KeyMode is how records are keyed.
type KeyMode string

// Key modes.
const (
	KeyBatch KeyMode = "batch"
	KeyRow   KeyMode = "row"
)

// Secret is a string that never prints.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return s.String() }

// ByteSize is a size that parses units: 64MiB, 32MB, 1048576.
type ByteSize int64

// UnmarshalYAML parses a size with an optional unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseByteSize(n.Value)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

func parseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil || v < 0 {
				return 0, fmt.Errorf("size %q: want a whole number with an optional unit (B, KiB, MiB, GiB, KB, MB, GB)", s)
			}
			return ByteSize(v * u.mult), nil
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a whole number with an optional unit (B, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	return ByteSize(v), nil
}

var streamIDPattern = regexp.MustCompile(`^[a-z0-9_.-]+$`)

// Defaults fills every unset key with its documented default.
func (c *Config) Defaults() {
	setDefault(&c.Amp.Addr, "127.0.0.1:1602")
	setDefault(&c.Amp.MaxRecvBytes, 64<<20)
	setDefault(&c.Amp.ReconnectMin, 250*time.Millisecond)
	setDefault(&c.Amp.ReconnectMax, 30*time.Second)
	setDefault(&c.Kafka.TransactionalIDPrefix, "amp-kafka-bridge")
	setDefault(&c.Kafka.Delivery, ExactlyOnce)
	setDefault(&c.Kafka.Compression, "zstd")
	setDefault(&c.Kafka.ControlTopic, "amp-kafka-bridge.control")
	setDefault(&c.Kafka.ReplicationFactor, 3)
	setDefault(&c.Kafka.MaxBufferedBytes, 64<<20)
	setDefault(&c.Checkpoint.Store, "redis")
	setDefault(&c.Checkpoint.Dir, ".bridge-state")
	setDefault(&c.Checkpoint.Redis.Addr, "127.0.0.1:6379")
	setDefault(&c.Checkpoint.Redis.KeyPrefix, "ampbridge")
	setDefault(&c.HTTP.Addr, "127.0.0.1:9464")
	setDefault(&c.Log.Level, "info")
	setDefault(&c.Log.Format, "text")
	for i := range c.Streams {
		s := &c.Streams[i]
		setDefault(&s.Topic, defaultTopic)
		setDefault(&s.Partitions, 1)
		setDefault(&s.Key, KeyBatch)
		setDefault(&s.Envelope, "debezium")
		setDefault(&s.FixedAs, "fixed")
		setDefault(&s.Retraction, "both")
		setDefault(&s.RetentionBlocks, 128)
		setDefault(&s.Transaction.MaxRows, 50000)
		setDefault(&s.Transaction.MaxAge, 100*time.Millisecond)
		setDefault(&s.HeadPollInterval, 30*time.Second)
		setDefault(&s.Backfill.HandoverMargin, s.RetentionBlocks)
		setDefault(&s.Backfill.Workers, 2)
		setDefault(&s.Backfill.StepBlocks, 1000)
		setDefault(&s.Backfill.Column, "_block_num")
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

var backfillColumnPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks every key and names the key and the expected form in its
// error. All problems are reported together.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: "+format, append([]any{key}, args...)...))
	}
	if c.Amp.Addr == "" || !strings.Contains(c.Amp.Addr, ":") {
		bad("amp.addr", "%q is not host:port", c.Amp.Addr)
	}
	if c.Amp.MaxRecvBytes < 32<<20 {
		bad("amp.max_recv_bytes", "%d is below 32MiB; Amp's batches need at least that", c.Amp.MaxRecvBytes)
	}
	if c.Amp.ReconnectMin <= 0 || c.Amp.ReconnectMax < c.Amp.ReconnectMin {
		bad("amp.reconnect_min/reconnect_max", "want 0 < reconnect_min <= reconnect_max, got %s and %s", c.Amp.ReconnectMin, c.Amp.ReconnectMax)
	}
	if len(c.Kafka.Brokers) == 0 {
		bad("kafka.brokers", "is empty; list at least one host:port (or set BRIDGE_KAFKA_BROKERS=host:port,...)")
	}
	if !slices.Contains([]Delivery{ExactlyOnce, AtLeastOnce}, c.Kafka.Delivery) {
		bad("kafka.delivery", "%q: want exactly-once or at-least-once", c.Kafka.Delivery)
	}
	if !slices.Contains([]string{"none", "lz4", "zstd", "snappy", "gzip"}, c.Kafka.Compression) {
		bad("kafka.compression", "%q: want none, lz4, zstd, snappy or gzip", c.Kafka.Compression)
	}
	if c.Kafka.ReplicationFactor == 0 || c.Kafka.ReplicationFactor < -1 {
		bad("kafka.replication_factor", "%d: want a positive number, or -1 for the broker default", c.Kafka.ReplicationFactor)
	}
	if !slices.Contains([]string{"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}, c.Kafka.SASL.Mechanism) {
		bad("kafka.sasl.mechanism", "%q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.Kafka.SASL.Mechanism)
	}
	if c.Kafka.SASL.Mechanism != "" && (c.Kafka.SASL.Username == "" || c.Kafka.SASL.Password == "") {
		bad("kafka.sasl", "mechanism %s needs username and a password (BRIDGE_KAFKA_SASL_PASSWORD or password_file)", c.Kafka.SASL.Mechanism)
	}
	switch c.Checkpoint.Store {
	case "redis":
		if !strings.Contains(c.Checkpoint.Redis.Addr, ":") {
			bad("checkpoint.redis.addr", "%q is not host:port", c.Checkpoint.Redis.Addr)
		}
	case "file":
		if c.Checkpoint.Dir == "" {
			bad("checkpoint.dir", "is empty; name a directory for the file store")
		}
	default:
		bad("checkpoint.store", "%q: want redis or file", c.Checkpoint.Store)
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, c.Log.Level) {
		bad("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	if !slices.Contains([]string{"text", "json"}, c.Log.Format) {
		bad("log.format", "%q: want text or json", c.Log.Format)
	}
	if len(c.Streams) == 0 {
		bad("streams", "is empty; configure at least one stream with an id and sql")
	}
	seen := map[string]bool{}
	for i, s := range c.Streams {
		key := fmt.Sprintf("streams[%d]", i)
		if s.ID != "" {
			key = fmt.Sprintf("streams[%d] (%s)", i, s.ID)
		}
		if !streamIDPattern.MatchString(s.ID) {
			bad(key+".id", "%q: want lowercase letters, digits, '_', '.' or '-'", s.ID)
		}
		if seen[s.ID] {
			bad(key+".id", "%q is used by two streams; ids must be unique", s.ID)
		}
		seen[s.ID] = true
		if strings.TrimSpace(s.SQL) == "" {
			bad(key+".sql", "is empty; give the query to stream")
		}
		if s.Topic == "" || strings.ContainsAny(strings.NewReplacer("{stream}", "", "{network}", "").Replace(s.Topic), "{} /") {
			bad(key+".topic", "%q: want a Kafka topic name, optionally with {stream} and {network}", s.Topic)
		}
		if s.Partitions < 1 {
			bad(key+".partitions", "%d: want at least 1", s.Partitions)
		}
		switch s.Key {
		case KeyBatch:
			if len(s.KeyColumns) > 0 {
				bad(key+".key_columns", "is set but key is batch; set key: row to key by columns")
			}
		case KeyRow:
			if len(s.KeyColumns) == 0 {
				bad(key+".key_columns", "is empty; key: row needs the columns that identify a row")
			}
		default:
			bad(key+".key", "%q: want batch or row", s.Key)
		}
		if !slices.Contains([]string{"debezium", "flat"}, s.Envelope) {
			bad(key+".envelope", "%q: want debezium or flat", s.Envelope)
		}
		if !slices.Contains([]string{"fixed", "bytes", "hex"}, s.FixedAs) {
			bad(key+".fixed_as", "%q: want fixed, bytes or hex", s.FixedAs)
		}
		if !slices.Contains([]string{"both", "retract", "tombstone"}, s.Retraction) {
			bad(key+".retraction", "%q: want both, retract or tombstone", s.Retraction)
		}
		if s.Transaction.MaxRows < 1 || s.Transaction.MaxAge <= 0 {
			bad(key+".transaction", "max_rows %d and max_age %s must both be positive", s.Transaction.MaxRows, s.Transaction.MaxAge)
		}
		if b := s.Backfill; b.Enabled {
			if b.To != 0 && b.To <= b.From {
				bad(key+".backfill.to", "%d is not after backfill.from %d; leave it 0 to backfill up to the head", b.To, b.From)
			}
			if b.Workers < 1 || b.Workers > 64 {
				bad(key+".backfill.workers", "%d: want 1 to 64", b.Workers)
			}
			if b.StepBlocks < 1 {
				bad(key+".backfill.step_blocks", "must be at least 1")
			}
			if !backfillColumnPattern.MatchString(b.Column) {
				bad(key+".backfill.column", "%q: want a plain column name of the query's output ([A-Za-z_][A-Za-z0-9_]*)", b.Column)
			}
			if c.Kafka.Delivery != ExactlyOnce {
				bad(key+".backfill", "needs kafka.delivery exactly-once: its progress is recorded in the transactions that publish it")
			}
		}
	}
	return errors.Join(errs...)
}

// LoadConfig reads the YAML file (path "" means no file), applies the
// environment overrides, reads secrets from the environment or files, fills
// defaults and validates.
func LoadConfig(path string, env func(string) (string, bool)) (*Config, error) {
	var c Config
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("reading config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("parsing config %s: %w", path, err)
		}
	}
	if err := applyEnv(reflect.ValueOf(&c).Elem(), "BRIDGE", env); err != nil {
		return nil, err
	}
	if err := c.loadSecrets(env); err != nil {
		return nil, err
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) loadSecrets(env func(string) (string, bool)) error {
	secrets := []struct {
		dst    *Secret
		envKey string
		file   string
		key    string
	}{
		{&c.Amp.Token, "BRIDGE_AMP_TOKEN", c.Amp.TokenFile, "amp.token_file"},
		{&c.Kafka.SASL.Password, "BRIDGE_KAFKA_SASL_PASSWORD", c.Kafka.SASL.PasswordFile, "kafka.sasl.password_file"},
		{&c.Registry.Password, "BRIDGE_REGISTRY_PASSWORD", c.Registry.PasswordFile, "registry.password_file"},
		{&c.Checkpoint.Redis.Password, "BRIDGE_CHECKPOINT_REDIS_PASSWORD", c.Checkpoint.Redis.PasswordFile, "checkpoint.redis.password_file"},
	}
	for _, s := range secrets {
		if v, ok := env(s.envKey); ok && v != "" {
			*s.dst = Secret(v)
			continue
		}
		if s.file != "" {
			b, err := os.ReadFile(s.file)
			if err != nil {
				return fmt.Errorf("config %s: reading secret: %w", s.key, err)
			}
			*s.dst = Secret(strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// applyEnv overrides struct fields from environment variables named after
// their YAML path: BRIDGE_KAFKA_BROKERS=a:9092,b:9092 sets kafka.brokers,
// BRIDGE_STREAMS_0_SQL sets streams[0].sql. Lists take comma-separated
// values. Secrets (yaml:"-") are read separately.
func applyEnv(v reflect.Value, prefix string, env func(string) (string, bool)) error {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		name := prefix + "_" + strings.ToUpper(tag)
		fv := v.Field(i)
		if f.Type == reflect.TypeFor[[]StreamConfig]() {
			for j := range fv.Len() {
				if err := applyEnv(fv.Index(j), fmt.Sprintf("%s_%d", name, j), env); err != nil {
					return err
				}
			}
			continue
		}
		if fv.Kind() == reflect.Struct {
			if err := applyEnv(fv, name, env); err != nil {
				return err
			}
			continue
		}
		raw, ok := env(name)
		if !ok {
			continue
		}
		if err := setFromString(fv, raw); err != nil {
			return fmt.Errorf("environment %s=%q: %w", name, raw, err)
		}
	}
	return nil
}

func setFromString(fv reflect.Value, raw string) error {
	switch fv.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("want a duration such as 100ms or 30s: %w", err)
		}
		fv.SetInt(int64(d))
		return nil
	case ByteSize:
		b, err := parseByteSize(raw)
		if err != nil {
			return err
		}
		fv.SetInt(int64(b))
		return nil
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("want true or false")
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number")
		}
		fv.SetInt(n)
	case reflect.Uint64:
		n, err := strconv.ParseUint(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want a non-negative whole number")
		}
		fv.SetUint(n)
	case reflect.Slice:
		parts := strings.Split(raw, ",")
		out := reflect.MakeSlice(fv.Type(), 0, len(parts))
		for _, p := range parts {
			if p = strings.TrimSpace(p); p != "" {
				out = reflect.Append(out, reflect.ValueOf(p))
			}
		}
		fv.Set(out)
	default:
		return fmt.Errorf("unsupported field kind %s", fv.Kind())
	}
	return nil
}

// secretEnv are the environment variables that hold secrets; they can't be
// set with -set (a command line is visible to every user of the machine).
var secretEnv = []string{"BRIDGE_AMP_TOKEN", "BRIDGE_KAFKA_SASL_PASSWORD", "BRIDGE_REGISTRY_PASSWORD", "BRIDGE_CHECKPOINT_REDIS_PASSWORD"}

// SetFlags collects repeated -set path=value flags: the same overrides as
// the BRIDGE_… environment variables, named by their YAML path
// (kafka.brokers=a:9092,b:9092, streams.0.sql=...). Flags win over the
// environment, which wins over the file.
type SetFlags map[string]string

// String implements flag.Value.
func (s SetFlags) String() string { return fmt.Sprint(map[string]string(s)) }

// Set implements flag.Value.
func (s SetFlags) Set(v string) error {
	path, value, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(path) == "" {
		return fmt.Errorf("want -set path=value, e.g. -set kafka.brokers=127.0.0.1:9092")
	}
	name := "BRIDGE_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(strings.TrimSpace(path)))
	if slices.Contains(secretEnv, name) {
		return fmt.Errorf("-set %s: secrets come only from the environment (%s) or a file, never from the command line", path, name)
	}
	s[name] = value
	return nil
}

// Lookup returns an environment lookup where the flags win over env.
func (s SetFlags) Lookup(env func(string) (string, bool)) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := s[k]; ok {
			return v, true
		}
		return env(k)
	}
}

// ErrInvalid marks a configuration a stream cannot run with; errors that
// wrap it are permanent: retrying cannot fix them.
var ErrInvalid = errors.New("invalid stream configuration")

// TopicName resolves the data topic template for the stream's networks.
func (s StreamConfig) TopicName(networks []string) (string, error) {
	t := strings.ReplaceAll(s.Topic, "{stream}", s.ID)
	if !strings.Contains(t, "{network}") {
		return t, nil
	}
	if len(networks) != 1 {
		return "", fmt.Errorf("config streams (%s).topic %q uses {network}, but the stream spans networks %v; "+
			"name the topic without {network}: %w", s.ID, s.Topic, networks, ErrInvalid)
	}
	return strings.ReplaceAll(t, "{network}", networks[0]), nil
}

// Sink maps the configuration onto the sink's.
func (c *Config) Sink() sink.Config {
	k := sink.DefaultConfig()
	k.Brokers = c.Kafka.Brokers
	k.Delivery = sink.Delivery(c.Kafka.Delivery)
	k.TransactionalIDPrefix = c.Kafka.TransactionalIDPrefix
	k.Compression = sink.Compression(c.Kafka.Compression)
	k.MaxBufferedBytes = int(c.Kafka.MaxBufferedBytes)
	k.TLS = sink.TLSConfig{Enabled: c.Kafka.TLS.Enabled, CAFile: c.Kafka.TLS.CAFile, CertFile: c.Kafka.TLS.CertFile,
		KeyFile: c.Kafka.TLS.KeyFile, ServerName: c.Kafka.TLS.ServerName}
	k.SASL = sink.SASLConfig{Mechanism: sink.SASLMechanism(c.Kafka.SASL.Mechanism), Username: c.Kafka.SASL.Username,
		Password: string(c.Kafka.SASL.Password)}
	return k
}

// Source maps the configuration onto the source's.
func (c *Config) Source() source.Config {
	s := source.DefaultConfig()
	s.Addr = c.Amp.Addr
	s.TLS = source.TLSConfig{Enabled: c.Amp.TLS.Enabled, CAFile: c.Amp.TLS.CAFile, CertFile: c.Amp.TLS.CertFile,
		KeyFile: c.Amp.TLS.KeyFile, ServerName: c.Amp.TLS.ServerName}
	s.Token = string(c.Amp.Token)
	s.MaxRecvMsgSize = int(c.Amp.MaxRecvBytes)
	s.Backoff.Initial = c.Amp.ReconnectMin
	s.Backoff.Max = c.Amp.ReconnectMax
	return s
}
