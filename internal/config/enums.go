package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// The enumerations of the schema. Each is a named string type with a
// constant per value, and each is validated in exactly one place: the
// sink's (Delivery, Compression, SASLMechanism: sink.Config.Validate), the
// encoder's (Envelope, FixedAs: encode.ParseEnvelope/ParseFixedAs through
// StreamConfig.EncodeConfig), or Validate here with checkEnum (the rest).

// Delivery is the delivery guarantee: the sink's type.
type Delivery = sink.Delivery

// Delivery modes.
const (
	ExactlyOnce = sink.DeliveryExactlyOnce
	AtLeastOnce = sink.DeliveryAtLeastOnce
)

// Compression is the producer's batch compression codec: the sink's type
// and constants (sink.CompressionZstd, …).
type Compression = sink.Compression

// SASLMechanism is the Kafka SASL mechanism: the sink's type and constants
// (sink.SASLPlain, …); empty disables SASL.
type SASLMechanism = sink.SASLMechanism

// KeyMode is how records are keyed.
type KeyMode string

// Key modes.
const (
	KeyBatch KeyMode = "batch"
	KeyRow   KeyMode = "row"
)

// Envelope is the value envelope of a stream's records; the encoder
// validates it (encode.ParseEnvelope, through StreamConfig.EncodeConfig).
type Envelope string

// Envelopes.
const (
	// EnvelopeDebezium is the Debezium envelope (default).
	EnvelopeDebezium Envelope = "debezium"
	// EnvelopeFlat is the row's columns and _amp_* fields.
	EnvelopeFlat Envelope = "flat"
)

// FixedAs is how FixedSizeBinary columns are written; the encoder
// validates it (encode.ParseFixedAs, through StreamConfig.EncodeConfig).
type FixedAs string

// FixedSizeBinary writings.
const (
	// FixedAsFixed writes FixedSizeBinary as Avro fixed (default).
	FixedAsFixed FixedAs = "fixed"
	// FixedAsBytes writes FixedSizeBinary as Avro bytes.
	FixedAsBytes FixedAs = "bytes"
	// FixedAsHex writes FixedSizeBinary as "0x…" strings.
	FixedAsHex FixedAs = "hex"
)

// Retraction is what a reorg publishes for a retracted batch.
type Retraction string

// Retraction modes.
const (
	// RetractionBoth publishes op=d events and a tombstone (default).
	RetractionBoth Retraction = "both"
	// RetractionRetract publishes op=d events only.
	RetractionRetract Retraction = "retract"
	// RetractionTombstone publishes the tombstone only.
	RetractionTombstone Retraction = "tombstone"
)

// Events reports whether the mode publishes op=d events.
func (r Retraction) Events() bool { return r != RetractionTombstone }

// Tombstones reports whether the mode publishes tombstones.
func (r Retraction) Tombstones() bool { return r != RetractionRetract }

// LogLevel is the slog level.
type LogLevel string

// Log levels.
const (
	LogDebug LogLevel = "debug"
	LogInfo  LogLevel = "info"
	LogWarn  LogLevel = "warn"
	LogError LogLevel = "error"
)

// LogFormat is the slog handler.
type LogFormat string

// Log formats.
const (
	LogText LogFormat = "text"
	LogJSON LogFormat = "json"
)

// checkEnum is the one validation of an enumeration the bridge owns: v must
// be one of allowed; the error names key and lists the values.
func checkEnum[T ~string](key string, v T, allowed ...T) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	want := names[len(names)-1]
	if len(names) > 1 {
		want = strings.Join(names[:len(names)-1], ", ") + " or " + want
	}
	return fmt.Errorf("config %s: %q: want %s", key, v, want)
}
