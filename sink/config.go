package sink

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/tlsconfig"
)

// Delivery selects the delivery guarantee of a Producer.
type Delivery string

const (
	// DeliveryExactlyOnce (the default) produces inside Kafka transactions
	// with a stable transactional id: read_committed consumers see every
	// committed record once, and a zombie instance is fenced.
	DeliveryExactlyOnce Delivery = "exactly-once"
	// DeliveryAtLeastOnce uses the idempotent producer without transactions,
	// for brokers or ACL setups that do not allow transactions. Records are
	// visible as soon as they are written; after a failure or crash the run
	// loop replays from its checkpoint, so consumers can see duplicates (and,
	// after a reorg, retractions of rows they saw twice). Use it only when
	// transactions are impossible.
	DeliveryAtLeastOnce Delivery = "at-least-once"
)

// Compression is the producer batch compression codec.
type Compression string

// Supported compression codecs.
const (
	CompressionNone   Compression = "none"
	CompressionLZ4    Compression = "lz4"
	CompressionZstd   Compression = "zstd"
	CompressionSnappy Compression = "snappy"
	CompressionGzip   Compression = "gzip"
)

// SASLMechanism names a SASL mechanism.
type SASLMechanism string

// Supported SASL mechanisms. The empty mechanism disables SASL.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// TLSConfig configures TLS (and mutual TLS when CertFile/KeyFile are set) to
// the brokers: the bridge's one TLS setting, loaded by tlsconfig.Load.
type TLSConfig = tlsconfig.Config

// SASLConfig configures SASL authentication. Password is a secret: it is
// redacted by String, GoString and LogValue. Load it from the environment or
// a file, never from the YAML file.
type SASLConfig struct {
	// Mechanism is empty (SASL off), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism SASLMechanism
	Username  string
	Password  string
}

const redacted = "[REDACTED]"

func redact(s string) string {
	if s == "" {
		return ""
	}
	return redacted
}

// String prints the SASL settings with the password redacted.
func (s SASLConfig) String() string {
	return fmt.Sprintf("{Mechanism:%s Username:%s Password:%s}", s.Mechanism, s.Username, redact(s.Password))
}

// GoString is String, so %#v does not print the password either.
func (s SASLConfig) GoString() string { return s.String() }

// LogValue implements slog.LogValuer with the password redacted.
func (s SASLConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("mechanism", string(s.Mechanism)),
		slog.String("username", s.Username),
		slog.String("password", redact(s.Password)),
	)
}

// Config configures the Kafka side of a stream: connection, security and
// producer tuning. Build it from DefaultConfig, override, then Validate.
// Every time and size limit is here (style H5); nothing is hard-wired.
type Config struct {
	// Brokers is the seed list, host:port each.
	Brokers []string
	// ClientID is sent to the brokers (default "amp-kafka-bridge").
	ClientID string
	// TLS and SASL secure the connection.
	TLS  TLSConfig
	SASL SASLConfig
	// DialTimeout bounds each connection attempt (default 10s).
	DialTimeout time.Duration
	// MetadataMinAge is the minimum time between metadata refreshes
	// (default 1s; franz-go's own default is 5s). A produce that hits a
	// moved leader, or a topic created a moment ago, waits this long.
	MetadataMinAge time.Duration

	// Delivery is exactly-once (default) or at-least-once.
	Delivery Delivery
	// TransactionalIDPrefix prefixes every transactional id:
	// "{prefix}.{stream}" (default "amp-kafka-bridge").
	TransactionalIDPrefix string
	// TransactionTimeout is transaction.timeout.ms: how long the
	// coordinator lets a transaction stay open before aborting it (default
	// 30s). It must not exceed the broker's transaction.max.timeout.ms
	// (15 min by default). Keep it small: a crashed instance's open
	// transaction blocks read_committed consumers (the last stable offset)
	// until it is fenced or times out.
	TransactionTimeout time.Duration
	// EndTxnTimeout bounds EndTransaction and aborts (default 30s). They
	// run detached from the caller's cancellation, because canceling an
	// EndTransaction in flight makes its outcome unknown.
	EndTxnTimeout time.Duration
	// DeliveryTimeout bounds how long one record may stay unacknowledged
	// (delivery.timeout.ms; default 30s). A record that times out fails its
	// transaction.
	DeliveryTimeout time.Duration
	// Compression is none, lz4, zstd (default), snappy or gzip.
	Compression Compression
	// Linger is how long a partition waits for more records before sending
	// (default 5ms; 0 sends as soon as possible).
	Linger time.Duration
	// ClientMetrics lets every client push its metrics to brokers that ask
	// for them (KIP-714; default off). Each client then keeps a compressor
	// of its own, about 0.7 MiB with gzip, for every stream's producer and
	// reader.
	ClientMetrics bool
	// BatchMaxBytes caps one record batch (default 1 MiB); it must not
	// exceed the topic's max.message.bytes.
	BatchMaxBytes int32
	// MaxBufferedBytes caps the bytes buffered in the producer (default
	// 32 MiB). When it is full, Produce blocks: that is the backpressure
	// that slows the source down.
	MaxBufferedBytes int
	// MaxBufferedRecords caps buffered records (default 1,000,000) so that
	// MaxBufferedBytes, not a record count, is what normally blocks.
	MaxBufferedRecords int
	// ReadTimeout bounds one read-back or control-topic read (default 60s).
	// It must exceed TransactionTimeout: a read waits for transactions open
	// on the partition to end, and a crashed producer's transaction ends
	// only when the coordinator times it out.
	ReadTimeout time.Duration
	// FetchMaxBytes caps one fetch response during reads (default 16 MiB).
	FetchMaxBytes int32
	// MetricsNamespace prefixes the metric names (default "amp_bridge").
	MetricsNamespace string

	// compressor, set by ShareCompression, is the one batch compressor
	// of every producer made from this Config; nil means each producer
	// builds its own from Compression.
	compressor kgo.Compressor
}

