package labels

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// take returns the rows idx of col, in that order, as a new array from
// mem; a negative index is a null. Fixed-width columns (integers,
// timestamps, decimals, FixedSizeBinary), booleans and 32/64-bit offset
// binary and strings are copied directly into one buffer each; other types
// (lists, structs, maps: only the query's columns, where no index is
// negative) are cut into slices of consecutive rows and concatenated.
// (arrow-go's compute.Take does this for every type, but its package pulls
// parquet and thrift into the binary.)
func take(mem memory.Allocator, col arrow.Array, idx []int32) (arrow.Array, error) {
	d := col.Data()
	n := len(idx)
	nulls := 0
	var validity *memory.Buffer
	needValidity := col.NullN() > 0
	for _, r := range idx {
		if r < 0 {
			needValidity = true
			break
		}
	}
	if needValidity {
		validity = memory.NewResizableBuffer(mem)
		validity.Resize(int(bitutil.BytesForBits(int64(n))))
		vb := validity.Bytes()
		clear(vb)
		srcNulls := col.NullN() > 0
		for k, r := range idx {
			if r >= 0 && (!srcNulls || col.IsValid(int(r))) {
				bitutil.SetBit(vb, k)
			} else {
				nulls++
			}
		}
	}
	release := func(bufs ...*memory.Buffer) {
		for _, b := range bufs {
			if b != nil {
				b.Release()
			}
		}
	}
	off := d.Offset()
	var bufs []*memory.Buffer
	switch t := col.DataType().(type) {
	case *arrow.BooleanType:
		src := d.Buffers()[1].Bytes()
		vals := memory.NewResizableBuffer(mem)
		vals.Resize(int(bitutil.BytesForBits(int64(n))))
		vb := vals.Bytes()
		clear(vb)
		for k, r := range idx {
			if r >= 0 && bitutil.BitIsSet(src, off+int(r)) {
				bitutil.SetBit(vb, k)
			}
		}
		bufs = []*memory.Buffer{validity, vals}
	case *arrow.BinaryType, *arrow.StringType:
		bufs = takeOffsets[int32](mem, d, idx, validity)
	case *arrow.LargeBinaryType, *arrow.LargeStringType:
		bufs = takeOffsets[int64](mem, d, idx, validity)
	case arrow.FixedWidthDataType:
		if len(d.Children()) > 0 || t.BitWidth()%8 != 0 {
			return takeSlices(mem, col, idx, validity)
		}
		w := t.BitWidth() / 8
		src := d.Buffers()[1].Bytes()
		vals := memory.NewResizableBuffer(mem)
		vals.Resize(n * w)
		vb := vals.Bytes()
		for k, r := range idx {
			if r < 0 {
				clear(vb[k*w : (k+1)*w])
				continue
			}
			copy(vb[k*w:(k+1)*w], src[(off+int(r))*w:])
		}
		bufs = []*memory.Buffer{validity, vals}
	default:
		return takeSlices(mem, col, idx, validity)
	}
	data := array.NewData(col.DataType(), n, bufs, nil, nulls, 0)
	release(bufs...)
	defer data.Release()
	return array.MakeFromData(data), nil
}

// takeOffsets copies the rows idx of an offset binary array whose offsets
// are int32 or int64; it returns the validity, offsets and data buffers.
func takeOffsets[O int32 | int64](mem memory.Allocator, d arrow.ArrayData, idx []int32, validity *memory.Buffer) []*memory.Buffer {
	off := d.Offset()
	offsets := arrow.GetData[O](d.Buffers()[1].Bytes())[off:]
	var src []byte
	if b := d.Buffers()[2]; b != nil {
		src = b.Bytes()
	}
	size := 0
	for _, r := range idx {
		if r >= 0 {
			size += int(offsets[r+1] - offsets[r])
		}
	}
	width := 4
	if _, wide := any(O(0)).(int64); wide {
		width = 8
	}
	offs := memory.NewResizableBuffer(mem)
	offs.Resize((len(idx) + 1) * width)
	out := arrow.GetData[O](offs.Bytes())
	data := memory.NewResizableBuffer(mem)
	data.Resize(size)
	db := data.Bytes()
	pos := 0
	out[0] = 0
	for k, r := range idx {
		if r >= 0 {
			pos += copy(db[pos:], src[offsets[r]:offsets[r+1]])
		}
		out[k+1] = O(pos)
	}
	return []*memory.Buffer{validity, offs, data}
}

// takeSlices takes rows of a nested column as slices of consecutive rows,
// concatenated; no index may be negative.
func takeSlices(mem memory.Allocator, col arrow.Array, idx []int32, validity *memory.Buffer) (arrow.Array, error) {
	if validity != nil {
		validity.Release()
	}
	var parts []arrow.Array
	defer func() {
		for _, p := range parts {
			p.Release()
		}
	}()
	for i := 0; i < len(idx); {
		if idx[i] < 0 {
			return nil, fmt.Errorf("labels: a null row of a %s column", col.DataType())
		}
		j := i + 1
		for j < len(idx) && idx[j] == idx[j-1]+1 {
			j++
		}
		parts = append(parts, array.NewSlice(col, int64(idx[i]), int64(idx[j-1])+1))
		i = j
	}
	if len(parts) == 0 {
		return array.MakeArrayOfNull(mem, col.DataType(), 0), nil
	}
	return array.Concatenate(parts, mem)
}
