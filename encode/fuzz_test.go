package encode

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// randomType returns a random supported Arrow type, nested up to depth.
func randomType(r *rand.Rand, depth int) arrow.DataType {
	leaves := []func() arrow.DataType{
		func() arrow.DataType { return arrow.FixedWidthTypes.Boolean },
		func() arrow.DataType { return arrow.PrimitiveTypes.Int8 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Int16 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Int32 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Int64 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Uint8 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Uint16 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Uint32 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Uint64 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Float32 },
		func() arrow.DataType { return arrow.PrimitiveTypes.Float64 },
		func() arrow.DataType { return arrow.BinaryTypes.String },
		func() arrow.DataType { return arrow.BinaryTypes.LargeString },
		func() arrow.DataType { return arrow.BinaryTypes.StringView },
		func() arrow.DataType { return arrow.BinaryTypes.Binary },
		func() arrow.DataType { return arrow.BinaryTypes.LargeBinary },
		func() arrow.DataType { return arrow.BinaryTypes.BinaryView },
		func() arrow.DataType { return fsb(1 + r.IntN(33)) },
		func() arrow.DataType {
			p := int32(1 + r.IntN(38))
			return &arrow.Decimal128Type{Precision: p, Scale: int32(r.IntN(int(p) + 1))}
		},
		func() arrow.DataType {
			p := int32(1 + r.IntN(76))
			return &arrow.Decimal256Type{Precision: p, Scale: int32(r.IntN(int(p) + 1))}
		},
		func() arrow.DataType {
			tz := []string{"", "+00:00", "UTC"}[r.IntN(3)]
			return &arrow.TimestampType{Unit: arrow.TimeUnit(r.IntN(4)), TimeZone: tz}
		},
		func() arrow.DataType { return arrow.FixedWidthTypes.Date32 },
		func() arrow.DataType { return arrow.FixedWidthTypes.Date64 },
		func() arrow.DataType { return arrow.FixedWidthTypes.Time32ms },
		func() arrow.DataType { return arrow.FixedWidthTypes.Time64us },
		func() arrow.DataType { return arrow.Null },
		func() arrow.DataType {
			idx := []arrow.DataType{arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Uint16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Uint64}[r.IntN(4)]
			val := []arrow.DataType{arrow.BinaryTypes.String, fsb(32), arrow.PrimitiveTypes.Int64}[r.IntN(3)]
			return &arrow.DictionaryType{IndexType: idx, ValueType: val}
		},
	}
	if depth <= 0 || r.IntN(3) > 0 {
		return leaves[r.IntN(len(leaves))]()
	}
	switch r.IntN(5) {
	case 0:
		return arrow.ListOfField(arrow.Field{Name: "item", Type: nonDict(r, depth-1), Nullable: r.IntN(2) == 0})
	case 1:
		return arrow.LargeListOfField(arrow.Field{Name: "item", Type: nonDict(r, depth-1), Nullable: r.IntN(2) == 0})
	case 2:
		return arrow.FixedSizeListOfField(int32(1+r.IntN(3)), arrow.Field{Name: "item", Type: nonDict(r, depth-1), Nullable: r.IntN(2) == 0})
	case 3:
		return arrow.MapOf(arrow.BinaryTypes.String, nonDict(r, depth-1))
	default:
		n := 1 + r.IntN(3)
		fs := make([]arrow.Field, n)
		for i := range fs {
			fs[i] = arrow.Field{Name: fmt.Sprintf("f%d", i), Type: nonDict(r, depth-1), Nullable: r.IntN(2) == 0}
		}
		return arrow.StructOf(fs...)
	}
}

// nonDict avoids dictionaries below nested types (arrow-go builders do not
// build them there).
func nonDict(r *rand.Rand, depth int) arrow.DataType {
	for {
		if t := randomType(r, depth); t.ID() != arrow.DICTIONARY {
			return t
		}
	}
}

func randomSchema(r *rand.Rand) *arrow.Schema {
	n := 1 + r.IntN(8)
	fs := make([]arrow.Field, n)
	for i := range fs {
		fs[i] = arrow.Field{Name: fmt.Sprintf("c%d", i), Type: randomType(r, 2), Nullable: r.IntN(2) == 0}
	}
	return arrow.NewSchema(fs, nil)
}

// FuzzEncode feeds random record batches of random schemas through the hot
// path. Invariants, for every input:
//
//  1. the generated value schema parses with goavro;
//  2. Encode succeeds (the generator only produces representable values) and
//     writes one record per row;
//  3. goavro decodes every record with no trailing bytes to exactly the
//     Arrow row (after.* equals the row, before is null, op and ts_ms match);
//  4. schema-aware skipping over the envelope ends exactly at the end of the
//     record;
//  5. the retraction of every record decodes with before = the original
//     after, after = null, op = "d";
//  6. the inline ops (of columns, list elements and struct fields) write
//     the same bytes as the general writers.
func FuzzEncode(f *testing.F) {
	for seed := range uint64(12) {
		f.Add(seed, uint8(20), uint8(0))
	}
	f.Add(uint64(99), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, rows uint8, slice uint8) {
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		defer mem.AssertSize(t, 0)
		r := rand.New(rand.NewPCG(seed, 7))
		s := randomSchema(r)
		enc, err := NewEncoder(Config{Stream: "fuzz"}, s)
		require.NoError(t, err, "schema %s", s)
		vt, err := parseSchema(enc.Schemas().Value)
		require.NoError(t, err)
		rowT, _ := vt.fields[1].typ.nullable()
		rec := newGen(seed, mem).batch(s, int(rows))
		defer rec.Release()
		off := int64(slice) % (int64(rows) + 1)
		part := rec.NewSlice(off, int64(rows))
		defer part.Release()
		var out Batch
		require.NoError(t, enc.Encode(part, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}, TsMs: 5}, &out))
		require.Equal(t, int(part.NumRows()), out.Len())
		// 6. the inline ops write the same bytes as the general writers.
		general, err := NewEncoder(Config{Stream: "fuzz"}, s)
		require.NoError(t, err)
		general.st.noOps = true
		var gout Batch
		require.NoError(t, general.Encode(part, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}, TsMs: 5}, &gout))
		require.Equal(t, gout.buf, out.buf, "schema %s", s)
		got := decodeAll(t, enc, &out)
		rt := NewRetractor()
		require.NoError(t, rt.Add(enc.ValueFraming(), enc.Schemas().Value))
		for i, g := range got {
			require.Nil(t, g["before"])
			require.Equal(t, "c", g["op"])
			require.Equal(t, expectedRow(rowT, part, i), g["after"], "schema %s row %d", s, i)
			_, body, err := ParseHeader(out.Value(i))
			require.NoError(t, err)
			end, err := skipValue(vt, body, 0)
			require.NoError(t, err)
			require.Equal(t, len(body), end)
			rv, err := rt.Retract(nil, out.Value(i), 6, "reorg")
			require.NoError(t, err)
			var rb Batch
			rb.buf = rv
			rb.recs = []recSpan{{0, len(rv), 0, 0}}
			dec := decodeAll(t, enc, &rb)[0]
			require.Equal(t, g["after"], dec["before"])
			require.Nil(t, dec["after"])
			require.Equal(t, "d", dec["op"])
		}
	})
}