// ShareCompression returns c with one batch compressor that every producer
// made from it (or a copy of it) uses, instead of one per producer. A
// franz-go compressor pools its encoders per client, and a zstd encoder
// holds ~1.7 MiB of tables and history while idle, so one per stream is
// most of an idle stream's memory; shared, the pool holds about as many
// encoders as batches are compressed at once. The compressor is safe for
// concurrent use. A Config that does not compress is returned unchanged.
func (c Config) ShareCompression() (Config, error) {
	codec, err := c.Compression.codec()
	if err != nil {
		return c, fmt.Errorf("kafka.compression: %w", err)
	}
	comp, err := kgo.DefaultCompressor(codec)
	if err != nil {
		return c, fmt.Errorf("kafka.compression: building the %s compressor: %w", c.Compression, err)
	}
	if comp != nil { // nil for none
		c.compressor = newBoundedCompressor(comp, 2*runtime.GOMAXPROCS(0))
	}
	return c, nil
}

// boundedCompressor lets at most cap(slots) batches be compressed at once.
// franz-go keeps its encoders in a sync.Pool, which every garbage
// collection empties: with 100 producers compressing at once under the
// soft memory limit, collections ran back to back and each rebuilt dozens
// of zstd encoders (~1.5 MiB each; 102 MB of them were live at a busy
// 100-stream peak). Compressing is CPU work, so more batches at once than
// there are processors only adds encoders.
type boundedCompressor struct {
	inner kgo.Compressor
	slots chan struct{}
}

func newBoundedCompressor(inner kgo.Compressor, n int) *boundedCompressor {
	return &boundedCompressor{inner: inner, slots: make(chan struct{}, max(n, 2))}
}

// Compress implements kgo.Compressor.
func (b *boundedCompressor) Compress(dst *bytes.Buffer, src []byte, flags ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	b.slots <- struct{}{}
	defer func() { <-b.slots }()
	return b.inner.Compress(dst, src, flags...)
}

// DefaultConfig returns a Config with every default set and no brokers.
func DefaultConfig() Config {
	return Config{
		ClientID:              "amp-kafka-bridge",
		DialTimeout:           10 * time.Second,
		MetadataMinAge:        time.Second,
		Delivery:              DeliveryExactlyOnce,
		TransactionalIDPrefix: "amp-kafka-bridge",
		TransactionTimeout:    30 * time.Second,
		EndTxnTimeout:         30 * time.Second,
		DeliveryTimeout:       30 * time.Second,
		Compression:           CompressionZstd,
		Linger:                5 * time.Millisecond,
		BatchMaxBytes:         1 << 20,
		MaxBufferedBytes:      32 << 20,
		MaxBufferedRecords:    1_000_000,
		ReadTimeout:           60 * time.Second,
		FetchMaxBytes:         16 << 20,
		MetricsNamespace:      "amp_bridge",
	}
}

