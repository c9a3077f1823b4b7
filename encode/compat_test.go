package encode

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/hamba/avro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hambaCompatible is hamba/avro's schema compatibility check (the reader
// can read data written with the writer schema), each schema parsed with a
// cache of its own so that no name resolves from another schema.
func hambaCompatible(t *testing.T, reader, writer string) error {
	t.Helper()
	r, err := avro.ParseWithCache(reader, "", &avro.SchemaCache{})
	require.NoError(t, err, "hamba parsing %s", reader)
	w, err := avro.ParseWithCache(writer, "", &avro.SchemaCache{})
	require.NoError(t, err, "hamba parsing %s", writer)
	return avro.NewSchemaCompatibility().Compatible(r, w)
}

// TestCheckBackwardAgreesWithHamba checks CheckBackward's verdicts against
// an independent implementation of Avro schema resolution (hamba/avro's
// SchemaCompatibility). CheckBackward is kept rather than replaced by it
// because its errors name the field that breaks compatibility (a[].y,
// before.required), which hamba's do not (and inside a union hamba reports
// only "reader union lacking writer schema array").
//
// They disagree where the reader uses aliases or an enum default, which
// CheckBackward does not read: it refuses such a schema, and hamba, per the
// specification's resolution rules (a reader's aliases match writer names;
// an enum symbol unknown to the reader resolves to the reader's default),
// accepts it. The encoder never generates aliases or enums, so the latest
// registered version of a bridge subject has neither unless someone
// registered it by hand; refusing it is then safe, and the registry's own
// check still runs after ours.
func TestCheckBackwardAgreesWithHamba(t *testing.T) {
	rec := func(fields string) string {
		return `{"type":"record","name":"R","namespace":"n","fields":[` + fields + `]}`
	}
	tests := []struct {
		name           string
		reader, writer string
		// oursStricter marks the cases CheckBackward refuses and the
		// specification (and hamba) accepts.
		oursStricter bool
	}{
		{name: "same", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "add nullable with default", reader: rec(`{"name":"a","type":"int"},{"name":"b","type":["null","long"],"default":null}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "add field without default", reader: rec(`{"name":"a","type":"int"},{"name":"b","type":"long"}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "drop field", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"int"},{"name":"b","type":"long"}`)},
		{name: "int to long", reader: rec(`{"name":"a","type":"long"}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "long to float", reader: rec(`{"name":"a","type":"float"}`), writer: rec(`{"name":"a","type":"long"}`)},
		{name: "float to double", reader: rec(`{"name":"a","type":"double"}`), writer: rec(`{"name":"a","type":"float"}`)},
		{name: "long to int", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":"long"}`)},
		{name: "string to bytes", reader: rec(`{"name":"a","type":"bytes"}`), writer: rec(`{"name":"a","type":"string"}`)},
		{name: "make nullable", reader: rec(`{"name":"a","type":["null","int"],"default":null}`), writer: rec(`{"name":"a","type":"int"}`)},
		{name: "make non-nullable", reader: rec(`{"name":"a","type":"int"}`), writer: rec(`{"name":"a","type":["null","int"],"default":null}`)},
		{name: "union promotes", reader: rec(`{"name":"a","type":["null","long"],"default":null}`), writer: rec(`{"name":"a","type":["null","int"],"default":null}`)},
		{name: "union branch dropped", reader: rec(`{"name":"a","type":["null","long"],"default":null}`), writer: rec(`{"name":"a","type":["null","long","string"],"default":null}`)},
		{name: "fixed size", reader: rec(`{"name":"a","type":{"type":"fixed","name":"F","size":20}}`), writer: rec(`{"name":"a","type":{"type":"fixed","name":"F","size":32}}`)},
		{name: "fixed renamed", reader: rec(`{"name":"a","type":{"type":"fixed","name":"G","size":32}}`), writer: rec(`{"name":"a","type":{"type":"fixed","name":"F","size":32}}`)},
		{name: "nested in union and array", reader: rec(`{"name":"a","type":["null",{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"x","type":"int"},{"name":"y","type":"string"}]}}],"default":null}`),
			writer: rec(`{"name":"a","type":["null",{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"x","type":"int"}]}}],"default":null}`)},
		{name: "map values narrowed", reader: rec(`{"name":"a","type":{"type":"map","values":"int"}}`), writer: rec(`{"name":"a","type":{"type":"map","values":"long"}}`)},
		{name: "record renamed", reader: `{"type":"record","name":"S","fields":[]}`, writer: `{"type":"record","name":"R","fields":[]}`},
		{name: "other namespace, same name", reader: `{"type":"record","name":"R","namespace":"a","fields":[]}`, writer: `{"type":"record","name":"R","namespace":"b","fields":[]}`},
		{name: "logical types ignored", reader: rec(`{"name":"a","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},{"name":"t","type":{"type":"long","logicalType":"timestamp-micros"}}`),
			writer: rec(`{"name":"a","type":{"type":"bytes","logicalType":"decimal","precision":38,"scale":2}},{"name":"t","type":{"type":"long","logicalType":"timestamp-nanos"}}`)},
		{name: "recursive", reader: `{"type":"record","name":"L","fields":[{"name":"n","type":["null","L"],"default":null},{"name":"v","type":"long"}]}`,
			writer: `{"type":"record","name":"L","fields":[{"name":"n","type":["null","L"],"default":null},{"name":"v","type":"int"}]}`},
		{name: "enum symbol removed", reader: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}`), writer: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}`)},
		{name: "enum symbol removed, reader default", reader: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A"],"default":"A"}}`),
			writer: rec(`{"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]}}`), oursStricter: true},
		{name: "field renamed with alias", reader: rec(`{"name":"b","aliases":["a"],"type":"int"}`), writer: rec(`{"name":"a","type":"int"}`), oursStricter: true},
		{name: "record renamed with alias", reader: `{"type":"record","name":"S","aliases":["R"],"fields":[]}`, writer: `{"type":"record","name":"R","fields":[]}`, oursStricter: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ours := CheckBackward(tc.reader, tc.writer)
			theirs := hambaCompatible(t, tc.reader, tc.writer)
			if tc.oursStricter {
				require.ErrorIs(t, ours, ErrIncompatible)
				require.NoError(t, theirs)
				return
			}
			assert.Equal(t, theirs == nil, ours == nil, "ours: %v; hamba: %v", ours, theirs)
		})
	}
}

