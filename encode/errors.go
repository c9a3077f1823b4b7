package encode

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrUnsupportedType is returned when an Arrow type has no Avro mapping.
	ErrUnsupportedType = errors.New("unsupported Arrow type")
	// ErrNameCollision is returned when two columns have the same Avro name
	// after sanitising.
	ErrNameCollision = errors.New("field name collision after sanitising")
	// ErrValue is returned (wrapped in a *ValueError) when a value cannot be
	// represented in Avro.
	ErrValue = errors.New("value cannot be represented in Avro")
	// ErrIncompatible is returned (wrapped in an *IncompatibleError) when
	// the registry refuses a schema as incompatible with the subject's
	// registered versions, or CheckBackward finds it not BACKWARD compatible.
	ErrIncompatible = errors.New("schema is incompatible with the subject's registered versions")
	// ErrFraming is returned when a record does not start with a known
	// header (Confluent magic 0 or single-object C3 01).
	ErrFraming = errors.New("unknown Avro framing")
	// ErrUnknownSchema is returned (wrapped in an *UnknownSchemaError) when a
	// record names a schema id or fingerprint the Retractor has not been
	// given.
	ErrUnknownSchema = errors.New("unknown writer schema")
	// ErrNotInsert is returned when a record handed to Retract is not an
	// insert (its `after` is null or its op is already "d").
	ErrNotInsert = errors.New("record is not an insert")
	// ErrMalformed is returned when Avro binary data ends early or contains
	// an impossible value.
	ErrMalformed = errors.New("malformed Avro data")
	// ErrKeyColumn is returned when a configured key column is not exactly
	// one column of the query's result.
	ErrKeyColumn = errors.New("key column not in the query result")
	// ErrSchemaChanged is returned by Encode for a batch whose Arrow schema
	// is not the one the encoder was compiled for: Amp's result changed
	// under a running stream.
	ErrSchemaChanged = errors.New("the batch's Arrow schema differs from the stream's")
)

// ValueError names the column, row and value that could not be encoded.
type ValueError struct {
	// Column is the Arrow column path, e.g. "access_list.address".
	Column string
	// Row is the row index within the record batch.
	Row int
	// Value is the offending value as text (truncated when long).
	Value string
	// Reason says what is wrong and how to fix it.
	Reason string
}

// Error implements error.
func (e *ValueError) Error() string {
	return fmt.Sprintf("column %q row %d: value %s: %s", e.Column, e.Row, e.Value, e.Reason)
}

// Unwrap makes errors.Is(err, ErrValue) true.
func (e *ValueError) Unwrap() error { return ErrValue }

// IncompatibleError names the registry subject whose new schema is
// incompatible with its registered versions, what the registry said when it
// refused it, the field the bridge's check finds at fault and, for an
// evolved schema (Registry.Evolve), the rule that fails, the registered
// version and both schemas.
type IncompatibleError struct {
	// Subject is the registry subject, e.g. "eth.transactions-value".
	Subject string
	// Field is the path of the offending field ("after.gas_price"), empty
	// when the whole schema is at fault or the bridge's check found none.
	Field string
	// Reason says what changed, by the bridge's check; empty when it found
	// nothing (the registry's level may be stricter than BACKWARD).
	Reason string
	// Registry is what the registry said when it refused the schema
	// (its message and error code); empty for the bridge's own verdict.
	Registry string
	// Rule is the rule that fails (Rule.Describe) when Registry.Evolve
	// refused the schema; empty from Register.
	Rule string
	// Version and ID are the registered version the new schema fails
	// against (0 when unknown).
	Version, ID int
	// Registered is that version's schema and New the refused one; empty
	// when unknown.
	Registered, New string
}

// incompatibleFix is how to go on after a refusal.
const incompatibleFix = "nothing was registered or published; to go on, make the change compatible (a new column nullable, " +
	"so that it gets default null), or publish the changed query under a new stream id and topic, or, if every reader of the " +
	"topic can take the change, relax the subject's compatibility level in the registry (PUT /config/<subject>) and start the stream again"

// Error implements error.
func (e *IncompatibleError) Error() string {
	if e.Rule != "" {
		// Registry.Evolve's refusal: the caller (the stream) says how to
		// go on.
		var b strings.Builder
		fmt.Fprintf(&b, "subject %q", e.Subject)
		if e.Field != "" {
			fmt.Fprintf(&b, " field %q", e.Field)
		}
		fmt.Fprintf(&b, ": %s", ErrIncompatible)
		if e.Registry != "" {
			fmt.Fprintf(&b, ": the registry refused the new schema: %q", e.Registry)
		}
		if e.Reason != "" {
			fmt.Fprintf(&b, ": %s", e.Reason)
		}
		if e.Version != 0 {
			fmt.Fprintf(&b, " (against version %d, id %d)", e.Version, e.ID)
		}
		fmt.Fprintf(&b, "; the rule that fails: %s", e.Rule)
		if e.Registered != "" {
			fmt.Fprintf(&b, "; registered schema: %s", e.Registered)
		}
		if e.New != "" {
			fmt.Fprintf(&b, "; new schema: %s", e.New)
		}
		return b.String()
	}
	if e.Registry != "" {
		var b strings.Builder
		fmt.Fprintf(&b, "subject %q: %s: the registry refused the new schema: %q", e.Subject, ErrIncompatible, e.Registry)
		if e.Reason != "" {
			if e.Field != "" {
				fmt.Fprintf(&b, "; the bridge's BACKWARD check: field %q: %s", e.Field, e.Reason)
			} else {
				fmt.Fprintf(&b, "; the bridge's BACKWARD check: %s", e.Reason)
			}
		}
		b.WriteString("; " + incompatibleFix)
		return b.String()
	}
	if e.Field == "" {
		return fmt.Sprintf("subject %q: %s: %s", e.Subject, ErrIncompatible, e.Reason)
	}
	return fmt.Sprintf("subject %q field %q: %s: %s (register under a new topic or stream, or make the change backward compatible: add fields as nullable with default null)",
		e.Subject, e.Field, ErrIncompatible, e.Reason)
}

// Unwrap makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

// UnknownSchemaError names the schema a record was written with when the
// Retractor does not know it; add it with Retractor.Add (for a registry id,
// fetch the text with Registry.SchemaText).
type UnknownSchemaError struct {
	// Framing identifies the schema: a Confluent id or a fingerprint.
	Framing Framing
}

// Error implements error.
func (e *UnknownSchemaError) Error() string {
	return fmt.Sprintf("%s: %s", ErrUnknownSchema, e.Framing)
}

// Unwrap makes errors.Is(err, ErrUnknownSchema) true.
func (e *UnknownSchemaError) Unwrap() error { return ErrUnknownSchema }
