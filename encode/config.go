package encode

import (
	"errors"
	"fmt"
)

// Envelope selects the shape of the value record.
type Envelope uint8

const (
	// EnvelopeDebezium is the default: {before, after, source, op, ts_ms},
	// read as a changelog by Flink debezium-avro-confluent, RisingWave
	// FORMAT DEBEZIUM and Debezium sinks.
	EnvelopeDebezium Envelope = iota
	// EnvelopeFlat is the row's columns followed by _amp_* metadata fields
	// (_amp_op, _amp_batch_id, _amp_block_num, …), for ksqlDB-style
	// consumers that do not unwrap envelopes.
	EnvelopeFlat
)

// String returns the configuration name of the envelope.
func (e Envelope) String() string {
	switch e {
	case EnvelopeDebezium:
		return "debezium"
	case EnvelopeFlat:
		return "flat"
	}
	return fmt.Sprintf("Envelope(%d)", uint8(e))
}

// ParseEnvelope parses "debezium" (or "") and "flat".
func ParseEnvelope(s string) (Envelope, error) {
	switch s {
	case "", "debezium":
		return EnvelopeDebezium, nil
	case "flat":
		return EnvelopeFlat, nil
	}
	return 0, fmt.Errorf("envelope %q: want \"debezium\" or \"flat\"", s)
}

// FixedAs selects how FixedSizeBinary columns (hashes, addresses) map.
type FixedAs uint8

const (
	// FixedAsFixed maps FixedSizeBinary(n) to a named Avro fixed of size n
	// (Bytes32, Bytes20, …): the default, compact and exact.
	FixedAsFixed FixedAs = iota
	// FixedAsHex maps FixedSizeBinary(n) to a string "0x" + 2n lowercase hex
	// digits, the form block explorers and JSON APIs use.
	FixedAsHex
	// FixedAsBytes maps FixedSizeBinary(n) to Avro bytes, for readers that
	// derive their reader schema from a table and cannot read an Avro fixed
	// as bytes (Flink's BYTES columns).
	FixedAsBytes
)

// String returns the configuration name of the mapping.
func (f FixedAs) String() string {
	switch f {
	case FixedAsFixed:
		return "fixed"
	case FixedAsHex:
		return "hex"
	case FixedAsBytes:
		return "bytes"
	}
	return fmt.Sprintf("FixedAs(%d)", uint8(f))
}

// ParseFixedAs parses "fixed" (or ""), "hex" and "bytes".
func ParseFixedAs(s string) (FixedAs, error) {
	switch s {
	case "", "fixed":
		return FixedAsFixed, nil
	case "hex":
		return FixedAsHex, nil
	case "bytes":
		return FixedAsBytes, nil
	}
	return 0, fmt.Errorf("fixed_as %q: want \"fixed\", \"hex\" or \"bytes\"", s)
}

// Config describes how one stream's rows are encoded.
type Config struct {
	// Stream is the stream id (required); it is written to source.stream.
	Stream string
	// Topic is the data topic. With Namespace empty the Avro namespace is
	// derived from it (or from Stream when it is empty too).
	Topic string
	// Namespace overrides the Avro namespace of the generated records.
	Namespace string
	// Envelope is the value shape; default EnvelopeDebezium.
	Envelope Envelope
	// KeyColumns, when set, selects row-key mode: the record key is an Avro
	// record of these columns (subject <topic>-key). When empty the key is
	// the batch id as UTF-8 text.
	KeyColumns []string
	// FixedAs selects the FixedSizeBinary mapping; default FixedAsFixed.
	FixedAs FixedAs
	// Version is the bridge version written to source.version.
	Version string
}

// validStreamID reports whether s matches [a-z0-9_.-]+.
func validStreamID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !streamIDByte(s[i]) {
			return false
		}
	}
	return true
}

// streamIDByte reports whether c is in [a-z0-9_.-].
func streamIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// Validate checks the configuration; every error names the field.
func (c Config) Validate() error {
	var errs []error
	if !validStreamID(c.Stream) {
		errs = append(errs, fmt.Errorf("stream %q: want [a-z0-9_.-]+", c.Stream))
	}
	if c.Envelope > EnvelopeFlat {
		errs = append(errs, fmt.Errorf("envelope %d: want debezium or flat", c.Envelope))
	}
	if c.FixedAs > FixedAsBytes {
		errs = append(errs, fmt.Errorf("fixed_as %d: want fixed, hex or bytes", c.FixedAs))
	}
	seen := map[string]bool{}
	for _, k := range c.KeyColumns {
		if seen[k] {
			errs = append(errs, fmt.Errorf("key_columns: %q is listed twice", k))
		}
		seen[k] = true
	}
	if c.Namespace != "" && sanitizeNamespace(c.Namespace) != c.Namespace {
		errs = append(errs, fmt.Errorf("namespace %q: want dot-separated Avro names such as %q",
			c.Namespace, sanitizeNamespace(c.Namespace)))
	}
	return errors.Join(errs...)
}

func (c Config) namespace() string {
	switch {
	case c.Namespace != "":
		return c.Namespace
	case c.Topic != "":
		return sanitizeNamespace(c.Topic)
	}
	return sanitizeNamespace("amp." + c.Stream)
}
