// Package config is the bridge's one configuration schema: the YAML file,
// its BRIDGE_… environment overrides and -set flags, the defaults, the
// validation with errors that name the key, and the mapping onto each
// stage's Config.
package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
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
	// StartupTimeout bounds how long `bridge run` waits at start for Kafka,
	// the checkpoint store and the registry to answer (each is retried with
	// backoff, a log line per attempt). Default 0: wait for ever, as a
	// sidecar that starts before its broker should.
	StartupTimeout time.Duration `yaml:"startup_timeout"`
	// ExitOnStreamFailure makes `bridge run` exit non-zero as soon as one
	// stream stops on a permanent error. Default false: the other streams go
	// on, and the process exits once every stream has stopped.
	ExitOnStreamFailure bool `yaml:"exit_on_stream_failure"`
	// Cluster makes the process a member of a cluster of bridges that
	// share the streams (cluster.go).
	Cluster ClusterConfig `yaml:"cluster"`
	// MemoryLimit is the Go runtime's soft memory limit that `bridge run`
	// sets at start (runtime/debug.SetMemoryLimit) unless GOMEMLIMIT is
	// set: "auto" (default: AutoMemoryLimit, at most 90% of the cgroup's
	// memory limit), "off", or a size such as 256MiB.
	MemoryLimit string `yaml:"memory_limit"`
}

// Memory limit modes (memory_limit); any other value is a size.
const (
	MemoryLimitAuto = "auto"
	MemoryLimitOff  = "off"
)

// minMemoryLimit is the smallest memory_limit accepted.
const minMemoryLimit = 32 << 20

// MemoryLimitBytes is memory_limit as a number of bytes: 0 for auto, -1
// for off. Validate has checked it.
func (c *Config) MemoryLimitBytes() int64 {
	switch c.MemoryLimit {
	case "", MemoryLimitAuto:
		return 0
	case MemoryLimitOff:
		return -1
	}
	b, err := parseByteSize(c.MemoryLimit)
	if err != nil {
		return 0
	}
	return int64(b)
}

// AutoMemoryLimit is memory_limit: auto before the cgroup's cap: what the
// configured buffers can hold at once, so that the Go heap stays near what
// the configuration allows rather than growing to twice its live size
// between collections: 64 MiB (the runtime and the connections) plus
// amp.read_ahead_bytes (Amp's messages received and not yet encoded, by
// all streams and backfill workers together: the source Client's read
// budget) plus 1.5 ×
// kafka.max_buffered_bytes (the encoded records of all streams, acknowledged
// or not: the producer's buffer and the next microbatch held while a commit
// runs) plus 512 KiB per stream (its producer, reader, Flight stream and
// encoder: an idle stream's heap, measured with 1 and 100 streams; what a
// busy stream has in flight is bounded process-wide, by the terms above
// and amp.receive_window_bytes). 144.5 MiB with the defaults and one
// stream, 194 MiB with 100.
func (c *Config) AutoMemoryLimit() int64 {
	return 64<<20 + int64(c.Amp.ReadAheadBytes) + 3*int64(c.Kafka.MaxBufferedBytes)/2 + int64(len(c.Streams))*perStreamMemory
}

// perStreamMemory is AutoMemoryLimit's part for each stream.
const perStreamMemory = 512 << 10

