package encode

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"
)

// Framing is the header written before every Avro body: the Confluent wire
// format (magic byte 0 and a 4-byte big-endian schema id) when a schema
// registry is configured, otherwise Avro single-object encoding (C3 01 and
// the 8-byte little-endian CRC-64-AVRO fingerprint of the schema's Parsing
// Canonical Form). The zero Framing writes no header.
type Framing struct {
	kind        framingKind
	id          uint32
	fingerprint uint64
}

type framingKind uint8

const (
	framingNone framingKind = iota
	framingConfluent
	framingSingleObject
)

// ConfluentFraming returns the Confluent wire-format framing for a schema id
// assigned by a registry.
func ConfluentFraming(id int) Framing {
	return Framing{kind: framingConfluent, id: uint32(id)}
}

// SingleObjectFraming returns the single-object framing for a schema given
// as Avro JSON: its fingerprint is the CRC-64-AVRO (Rabin) of the schema's
// Parsing Canonical Form.
func SingleObjectFraming(schema string) (Framing, error) {
	fp, err := Fingerprint(schema)
	if err != nil {
		return Framing{}, err
	}
	return Framing{kind: framingSingleObject, fingerprint: fp}, nil
}

// EarlierSingleObjectFramings returns the single-object framings that
// bridges before this one wrote for schema where they differ from
// SingleObjectFraming's, so that their records can still be read and
// retracted: those took the Parsing Canonical Form from goavro, which
// gives a nested named type with a namespace of its own a full name that
// also carries the enclosing type's (every envelope's Value and Source),
// unlike the specification and every other Avro implementation. For some
// schemas (a field and a named type of one name: linkedin/goavro#307)
// goavro's form also depends on map order, so it is taken several times
// and every form seen is returned.
func EarlierSingleObjectFramings(schema string) []Framing {
	now, err := Fingerprint(schema)
	if err != nil {
		return nil
	}
	var out []Framing
	for range 16 {
		c, err := goavro.NewCodec(schema)
		if err != nil {
			return nil
		}
		f := Framing{kind: framingSingleObject, fingerprint: CRC64Avro([]byte(c.CanonicalSchema()))}
		if f.fingerprint != now && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Fingerprint returns the CRC-64-AVRO fingerprint of the Parsing Canonical
// Form of schema, as the Avro specification defines it (and Java's
// SchemaNormalization and fastavro compute it).
func Fingerprint(schema string) (uint64, error) {
	c, err := CanonicalForm(schema)
	if err != nil {
		return 0, err
	}
	return CRC64Avro([]byte(c)), nil
}

// CanonicalForm returns the Parsing Canonical Form of schema: full names,
// only the attributes that parsing needs (name, type, fields, symbols,
// items, values, size) in that order, a primitive as its name, each named
// type defined once. hamba/avro parses (it resolves names and namespaces
// as the specification says, with a cache of its own so that names of
// other schemas do not resolve), but its own form keeps logical types,
// and goavro's gives a nested named type with a namespace of its own a
// name that also carries the enclosing one's; both differ from Java's.
func CanonicalForm(schema string) (string, error) {
	s, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		return "", fmt.Errorf("parsing schema for its canonical form: %w", err)
	}
	var b strings.Builder
	if err := writeCanonical(&b, s, map[string]bool{}); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeCanonical(b *strings.Builder, s avro.Schema, defined map[string]bool) error {
	name := func(n avro.NamedSchema) bool {
		if defined[n.FullName()] {
			b.WriteString(strconv.Quote(n.FullName()))
			return true
		}
		defined[n.FullName()] = true
		b.WriteString(`{"name":` + strconv.Quote(n.FullName()))
		return false
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		b.WriteString(strconv.Quote(s.Schema().FullName()))
	case *avro.RecordSchema:
		if name(s) {
			return nil
		}
		kind := "record"
		if s.IsError() {
			kind = "error"
		}
		b.WriteString(`,"type":"` + kind + `","fields":[`)
		for i, f := range s.Fields() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"name":` + strconv.Quote(f.Name()) + `,"type":`)
			if err := writeCanonical(b, f.Type(), defined); err != nil {
				return err
			}
			b.WriteByte('}')
		}
		b.WriteString("]}")
	case *avro.EnumSchema:
		if name(s) {
			return nil
		}
		b.WriteString(`,"type":"enum","symbols":[`)
		for i, sym := range s.Symbols() {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(sym))
		}
		b.WriteString("]}")
	case *avro.FixedSchema:
		if name(s) {
			return nil
		}
		b.WriteString(`,"type":"fixed","size":` + strconv.Itoa(s.Size()) + "}")
	case *avro.ArraySchema:
		b.WriteString(`{"type":"array","items":`)
		if err := writeCanonical(b, s.Items(), defined); err != nil {
			return err
		}
		b.WriteByte('}')
	case *avro.MapSchema:
		b.WriteString(`{"type":"map","values":`)
		if err := writeCanonical(b, s.Values(), defined); err != nil {
			return err
		}
		b.WriteByte('}')
	case *avro.UnionSchema:
		b.WriteByte('[')
		for i, t := range s.Types() {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeCanonical(b, t, defined); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case *avro.PrimitiveSchema, *avro.NullSchema:
		b.WriteString(strconv.Quote(string(s.Type())))
	default:
		return fmt.Errorf("canonical form: schema type %s (%T) is not supported", s.Type(), s)
	}
	return nil
}

// ID returns the registry schema id and true for Confluent framing.
func (f Framing) ID() (int, bool) { return int(f.id), f.kind == framingConfluent }

// SchemaFingerprint returns the fingerprint and true for single-object framing.
func (f Framing) SchemaFingerprint() (uint64, bool) {
	return f.fingerprint, f.kind == framingSingleObject
}

// HeaderLen is the number of header bytes AppendHeader writes.
func (f Framing) HeaderLen() int {
	switch f.kind {
	case framingConfluent:
		return 5
	case framingSingleObject:
		return 10
	case framingNone:
	}
	return 0
}

// AppendHeader appends the framing header to b.
func (f Framing) AppendHeader(b []byte) []byte {
	switch f.kind {
	case framingConfluent:
		b = append(b, 0)
		return binary.BigEndian.AppendUint32(b, f.id)
	case framingSingleObject:
		b = append(b, 0xC3, 0x01)
		return binary.LittleEndian.AppendUint64(b, f.fingerprint)
	case framingNone:
	}
	return b
}

// String describes the framing for errors and logs.
func (f Framing) String() string {
	switch f.kind {
	case framingConfluent:
		return fmt.Sprintf("confluent schema id %d", f.id)
	case framingSingleObject:
		return fmt.Sprintf("single-object fingerprint %#016x", f.fingerprint)
	case framingNone:
	}
	return "unframed"
}

// ParseHeader splits a framed record into its framing and Avro body.
func ParseHeader(b []byte) (Framing, []byte, error) {
	switch {
	case len(b) >= 5 && b[0] == 0:
		return ConfluentFraming(int(binary.BigEndian.Uint32(b[1:5]))), b[5:], nil
	case len(b) >= 10 && b[0] == 0xC3 && b[1] == 0x01:
		return Framing{kind: framingSingleObject, fingerprint: binary.LittleEndian.Uint64(b[2:10])}, b[10:], nil
	}
	n := min(len(b), 4)
	return Framing{}, nil, fmt.Errorf("%w: record starts with % x; want 00 + schema id (Confluent) or c3 01 + fingerprint (single-object)",
		ErrFraming, b[:n])
}

// crc64AvroEmpty is the CRC-64-AVRO initial value and polynomial (the Avro
// specification's EMPTY constant).
const crc64AvroEmpty = 0xc15d213aa4d7a795

// CRC64Avro is the 64-bit Rabin fingerprint the Avro specification calls
// CRC-64-AVRO, computed over b (normally a Parsing Canonical Form). It runs
// once per schema, so the table is built per call rather than kept global.
func CRC64Avro(b []byte) uint64 {
	var table [256]uint64
	for i := range table {
		fp := uint64(i)
		for range 8 {
			fp = (fp >> 1) ^ (crc64AvroEmpty & -(fp & 1))
		}
		table[i] = fp
	}
	fp := uint64(crc64AvroEmpty)
	for _, c := range b {
		fp = (fp >> 8) ^ table[byte(fp)^c]
	}
	return fp
}
