// Package encode turns Arrow record batches into Avro records for Kafka: the
// schemas (row record, Debezium-compatible value envelope, flat envelope, key
// record), a compiled hot path that writes Avro binary straight from Arrow
// columns, retractions built from the original records' bytes, the Confluent
// wire format with a schema registry (franz-go sr), Avro single-object
// encoding without one, and the control events (watermark, undo).
//
// # Type mapping
//
// Every Arrow type maps as below (design.md §8, amp-protocol.md §4). A
// nullable Arrow field becomes ["null", T] with default null, so adding a
// nullable column is a BACKWARD-compatible evolution. A value the mapping
// cannot represent is a *ValueError naming the column, the row and the value;
// an unsupported type is ErrUnsupportedType naming the column.
//
//	Arrow                          Avro
//	-----------------------------  -----------------------------------------------
//	Null                           "null" (never wrapped in a union)
//	Boolean                        boolean
//	Int8, Int16, Int32             int
//	UInt8, UInt16                  int
//	UInt32                         long
//	Int64                          long
//	UInt64                         long (values above 2^63-1 are an error)
//	Float32 / Float64              float / double
//	Utf8, LargeUtf8, Utf8View      string (invalid UTF-8 is an error)
//	Binary, LargeBinary, BinaryView bytes
//	FixedSizeBinary(n)             fixed "Bytes<n>" of size n (one named type per
//	                               size, shared by all columns); FixedAsHex: string
//	                               "0x" + 2n lowercase hex digits; FixedAsBytes:
//	                               bytes
//	Decimal128(p,s), Decimal256(p,s) bytes, logicalType decimal(p,s): big-endian
//	                               two's complement of minimal length, byte for
//	                               byte as Java's BigInteger.toByteArray and goavro
//	                               write it (fastavro 1.13 writes one extra 0xFF
//	                               byte for negative powers of two such as -128;
//	                               every reader decodes both to the same value); a
//	                               value with more than p digits is an error
//	Timestamp(s,  tz)              long timestamp-millis (value × 1000)
//	Timestamp(ms, tz)              long timestamp-millis
//	Timestamp(us, tz)              long timestamp-micros
//	Timestamp(ns, tz)              long timestamp-nanos
//	Timestamp(unit, no tz)         long local-timestamp-millis/-micros/-nanos
//	Date32                         int date
//	Date64                         int date (days; a value that is not a whole
//	                               number of days is an error)
//	Time32(ms) / Time64(us)        int time-millis / long time-micros
//	List, LargeList, FixedSizeList array of the element type (element nullability
//	                               kept)
//	Struct                         record "<Parent>_<field>" (nested names joined
//	                               with "_", de-duplicated with a numeric suffix)
//	Map<Utf8, V>                   map of V (Avro map keys are strings; other key
//	                               types are unsupported)
//	Dictionary<I, V>               V (the dictionary is resolved per value)
//
// Field names are made Avro-legal deterministically: every character outside
// [A-Za-z0-9_] becomes '_' and a leading digit gets a '_' prefix; the original
// name goes into the field's doc. Two columns that sanitise to the same name
// are ErrNameCollision naming both. The namespace is Config.Namespace, or the
// sanitised topic (else "amp.<stream>"); the records are <ns>.Value (the row),
// <ns>.Envelope (Debezium value), <ns>.Key (row-key mode) and
// amp.bridge.Source (schemas/source.avsc).
//
// # Envelopes
//
// EnvelopeDebezium (default) writes {before, after, source, op, ts_ms}: op c
// (live insert, after = row), r (backfill insert) or d (retraction, before =
// row); source is {connector "amp-kafka-bridge", version, stream, network,
// block_num, batch_id, range_start, range_end, range_hash, range_prev_hash,
// row, snapshot, cause}. block_num comes from the row's _block_num column
// (else block_num) and is null when the query has neither. For a batch that
// spans several networks, network, batch_id and range_hash (and
// range_prev_hash) join the ranges' values with "|" in range order, and
// range_start/range_end are those of the first range. Flink
// debezium-avro-confluent, RisingWave FORMAT DEBEZIUM ENCODE AVRO and Debezium
// sinks read it as a changelog.
//
// EnvelopeFlat writes the row's columns followed by _amp_op, _amp_ts_ms,
// _amp_stream, _amp_network, _amp_block_num, _amp_batch_id, _amp_range_start,
// _amp_range_end, _amp_range_hash, _amp_range_prev_hash, _amp_row,
// _amp_snapshot and _amp_cause, for ksqlDB-style consumers.
//
// Keys: by default the key is the batch id as UTF-8 text (not Avro). With
// Config.KeyColumns the key is the Avro record <ns>.Key of those columns,
// framed like the value and registered as <topic>-key. The names of the
// record headers (amp-batch-id, amp-op, amp-network, amp-range, amp-stream)
// are HeaderBatchID and the others; FormatRangeHeaders and
// ParseRangeHeaders write and read the values of amp-network and amp-range.
//
// # Hot path and memory
//
// NewEncoder compiles one writer per column once; Encode binds them to the
// batch's buffers and appends each row's framed value (and key) to a Batch,
// a reusable byte arena: no maps, no reflection and no allocation per row once
// the arena has grown to the workload (nor per batch with a single block
// range). Per batch, the envelope's constant parts are encoded once (those
// that depend on the block number once per block), and the columns of
// common types, and the elements of lists and fields of structs of those
// types, are written inline by one loop over per-column ops (see ops.go),
// without a call per value and, for a column without nulls, without a
// validity test. Encode reads the record batch only
// during the call and neither retains nor releases it (the caller owns it).
// Batch slices are valid until Batch.Reset; reset a Batch only after Kafka
// has acknowledged or aborted its records. An Encoder is not safe for
// concurrent use.
//
// # Framing and registry
//
// With a registry, Registry.Prepare registers <topic>-value (and <topic>-key)
// before anything is produced. The registry's verdict on compatibility is
// the one that counts: a refusal is an *IncompatibleError with what the
// registry said and, from the bridge's own BACKWARD check (CheckBackward: the
// Avro resolution rules), the offending field; a change the registry accepts
// although the bridge's check finds it incompatible (a level of NONE, or a
// stub such as srfake) is registered with a warning naming the field.
// NewRegistryClient builds the client from a RegistryConfig (TLS with a CA
// file, mutual TLS, basic or bearer auth); refused credentials and failed
// TLS handshakes are *RegistryAccessErrors naming the keys to fix. Records
// then carry the Confluent header (0 + 4-byte big-endian id).
// Without a registry they carry the single-object header (C3 01 + 8-byte
// little-endian CRC-64-AVRO fingerprint of the Parsing Canonical Form).
//
// # Retractions
//
// Retractor.Retract turns an original record read back from Kafka into its
// retraction without decoding the row: schema-aware skipping finds the row's
// bytes and copies them into `before` (flat: the same row with _amp_op "d").
// It keeps the original framing, so the retraction is written with the schema
// the original was written with.
//
// # Control events
//
// ControlCodec encodes and decodes the watermark and undo events of
// schemas/watermark.avsc and schemas/undo.avsc with goavro (a cold path),
// single-object framed so that a reader tells them apart by fingerprint.
package encode