// AmpConfig configures the Arrow Flight connection to Amp: every field of
// source.Config is reachable here (see Source).
type AmpConfig struct {
	// Addr is host:port of Amp's Flight endpoint. Default 127.0.0.1:1602.
	Addr string `yaml:"addr"`
	// TLS enables TLS with the system roots or CAFile.
	TLS TLSConfig `yaml:"tls"`
	// TokenFile holds the bearer token; BRIDGE_AMP_TOKEN may hold it instead.
	TokenFile string `yaml:"token_file"`
	// Token is set only from the environment (BRIDGE_AMP_TOKEN) or TokenFile; never from YAML.
	Token Secret `yaml:"-"`
	// AllowPlaintextToken lets the token be sent without TLS
	// (source.Config.AllowPlaintextToken): a token with tls.enabled false is
	// refused unless it is true, and then `bridge run` warns at start.
	// Default false.
	AllowPlaintextToken bool `yaml:"allow_plaintext_token"`
	// MaxRecvBytes is the gRPC receive limit (source.Config.MaxRecvMsgSize).
	// Default source.DefaultMaxRecvMsgSize (64 MiB), at least 32 MiB.
	MaxRecvBytes ByteSize `yaml:"max_recv_bytes"`
	// RequestTimeout bounds each GetFlightInfo call (planning only).
	// Default: source.DefaultConfig (30s).
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ReadAhead is how many envelopes are decoded ahead of the consumer.
	// Default: source.DefaultConfig (4).
	ReadAhead int `yaml:"read_ahead"`
	// ReadAheadBytes bounds the bytes of Amp's messages that the process
	// holds, all streams and backfill workers together, from before a
	// message is received until its rows are encoded (the source Client's
	// read budget, source.Config.ReadAheadBytes), so that it does not grow
	// with the number of streams; 0 means only ReadAhead bounds it.
	// Default: source.DefaultConfig.
	ReadAheadBytes ByteSize `yaml:"read_ahead_bytes"`
	// ReceiveWindowBytes is what Amp may have sent the process's streams
	// before their readers read it, all streams and backfill workers
	// together: each gets an equal share as its HTTP/2 window, at least 64
	// KiB. When a share would reach 16 MiB (one stream with the default)
	// gRPC keeps its own window, grown to the measured bandwidth-delay
	// product; 0 always does. Default 16 MiB.
	ReceiveWindowBytes ByteSize `yaml:"receive_window_bytes"`
	// ReconnectMin is the first reconnect delay (source backoff Initial);
	// it also bounds the restart of a failed stream. Default 250ms.
	ReconnectMin time.Duration `yaml:"reconnect_min"`
	// ReconnectMax is the longest wait between reconnects. Default 30s.
	ReconnectMax time.Duration `yaml:"reconnect_max"`
	// ReconnectMultiplier grows the delay after each failed attempt.
	// Default 2.
	ReconnectMultiplier float64 `yaml:"reconnect_multiplier"`
	// ReconnectJitter is the largest fraction taken off a delay at random,
	// in [0,1]. Default 0.2.
	ReconnectJitter float64 `yaml:"reconnect_jitter"`
	// ReconnectMaxAttempts is how many consecutive failed attempts end the
	// stream; 0 retries forever (default).
	ReconnectMaxAttempts int `yaml:"reconnect_max_attempts"`
	// KeepaliveTime makes gRPC ping after this much inactivity; 0 (default)
	// is off.
	KeepaliveTime time.Duration `yaml:"keepalive_time"`
	// KeepaliveTimeout is how long a ping ack may take. Default 20s.
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
}

// TLSConfig is a client TLS setting ({enabled, ca_file, cert_file,
// key_file, server_name}): the same type, and the same loader, for Amp,
// Kafka and Redis.
type TLSConfig = tlsconfig.Config

