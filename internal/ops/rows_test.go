package ops

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// wideRecord is two rows over the Arrow types the encoder maps, with a
// null in every nullable column of the second row.
func wideRecord(t *testing.T, mem memory.Allocator) arrow.RecordBatch {
	t.Helper()
	fields := []arrow.Field{
		{Name: "_block_num", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "b", Type: arrow.BinaryTypes.Binary},
		{Name: "hash", Type: &arrow.FixedSizeBinaryType{ByteWidth: 4}},
		{Name: "dec", Type: &arrow.Decimal128Type{Precision: 20, Scale: 3}, Nullable: true},
		{Name: "ts_s", Type: &arrow.TimestampType{Unit: arrow.Second, TimeZone: "UTC"}},
		{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}},
		{Name: "day", Type: arrow.FixedWidthTypes.Date32},
		{Name: "list", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
		{Name: "st", Type: arrow.StructOf(arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int32},
			arrow.Field{Name: "y", Type: arrow.BinaryTypes.String, Nullable: true}), Nullable: true},
		{Name: "m", Type: arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)},
	}
	b := array.NewRecordBuilder(mem, arrow.NewSchema(fields, nil))
	defer b.Release()
	b.Field(0).(*array.Uint64Builder).AppendValues([]uint64{7, 8}, nil)
	b.Field(1).(*array.Int8Builder).AppendValues([]int8{-5, 0}, []bool{true, false})
	b.Field(2).(*array.Uint32Builder).AppendValues([]uint32{math.MaxUint32, 0}, nil)
	b.Field(3).(*array.Float32Builder).AppendValues([]float32{1.25, float32(math.Inf(-1))}, nil)
	b.Field(4).(*array.Float64Builder).AppendValues([]float64{math.NaN(), 0}, []bool{true, false})
	b.Field(5).(*array.StringBuilder).AppendValues([]string{"héllo", ""}, []bool{true, false})
	b.Field(6).(*array.BinaryBuilder).AppendValues([][]byte{{0, 1, 0xff}, {}}, nil)
	b.Field(7).(*array.FixedSizeBinaryBuilder).AppendValues([][]byte{{0xde, 0xad, 0xbe, 0xef}, {0, 0, 0, 1}}, nil)
	b.Field(8).(*array.Decimal128Builder).AppendValues([]decimal128.Num{decimal128.FromI64(-123456), {}}, []bool{true, false})
	b.Field(9).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1_700_000_000, -1}, nil)
	b.Field(10).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1_700_000_000_123_456, 0}, []bool{true, false})
	b.Field(11).(*array.TimestampBuilder).AppendValues([]arrow.Timestamp{1_700_000_000_123_456_789, 1}, nil)
	b.Field(12).(*array.Date32Builder).AppendValues([]arrow.Date32{19_700, -1}, nil)
	lb := b.Field(13).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.Int64Builder).AppendValues([]int64{1, -2}, nil)
	lb.AppendNull()
	sb := b.Field(14).(*array.StructBuilder)
	sb.Append(true)
	sb.FieldBuilder(0).(*array.Int32Builder).Append(3)
	sb.FieldBuilder(1).(*array.StringBuilder).AppendNull()
	sb.AppendNull()
	mb := b.Field(15).(*array.MapBuilder)
	mb.Append(true)
	mb.KeyBuilder().(*array.StringBuilder).AppendValues([]string{"a", "b"}, nil)
	mb.ItemBuilder().(*array.Int64Builder).AppendValues([]int64{1, 2}, nil)
	mb.Append(true)
	return b.NewRecordBatch()
}

// TestRenderersAgree: a row rendered from Arrow equals the same row
// encoded by the stream's encoder (each envelope and fixed_as mode),
// decoded by goavro and rendered by its writer schema; and the canonical
// form is what the doc of rows.go says.
func TestRenderersAgree(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	rec := wideRecord(t, mem)
	defer rec.Release()

	want0, err := renderArrowRow(rec, 0)
	require.NoError(t, err)
	var row0 []any
	require.NoError(t, json.Unmarshal([]byte(want0), &row0))
	assert.Equal(t, []any{7.0, -5.0, float64(math.MaxUint32), 1.25, "NaN", "héllo", "0x0001ff", "0xdeadbeef", "-123456e-3",
		1_700_000_000_000.0, 1_700_000_000_123_456.0, 1_700_000_000_123_456_789.0, 19_700.0, []any{1.0, -2.0},
		[]any{3.0, nil}, map[string]any{"a": 1.0, "b": 2.0}}, row0)

	ranges := []reorg.BlockRange{{Network: "mainnet", Start: 7, End: 8}}
	for _, tc := range []struct {
		name string
		env  encode.Envelope
		fx   encode.FixedAs
	}{
		{"debezium", encode.EnvelopeDebezium, encode.FixedAsFixed},
		{"flat", encode.EnvelopeFlat, encode.FixedAsFixed},
		{"bytes", encode.EnvelopeDebezium, encode.FixedAsBytes},
		{"hex", encode.EnvelopeFlat, encode.FixedAsHex},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc, err := encode.NewEncoder(encode.Config{Stream: "s", Topic: "t", Envelope: tc.env, FixedAs: tc.fx}, rec.Schema())
			require.NoError(t, err)
			f, err := encode.SingleObjectFraming(enc.Schemas().Value)
			require.NoError(t, err)
			enc.SetFraming(f, encode.Framing{})
			var out encode.Batch
			require.NoError(t, enc.Encode(rec, encode.BatchMeta{Op: encode.OpCreate, Ranges: ranges, BatchID: reorg.BatchID(ranges)}, &out))
			require.Equal(t, 2, out.Len())
			cache := newCodecCache(enc.Schemas().Value, nil)
			for i := range out.Len() {
				want, err := renderArrowRow(rec, i)
				require.NoError(t, err)
				ev, err := cache.decode(t.Context(), out.Value(i))
				require.NoError(t, err)
				assert.Equal(t, want, ev.row, "row %d", i)
				assert.Equal(t, int64(i), ev.rowIndex)
			}
		})
	}
}
