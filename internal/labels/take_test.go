package labels

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTake checks take against each row's ValueStr for every kind of
// column it copies directly and one it concatenates (a list), on a sliced
// input (an offset) with nulls, and with negative indices as nulls.
func TestTake(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	types := []arrow.DataType{
		arrow.FixedWidthTypes.Boolean, arrow.PrimitiveTypes.Uint32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float64,
		&arrow.FixedSizeBinaryType{ByteWidth: 3}, &arrow.Decimal128Type{Precision: 38, Scale: 0},
		&arrow.TimestampType{Unit: arrow.Nanosecond, TimeZone: "+00:00"},
		arrow.BinaryTypes.String, arrow.BinaryTypes.LargeString, arrow.BinaryTypes.Binary, arrow.BinaryTypes.LargeBinary,
		arrow.ListOf(arrow.PrimitiveTypes.Int32),
	}
	const n = 12
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			b := array.NewBuilder(mem, typ)
			for i := range n {
				if i%4 == 3 {
					b.AppendNull()
					continue
				}
				switch bb := b.(type) {
				case *array.BooleanBuilder:
					bb.Append(i%2 == 0)
				case *array.Uint32Builder:
					bb.Append(uint32(i))
				case *array.Int64Builder:
					bb.Append(int64(-i))
				case *array.Float64Builder:
					bb.Append(float64(i) / 3)
				case *array.FixedSizeBinaryBuilder:
					bb.Append([]byte{byte(i), 1, 2})
				case *array.Decimal128Builder:
					bb.Append(decimal128.FromI64(int64(i * 1000)))
				case *array.TimestampBuilder:
					bb.Append(arrow.Timestamp(i))
				case *array.StringBuilder:
					bb.Append(string(rune('a' + i)))
				case *array.LargeStringBuilder:
					bb.Append(string(rune('a'+i)) + "x")
				case *array.BinaryBuilder: // Binary and LargeBinary
					bb.Append(make([]byte, i))
				case *array.ListBuilder:
					bb.Append(true)
					bb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{int32(i), int32(i + 1)}, nil)
				}
			}
			full := b.NewArray()
			b.Release()
			defer full.Release()
			col := array.NewSlice(full, 2, n) // an offset of 2
			defer col.Release()
			idx := []int32{9, 0, 1, 2, 3, 5, 6, 7}
			if typ.ID() != arrow.LIST {
				idx = append(idx, -1, 4)
			}
			out, err := take(mem, col, idx)
			require.NoError(t, err)
			defer out.Release()
			require.Equal(t, len(idx), out.Len())
			for k, r := range idx {
				if r < 0 {
					assert.True(t, out.IsNull(k), "row %d is null", k)
					continue
				}
				assert.Equal(t, col.IsNull(int(r)), out.IsNull(k), "row %d null", k)
				assert.Equal(t, col.ValueStr(int(r)), out.ValueStr(k), "row %d", k)
			}
		})
	}
}