// KafkaConfig configures the producer and the topics: every field of
// sink.Config but MetricsNamespace is reachable here (see Sink).
type KafkaConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string `yaml:"brokers"`
	// ClientID is sent to the brokers. Default: sink.DefaultConfig.
	ClientID string `yaml:"client_id"`
	// TransactionalIDPrefix prefixes each stream's transactional id
	// ({prefix}.{stream}). Default: sink.DefaultConfig.
	TransactionalIDPrefix string `yaml:"transactional_id_prefix"`
	// Delivery is exactly-once (default) or at-least-once.
	Delivery Delivery `yaml:"delivery"`
	// Compression is none, lz4, zstd (default), snappy or gzip.
	Compression Compression `yaml:"compression"`
	// ControlTopic records watermarks and undos. Default "amp-kafka-bridge.control".
	ControlTopic string `yaml:"control_topic"`
	// ReplicationFactor of topics the bridge creates. Default 3, or -1 for the broker default.
	ReplicationFactor int `yaml:"replication_factor"`
	// MaxBufferedBytes bounds the producer buffer (backpressure); the
	// encoded records of all streams together are bounded by 1.5 × it.
	// Default 32 MiB.
	MaxBufferedBytes ByteSize `yaml:"max_buffered_bytes"`
	// MaxBufferedRecords bounds the buffered records. Default 1,000,000.
	MaxBufferedRecords int `yaml:"max_buffered_records"`
	// DialTimeout bounds each connection attempt. Default 10s.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// MetadataMinAge is the minimum time between metadata refreshes. Default 1s.
	MetadataMinAge time.Duration `yaml:"metadata_min_age"`
	// TransactionTimeout is transaction.timeout.ms. Default 30s.
	TransactionTimeout time.Duration `yaml:"transaction_timeout"`
	// EndTxnTimeout bounds committing or aborting a transaction. Default 30s.
	EndTxnTimeout time.Duration `yaml:"end_txn_timeout"`
	// DeliveryTimeout bounds how long a record may stay unacknowledged. Default 30s.
	DeliveryTimeout time.Duration `yaml:"delivery_timeout"`
	// Linger is how long a partition waits for more records. Default 5ms.
	Linger time.Duration `yaml:"linger"`
	// ClientMetrics pushes the Kafka clients' metrics to brokers that ask
	// for them (KIP-714). Default false.
	ClientMetrics bool `yaml:"client_metrics"`
	// BatchMaxBytes caps one record batch. Default 1 MiB.
	BatchMaxBytes ByteSize `yaml:"batch_max_bytes"`
	// ReadTimeout bounds one read-back or control-topic read; it must
	// exceed TransactionTimeout. Default 60s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// FetchMaxBytes caps one fetch response during reads. Default 16 MiB.
	FetchMaxBytes ByteSize `yaml:"fetch_max_bytes"`
	// TLS for the brokers.
	TLS TLSConfig `yaml:"tls"`
	// SASL authentication.
	SASL SASLConfig `yaml:"sasl"`
}

// SASLConfig is Kafka SASL authentication.
type SASLConfig struct {
	// Mechanism is "", PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism SASLMechanism `yaml:"mechanism"`
	// Username is the SASL user.
	Username string `yaml:"username"`
	// PasswordFile holds the password; BRIDGE_KAFKA_SASL_PASSWORD may hold it instead.
	PasswordFile string `yaml:"password_file"`
	// Password is set only from the environment or PasswordFile.
	Password Secret `yaml:"-"`
}