// String prints the Config with secrets redacted.
func (c Config) String() string {
	return fmt.Sprintf("{Brokers:%v ClientID:%s TLS:%+v SASL:%s MetadataMinAge:%s Delivery:%s TransactionalIDPrefix:%s "+
		"TransactionTimeout:%s EndTxnTimeout:%s DeliveryTimeout:%s Compression:%s Linger:%s BatchMaxBytes:%d "+
		"MaxBufferedBytes:%d MaxBufferedRecords:%d ReadTimeout:%s FetchMaxBytes:%d MetricsNamespace:%s}",
		c.Brokers, c.ClientID, c.TLS, c.SASL, c.MetadataMinAge, c.Delivery, c.TransactionalIDPrefix,
		c.TransactionTimeout, c.EndTxnTimeout, c.DeliveryTimeout, c.Compression, c.Linger, c.BatchMaxBytes,
		c.MaxBufferedBytes, c.MaxBufferedRecords, c.ReadTimeout, c.FetchMaxBytes, c.MetricsNamespace)
}

// GoString is String, so %#v does not print secrets either.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer with secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("brokers", c.Brokers),
		slog.String("client_id", c.ClientID),
		slog.Bool("tls", c.TLS.Enabled),
		slog.Any("sasl", c.SASL),
		slog.String("delivery", string(c.Delivery)),
		slog.String("transactional_id_prefix", c.TransactionalIDPrefix),
		slog.Duration("transaction_timeout", c.TransactionTimeout),
		slog.String("compression", string(c.Compression)),
		slog.Duration("linger", c.Linger),
		slog.Bool("client_metrics", c.ClientMetrics),
		slog.Int("max_buffered_bytes", c.MaxBufferedBytes),
	)
}

// maxTxnTimeout is Kafka's default transaction.max.timeout.ms. A larger
// transaction timeout is refused by a default broker at InitProducerID.
const maxTxnTimeout = 15 * time.Minute

// legalName reports whether s is 1..maxLen characters of [a-zA-Z0-9._-],
// the characters Kafka allows in topic names (and the bridge in ids).
func legalName(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}