// TestCheckBackwardAgreesWithHambaOnGeneratedSchemas compares the two on the
// envelopes the encoder generates: random row schemas and evolutions of
// them (a column added, nullable or not; a column dropped; a column's type
// changed).
func TestCheckBackwardAgreesWithHambaOnGeneratedSchemas(t *testing.T) {
	valueSchema := func(s *arrow.Schema) string {
		enc, err := NewEncoder(Config{Stream: "s"}, s)
		require.NoError(t, err, "%s", s)
		return enc.Schemas().Value
	}
	verdicts := map[bool]int{}
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 11))
		s := randomSchema(r)
		fs := s.Fields()
		other := randomSchema(r).Fields()
		evolved := []*arrow.Schema{
			arrow.NewSchema(append(fs[:len(fs):len(fs)], opt("added", arrow.PrimitiveTypes.Int64)), nil),
			arrow.NewSchema(append(fs[:len(fs):len(fs)], req("added", arrow.PrimitiveTypes.Int64)), nil),
		}
		if len(fs) > 1 {
			evolved = append(evolved, arrow.NewSchema(fs[1:], nil))
		}
		changed := append([]arrow.Field(nil), fs...)
		changed[0].Type = other[0].Type
		evolved = append(evolved, arrow.NewSchema(changed, nil))
		writer := valueSchema(s)
		for _, e := range evolved {
			reader := valueSchema(e)
			ours := CheckBackward(reader, writer)
			theirs := hambaCompatible(t, reader, writer)
			require.Equal(t, theirs == nil, ours == nil, "seed %d\nreader %s\nwriter %s\nours: %v; hamba: %v", seed, e, s, ours, theirs)
			verdicts[ours == nil]++
		}
	}
	assert.Positive(t, verdicts[true], "some evolutions compatible")
	assert.Positive(t, verdicts[false], "some evolutions incompatible")
}