// RegistryConfig is the Confluent-compatible schema registry: every field
// of encode.RegistryConfig is reachable here (see SchemaRegistry).
type RegistryConfig struct {
	// URL of the registry; empty means single-object encoding.
	URL string `yaml:"url"`
	// TLS for an https:// URL: a CA file instead of the system roots, a
	// client certificate for mutual TLS.
	TLS TLSConfig `yaml:"tls"`
	// Username for basic auth.
	Username string `yaml:"username"`
	// PasswordFile holds the basic-auth password; BRIDGE_REGISTRY_PASSWORD may hold it instead.
	PasswordFile string `yaml:"password_file"`
	// Password is set only from the environment or PasswordFile.
	Password Secret `yaml:"-"`
	// TokenFile holds a bearer token (instead of basic auth);
	// BRIDGE_REGISTRY_TOKEN may hold it instead.
	TokenFile string `yaml:"token_file"`
	// Token is set only from the environment or TokenFile.
	Token Secret `yaml:"-"`
	// AllowPlaintextAuth lets a password or token go to an http:// URL.
	// Default false: refused.
	AllowPlaintextAuth bool `yaml:"allow_plaintext_auth"`
	// Timeout bounds each request to the registry. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// CheckpointConfig says where checkpoints live.
type CheckpointConfig struct {
	// Store is StoreRedis (default) or StoreFile.
	Store StoreKind `yaml:"store"`
	// Dir is the directory of the file store. Default ".bridge-state".
	Dir string `yaml:"dir"`
	// Redis is the Redis store.
	Redis RedisConfig `yaml:"redis"`
	// Timeout bounds each call to the checkpoint store. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// StoreKind names a checkpoint store.
type StoreKind string

// Checkpoint stores, the values of checkpoint.store.
const (
	StoreRedis StoreKind = "redis"
	StoreFile  StoreKind = "file"
)

// RedisConfig is the Redis checkpoint store: every field of
// offsets.RedisConfig is reachable here (see Redis).
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
	// KeyPrefix namespaces the keys ("{prefix}:{stream}:…"). Default
	// "ampbridge" (offsets.DefaultKeyPrefix without its colon).
	KeyPrefix string `yaml:"key_prefix"`
	// DialTimeout bounds connecting. Default offsets.DefaultDialTimeout.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// ReadTimeout bounds reading a reply. Default offsets.DefaultReadTimeout.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds writing a command. Default offsets.DefaultWriteTimeout.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// MaxRetries is how often a command is retried on a network error; -1
	// disables retries. Default offsets.DefaultMaxRetries.
	MaxRetries int `yaml:"max_retries"`
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
	// ReadyTimeout is how long a call to Amp, Kafka or the checkpoint store
	// may be in flight before its stream reports not ready on /readyz.
	// Default 10s.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// LiveTimeout is how long such a call may be in flight before /livez
	// fails: the run loop is stuck past every deadline and only a restart
	// clears it. Default 5m; it must exceed every service timeout.
	LiveTimeout time.Duration `yaml:"live_timeout"`
	// ProbeInterval is how often the registry, the checkpoint store and
	// Kafka are probed for /readyz. Default 2s.
	ProbeInterval time.Duration `yaml:"probe_interval"`
}

// LogConfig configures slog.
type LogConfig struct {
	// Level is debug, info (default), warn or error.
	Level LogLevel `yaml:"level"`
	// Format is text (default) or json.
	Format LogFormat `yaml:"format"`
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
	Envelope Envelope `yaml:"envelope"`
	// FixedAs is how FixedSizeBinary columns (hashes, addresses) are
	// written: fixed (default: Avro fixed Bytes<n>), bytes (Avro bytes, for
	// readers that cannot read a fixed as bytes) or hex ("0x…" strings).
	FixedAs FixedAs `yaml:"fixed_as"`
	// Retraction is both (default), retract or tombstone.
	Retraction Retraction `yaml:"retraction"`
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
	// Labels are CSV files of reference data joined onto every row by a
	// key column (labels.go).
	Labels []LabelConfig `yaml:"labels"`

	// Start positions and one-shot loads (start.go).

	// Start is where a new stream's live part begins: earliest (default),
	// latest (the first block after Amp's synced head at the first start)
	// or a block number. Ignored once the stream has a checkpoint.
	Start StartPosition `yaml:"start"`
	// Mode is live (default) or once: publish [backfill.from,
	// backfill.to) with the backfill's machinery, then stop.
	Mode StreamMode `yaml:"mode"`

	// SchemaEvolution is backward (default), none or full: which changes
	// of the SQL or of the result schema the stream accepts under its id
	// (evolution.go).
	SchemaEvolution SchemaEvolution `yaml:"schema_evolution"`
	// Weight is the stream's share of a cluster member's load (cluster
	// mode spreads streams by weight; a backfill multiplies it by
	// cluster.backfill_weight). Default 1.
	Weight int `yaml:"weight"`
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
	if c.Envelope, err = encode.ParseEnvelope(string(s.Envelope)); err != nil {
		return c, fmt.Errorf("config streams (%s).envelope: %w: %w", s.ID, err, ErrInvalid)
	}
	if c.FixedAs, err = encode.ParseFixedAs(string(s.FixedAs)); err != nil {
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

const defaultTopic = "amp.{stream}"

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
		// A TypeError is collected with the file's other problems instead
		// of ending the decoding.
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
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

// Defaults fills every unset key with its documented default. A stage's
// setting takes its default from the stage (sink.DefaultConfig,
// source.DefaultConfig, offsets.DefaultRedisConfig): it is defined once,
// there.
func (c *Config) Defaults() {
	c.defaultsTop()
	c.defaultsStreams()
}

// defaultsTop fills the keys outside streams. LoadConfig applies it before
// reading the file, so that a value set explicitly (linger: 0) is kept.
func (c *Config) defaultsTop() {
	src, snk, rds := source.DefaultConfig(), sink.DefaultConfig(), offsets.DefaultRedisConfig()
	setDefault(&c.MemoryLimit, MemoryLimitAuto)
	a := &c.Amp
	setDefault(&a.Addr, "127.0.0.1:1602")
	setDefault(&a.MaxRecvBytes, ByteSize(src.MaxRecvMsgSize))
	setDefault(&a.RequestTimeout, src.RequestTimeout)
	setDefault(&a.ReadAhead, src.ReadAhead)
	setDefault(&a.ReadAheadBytes, ByteSize(src.ReadAheadBytes))
	setDefault(&a.ReceiveWindowBytes, defaultReceiveWindowBytes)
	setDefault(&a.ReconnectMin, src.Backoff.Initial)
	setDefault(&a.ReconnectMax, src.Backoff.Max)
	setDefault(&a.ReconnectMultiplier, src.Backoff.Multiplier)
	setDefault(&a.ReconnectJitter, src.Backoff.Jitter)
	setDefault(&a.ReconnectMaxAttempts, src.Backoff.MaxAttempts)
	setDefault(&a.KeepaliveTime, src.KeepaliveTime)
	setDefault(&a.KeepaliveTimeout, src.KeepaliveTimeout)
	k := &c.Kafka
	setDefault(&k.ClientID, snk.ClientID)
	setDefault(&k.TransactionalIDPrefix, snk.TransactionalIDPrefix)
	setDefault(&k.Delivery, snk.Delivery)
	setDefault(&k.Compression, snk.Compression)
	setDefault(&k.ControlTopic, "amp-kafka-bridge.control")
	setDefault(&k.ReplicationFactor, 3)
	setDefault(&k.MaxBufferedBytes, ByteSize(snk.MaxBufferedBytes))
	setDefault(&k.MaxBufferedRecords, snk.MaxBufferedRecords)
	setDefault(&k.DialTimeout, snk.DialTimeout)
	setDefault(&k.MetadataMinAge, snk.MetadataMinAge)
	setDefault(&k.TransactionTimeout, snk.TransactionTimeout)
	setDefault(&k.EndTxnTimeout, snk.EndTxnTimeout)
	setDefault(&k.DeliveryTimeout, snk.DeliveryTimeout)
	setDefault(&k.Linger, snk.Linger)
	setDefault(&k.BatchMaxBytes, ByteSize(snk.BatchMaxBytes))
	setDefault(&k.ReadTimeout, snk.ReadTimeout)
	setDefault(&k.FetchMaxBytes, ByteSize(snk.FetchMaxBytes))
	setDefault(&c.Checkpoint.Store, StoreRedis)
	setDefault(&c.Checkpoint.Dir, ".bridge-state")
	r := &c.Checkpoint.Redis
	setDefault(&r.Addr, "127.0.0.1:6379")
	setDefault(&r.KeyPrefix, strings.TrimSuffix(rds.KeyPrefix, ":"))
	setDefault(&r.DialTimeout, rds.DialTimeout)
	setDefault(&r.ReadTimeout, rds.ReadTimeout)
	setDefault(&r.WriteTimeout, rds.WriteTimeout)
	setDefault(&r.MaxRetries, rds.MaxRetries)
	setDefault(&c.Checkpoint.Timeout, 10*time.Second)
	setDefault(&c.Registry.Timeout, encode.DefaultRegistryConfig().Timeout)
	setDefault(&c.HTTP.Addr, "127.0.0.1:9464")
	setDefault(&c.HTTP.ReadyTimeout, 10*time.Second)
	setDefault(&c.HTTP.LiveTimeout, 5*time.Minute)
	setDefault(&c.HTTP.ProbeInterval, 2*time.Second)
	setDefault(&c.Log.Level, LogInfo)
	setDefault(&c.Log.Format, LogText)
	c.defaultsCluster()
}

func (c *Config) defaultsStreams() {
	c.defaultsClusterGroup()
	for i := range c.Streams {
		s := &c.Streams[i]
		setDefault(&s.Weight, 1)
		setDefault(&s.Topic, defaultTopic)
		setDefault(&s.Partitions, 1)
		setDefault(&s.Key, KeyBatch)
		setDefault(&s.Envelope, EnvelopeDebezium)
		setDefault(&s.FixedAs, FixedAsFixed)
		setDefault(&s.Retraction, RetractionBoth)
		setDefault(&s.RetentionBlocks, 128)
		setDefault(&s.Transaction.MaxRows, 50000)
		setDefault(&s.Transaction.MaxAge, 100*time.Millisecond)
		setDefault(&s.HeadPollInterval, 30*time.Second)
		setDefault(&s.Backfill.HandoverMargin, s.RetentionBlocks)
		setDefault(&s.Backfill.Workers, 2)
		setDefault(&s.Backfill.StepBlocks, 1000)
		setDefault(&s.Backfill.Column, "_block_num")
		defaultsEvolution(s)
		defaultsLabels(s)
		defaultsStart(s)
	}
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

var backfillColumnPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate runs every check `bridge run` makes before it connects, and
// reports all problems together, each naming its key and the expected form:
// the bridge's own keys, then each stage's Validate on the mapped
// configuration (sink.Config, source.Config, offsets.RedisConfig), each
// stream's encoder configuration, its topic name when the template has no
// {network}, and the partition query of a backfill.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: "+format, append([]any{key}, args...)...))
	}
	stage := func(err error) {
		for _, e := range flatten(err) {
			errs = append(errs, fmt.Errorf("config %w", e))
		}
	}
	stage(c.Source().Validate())
	stage(c.Sink().Validate())
	if c.Kafka.ReplicationFactor == 0 || c.Kafka.ReplicationFactor < -1 {
		bad("kafka.replication_factor", "%d: want a positive number, or -1 for the broker default", c.Kafka.ReplicationFactor)
	}
	if !sinkLegalTopic(c.Kafka.ControlTopic) {
		bad("kafka.control_topic", "%q: want a Kafka topic name ([a-zA-Z0-9._-], at most 249)", c.Kafka.ControlTopic)
	}
	if err := checkEnum("checkpoint.store", c.Checkpoint.Store, StoreRedis, StoreFile); err != nil {
		errs = append(errs, err)
	}
	switch c.Checkpoint.Store {
	case StoreRedis:
		stage(c.Redis().Validate())
	case StoreFile:
		if c.Checkpoint.Dir == "" {
			bad("checkpoint.dir", "is empty; name a directory for the file store")
		}
	}
	if c.Registry.URL != "" {
		stage(c.SchemaRegistry().Validate())
	} else if c.Registry.TLS.Enabled || c.Registry.Username != "" || c.Registry.TokenFile != "" {
		bad("registry.url", "is empty but registry.tls, registry.username or registry.token_file is set; set registry.url or remove them")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"checkpoint.timeout", c.Checkpoint.Timeout},
		{"http.ready_timeout", c.HTTP.ReadyTimeout}, {"http.live_timeout", c.HTTP.LiveTimeout}, {"http.probe_interval", c.HTTP.ProbeInterval}} {
		if d.v <= 0 {
			bad(d.key, "%s: want a positive duration such as 10s", d.v)
		}
	}
	c.validateCluster(bad)
	switch c.MemoryLimit {
	case MemoryLimitAuto, MemoryLimitOff:
	default:
		if b, err := parseByteSize(c.MemoryLimit); err != nil || b < minMemoryLimit {
			bad("memory_limit", "%q: want auto, off or a size of at least 32MiB such as 256MiB", c.MemoryLimit)
		}
	}
	if c.StartupTimeout < 0 {
		bad("startup_timeout", "%s: want 0 (wait for ever) or a positive duration", c.StartupTimeout)
	}
	if c.HTTP.LiveTimeout <= max(c.Kafka.DeliveryTimeout+c.Kafka.EndTxnTimeout, c.Kafka.ReadTimeout, c.Checkpoint.Timeout) {
		bad("http.live_timeout", "%s must exceed every service deadline (kafka.delivery_timeout + kafka.end_txn_timeout, kafka.read_timeout, "+
			"checkpoint.timeout), or /livez would fail while a call is still within its deadline", c.HTTP.LiveTimeout)
	}
	if err := checkEnum("log.level", c.Log.Level, LogDebug, LogInfo, LogWarn, LogError); err != nil {
		errs = append(errs, err)
	}
	if err := checkEnum("log.format", c.Log.Format, LogText, LogJSON); err != nil {
		errs = append(errs, err)
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
		topic := s.Topic
		if s.Topic == "" || strings.ContainsAny(strings.NewReplacer("{stream}", "", "{network}", "").Replace(s.Topic), "{} /") {
			bad(key+".topic", "%q: want a Kafka topic name, optionally with {stream} and {network}", s.Topic)
		} else if !strings.Contains(s.Topic, "{network}") {
			t, err := s.TopicName(nil)
			switch {
			case err != nil:
				errs = append(errs, err)
			case !sinkLegalTopic(t):
				bad(key+".topic", "%q resolves to %q: want [a-zA-Z0-9._-], at most 249 characters", s.Topic, t)
			default:
				topic = t
			}
		}
		if s.Partitions < 1 {
			bad(key+".partitions", "%d: want at least 1", s.Partitions)
		}
		if err := checkEnum(key+".key", s.Key, KeyBatch, KeyRow); err != nil {
			errs = append(errs, err)
		}
		if s.Key == KeyBatch && len(s.KeyColumns) > 0 {
			bad(key+".key_columns", "is set but key is batch; set key: row to key by columns")
		}
		if s.Key == KeyRow && len(s.KeyColumns) == 0 {
			bad(key+".key_columns", "is empty; key: row needs the columns that identify a row")
		}
		if ec, err := s.EncodeConfig(topic, "validate"); err != nil {
			errs = append(errs, err)
		} else if err := ec.Validate(); err != nil {
			for _, e := range flatten(err) {
				bad(key, "%v", e)
			}
		}
		if err := checkEnum(key+".retraction", s.Retraction, RetractionBoth, RetractionRetract, RetractionTombstone); err != nil {
			errs = append(errs, err)
		}
		if err := validateEvolution(key, s); err != nil {
			errs = append(errs, err)
		}
		if s.Transaction.MaxRows < 1 || s.Transaction.MaxAge <= 0 {
			bad(key+".transaction", "max_rows %d and max_age %s must both be positive", s.Transaction.MaxRows, s.Transaction.MaxAge)
		}
		validateStart(key, s, bad)
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
			} else if _, err := source.PartitionSQL(s.SQL, b.Column, 0, 0); err != nil && strings.TrimSpace(s.SQL) != "" {
				bad(key+".sql", "cannot be backfilled: %v", err)
			}
			if c.Kafka.Delivery != ExactlyOnce {
				bad(key+".backfill", "needs kafka.delivery exactly-once: its progress is recorded in the transactions that publish it")
			}
		}
		if _, err := s.LoadLabels(); err != nil {
			errs = append(errs, flatten(err)...)
		}
	}
	return errors.Join(errs...)
}