// Validate checks every field and returns all problems at once, each naming
// the field, what is wrong and what is expected.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("kafka.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if len(c.Brokers) == 0 {
		bad("brokers", "no seed brokers; set at least one host:port")
	}
	for i, b := range c.Brokers {
		if b = strings.TrimSpace(b); b == "" || !strings.Contains(b, ":") {
			bad("brokers", "entry %d %q is not host:port", i, c.Brokers[i])
		}
	}
	if c.ClientID == "" {
		bad("client_id", "empty; set a client id such as %q", "amp-kafka-bridge")
	}
	if c.DialTimeout <= 0 {
		bad("dial_timeout", "%s must be > 0 (e.g. 10s)", c.DialTimeout)
	}
	if c.MetadataMinAge < 10*time.Millisecond || c.MetadataMinAge > time.Minute {
		bad("metadata_min_age", "%s must be between 10ms and 1m (default 1s)", c.MetadataMinAge)
	}
	switch c.Delivery {
	case DeliveryExactlyOnce, DeliveryAtLeastOnce:
	default:
		bad("delivery", "%q is not %q or %q", c.Delivery, DeliveryExactlyOnce, DeliveryAtLeastOnce)
	}
	if !legalName(c.TransactionalIDPrefix, 200) {
		bad("transactional_id_prefix", "%q must be non-empty and match [a-zA-Z0-9._-]+", c.TransactionalIDPrefix)
	}
	if c.TransactionTimeout < time.Second || c.TransactionTimeout > maxTxnTimeout {
		bad("transaction_timeout", "%s must be between 1s and %s (the broker's default transaction.max.timeout.ms)",
			c.TransactionTimeout, maxTxnTimeout)
	}
	if c.EndTxnTimeout <= 0 {
		bad("end_txn_timeout", "%s must be > 0 (e.g. 30s)", c.EndTxnTimeout)
	}
	if c.DeliveryTimeout <= 0 {
		bad("delivery_timeout", "%s must be > 0 (e.g. 30s)", c.DeliveryTimeout)
	}
	if _, err := c.Compression.codec(); err != nil {
		bad("compression", "%v", err)
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		bad("linger", "%s must be between 0 and 1m", c.Linger)
	}
	if c.BatchMaxBytes < 1<<10 || c.BatchMaxBytes > 1<<30 {
		bad("batch_max_bytes", "%d must be between 1024 and 1073741824", c.BatchMaxBytes)
	}
	if c.MaxBufferedBytes < int(c.BatchMaxBytes) {
		bad("max_buffered_bytes", "%d must be >= batch_max_bytes (%d)", c.MaxBufferedBytes, c.BatchMaxBytes)
	}
	if c.MaxBufferedRecords <= 0 {
		bad("max_buffered_records", "%d must be > 0", c.MaxBufferedRecords)
	}
	if c.ReadTimeout <= c.TransactionTimeout {
		bad("read_timeout", "%s must exceed transaction_timeout (%s): a read waits out a crashed producer's open transaction (default 60s)",
			c.ReadTimeout, c.TransactionTimeout)
	}
	if c.FetchMaxBytes < 1<<10 {
		bad("fetch_max_bytes", "%d must be >= 1024", c.FetchMaxBytes)
	}
	if c.MetricsNamespace == "" {
		// No configuration key sets it: the dashboards and alerts name the metrics.
		errs = append(errs, fmt.Errorf("sink.Config.MetricsNamespace is empty; set e.g. %q", "amp_bridge"))
	}
	if err := c.TLS.Validate("kafka.tls"); err != nil {
		errs = append(errs, err)
	}
	if c.TLS.Enabled {
		for _, f := range [...]struct{ field, path string }{
			{"tls.ca_file", c.TLS.CAFile}, {"tls.cert_file", c.TLS.CertFile}, {"tls.key_file", c.TLS.KeyFile},
		} {
			if f.path == "" {
				continue
			}
			if _, err := os.Stat(f.path); err != nil {
				bad(f.field, "cannot read %q: %v", f.path, err)
			}
		}
	}
	switch c.SASL.Mechanism {
	case "":
		if c.SASL.Username != "" || c.SASL.Password != "" {
			bad("sasl", "username/password are set but sasl.mechanism is empty; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if c.SASL.Username == "" || c.SASL.Password == "" {
			bad("sasl", "mechanism %s needs a username and a password (password from the environment or a file)", c.SASL.Mechanism)
		}
	default:
		bad("sasl.mechanism", "%q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASL.Mechanism)
	}
	return errors.Join(errs...)
}

// TransactionalID returns the transactional id of stream id under prefix:
// "{prefix}.{id}". It is stable across restarts, which is what fences a
// zombie instance of the same stream.
func TransactionalID(prefix, id string) string { return prefix + "." + id }

func (c Compression) codec() (kgo.CompressionCodec, error) {
	switch c {
	case CompressionNone:
		return kgo.NoCompression(), nil
	case CompressionLZ4:
		return kgo.Lz4Compression(), nil
	case CompressionZstd:
		return kgo.ZstdCompression(), nil
	case CompressionSnappy:
		return kgo.SnappyCompression(), nil
	case CompressionGzip:
		return kgo.GzipCompression(), nil
	default:
		return kgo.CompressionCodec{}, fmt.Errorf("%q is not one of none, lz4, zstd, snappy, gzip", string(c))
	}
}

// clientOpts returns the connection options shared by every client the
// package creates (producer, admin, reader).
func (c Config) clientOpts(logger *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.ClientID(c.ClientID),
		kgo.DialTimeout(c.DialTimeout),
		kgo.MetadataMinAge(c.MetadataMinAge),
		kgo.WithLogger(kslog.New(kgoLogger(logger))),
	}
	if !c.ClientMetrics {
		opts = append(opts, kgo.DisableClientMetrics())
	}
	if c.TLS.Enabled {
		tc, err := tlsconfig.Load("kafka.tls", c.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch c.SASL.Mechanism {
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsMechanism()))
	case SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsSha256Mechanism()))
	case SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: c.SASL.Username, Pass: c.SASL.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}