// flatten returns the errors joined in err by errors.Join, or err alone.
// An error wrapping several with fmt.Errorf("%w: %w") is one problem and
// stays whole: only a join's message is its parts' messages on lines.
func flatten(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	parts := j.Unwrap()
	msgs := make([]string, len(parts))
	for i, e := range parts {
		msgs[i] = e.Error()
	}
	if strings.Join(msgs, "\n") != err.Error() {
		return []error{err}
	}
	var out []error
	for _, e := range parts {
		out = append(out, flatten(e)...)
	}
	return out
}

// sinkLegalTopic reports whether t is a legal Kafka topic name.
func sinkLegalTopic(t string) bool {
	if t == "" || len(t) > 249 || t == "." || t == ".." {
		return false
	}
	for _, r := range t {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '.' && r != '_' && r != '-' {
			return false
		}
	}
	return true
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

// clampInt32 converts a size for an int32 field; a size too large for it
// becomes MaxInt32, which the stage's Validate reports as out of range.
func clampInt32(b ByteSize) int32 {
	return int32(min(int64(b), math.MaxInt32))
}

// Sink maps the configuration onto the sink's. Every field of sink.Config
// but MetricsNamespace and TLS.InsecureSkipVerify is reached by a key
// (TestStageFieldsReachable).
func (c *Config) Sink() sink.Config {
	k := sink.DefaultConfig()
	kc := c.Kafka
	k.Brokers = kc.Brokers
	k.ClientID = kc.ClientID
	k.Delivery = kc.Delivery
	k.TransactionalIDPrefix = kc.TransactionalIDPrefix
	k.Compression = kc.Compression
	k.MaxBufferedBytes = int(kc.MaxBufferedBytes)
	k.MaxBufferedRecords = kc.MaxBufferedRecords
	k.DialTimeout = kc.DialTimeout
	k.MetadataMinAge = kc.MetadataMinAge
	k.TransactionTimeout = kc.TransactionTimeout
	k.EndTxnTimeout = kc.EndTxnTimeout
	k.DeliveryTimeout = kc.DeliveryTimeout
	k.Linger = kc.Linger
	k.ClientMetrics = kc.ClientMetrics
	k.BatchMaxBytes = clampInt32(kc.BatchMaxBytes)
	k.ReadTimeout = kc.ReadTimeout
	k.FetchMaxBytes = clampInt32(kc.FetchMaxBytes)
	k.TLS = kc.TLS
	k.SASL = sink.SASLConfig{Mechanism: kc.SASL.Mechanism, Username: kc.SASL.Username, Password: string(kc.SASL.Password)}
	return k
}

// Source maps the configuration onto the source's. Every field of
// source.Config is reached by a key under amp.
func (c *Config) Source() source.Config {
	s := source.DefaultConfig()
	a := c.Amp
	s.Addr = a.Addr
	s.TLS = a.TLS
	s.Token = string(a.Token)
	s.AllowPlaintextToken = a.AllowPlaintextToken
	s.MaxRecvMsgSize = int(a.MaxRecvBytes)
	s.RequestTimeout = a.RequestTimeout
	s.ReadAhead = a.ReadAhead
	s.ReceiveWindowStreams = c.ampQueries()
	s.ReadAheadBytes = int64(a.ReadAheadBytes)
	s.ReceiveWindow = receiveWindow(int64(a.ReceiveWindowBytes), s.ReceiveWindowStreams)
	s.Backoff.Initial = a.ReconnectMin
	s.Backoff.Max = a.ReconnectMax
	s.Backoff.Multiplier = a.ReconnectMultiplier
	s.Backoff.Jitter = a.ReconnectJitter
	s.Backoff.MaxAttempts = a.ReconnectMaxAttempts
	s.KeepaliveTime = a.KeepaliveTime
	s.KeepaliveTimeout = a.KeepaliveTimeout
	return s
}

// defaultReceiveWindowBytes is amp.receive_window_bytes's default.
const defaultReceiveWindowBytes = 16 << 20

// grpcMaxWindow is the largest window gRPC grows by itself.
const grpcMaxWindow = 16 << 20

// ampQueries is how many Amp queries the process may have open at once:
// one per stream, plus the workers of each backfill.
func (c *Config) ampQueries() int {
	n := 0
	for _, st := range c.Streams {
		n++
		if st.Backfill.Enabled {
			n += st.Backfill.Workers
		}
	}
	return max(n, 1)
}

// receiveWindow is each stream's share of total over n streams, or 0 for
// gRPC's own window (total 0, or a share of 16 MiB or more).
func receiveWindow(total int64, n int) int32 {
	share := total / int64(max(n, 1))
	if total == 0 || share >= grpcMaxWindow {
		return 0
	}
	return int32(max(share, source.MinReceiveWindow))
}

// SchemaRegistry maps registry onto the registry client's configuration.
// Every field of encode.RegistryConfig is reached by a key under registry.
func (c *Config) SchemaRegistry() encode.RegistryConfig {
	r := c.Registry
	e := encode.DefaultRegistryConfig()
	e.URL = r.URL
	e.TLS = r.TLS
	e.Username = r.Username
	e.Password = string(r.Password)
	e.Token = string(r.Token)
	e.AllowPlaintextAuth = r.AllowPlaintextAuth
	if r.Timeout != 0 {
		e.Timeout = r.Timeout
	}
	return e
}

// Redis maps checkpoint.redis onto the Redis store's configuration. Every
// field of offsets.RedisConfig is reached by a key under checkpoint.redis.
func (c *Config) Redis() offsets.RedisConfig {
	r := c.Checkpoint.Redis
	prefix := r.KeyPrefix
	if prefix != "" {
		prefix += ":"
	}
	return offsets.RedisConfig{Addr: r.Addr, Username: r.Username, Password: string(r.Password), DB: r.DB,
		KeyPrefix: prefix, TLS: r.TLS, DialTimeout: r.DialTimeout, ReadTimeout: r.ReadTimeout,
		WriteTimeout: r.WriteTimeout, MaxRetries: r.MaxRetries}
}
