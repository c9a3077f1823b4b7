package labels

import (
	"encoding/binary"
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
		for k, r := range idx {
			if r >= 0 && col.IsValid(int(r)) {
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
		bufs = takeOffsets(mem, d, idx, 4, validity)
	case *arrow.LargeBinaryType, *arrow.LargeStringType:
		bufs = takeOffsets(mem, d, idx, 8, validity)
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
// are width bytes wide; it returns the validity, offsets and data buffers.
func takeOffsets(mem memory.Allocator, d arrow.ArrayData, idx []int32, width int, validity *memory.Buffer) []*memory.Buffer {
	off := d.Offset()
	ob, src := d.Buffers()[1].Bytes(), d.Buffers()[2]
	var sb []byte
	if src != nil {
		sb = src.Bytes()
	}
	at := func(i int) int {
		if width == 4 {
			return int(int32(binary.LittleEndian.Uint32(ob[i*4:])))
		}
		return int(int64(binary.LittleEndian.Uint64(ob[i*8:])))
	}
	size := 0
	for _, r := range idx {
		if r >= 0 {
			size += at(off+int(r)+1) - at(off+int(r))
		}
	}
	offs := memory.NewResizableBuffer(mem)
	offs.Resize((len(idx) + 1) * width)
	obOut := offs.Bytes()
	data := memory.NewResizableBuffer(mem)
	data.Resize(size)
	db := data.Bytes()
	pos := 0
	put := func(k, v int) {
		if width == 4 {
			binary.LittleEndian.PutUint32(obOut[k*4:], uint32(v))
		} else {
			binary.LittleEndian.PutUint64(obOut[k*8:], uint64(v))
		}
	}
	put(0, 0)
	for k, r := range idx {
		if r >= 0 {
			lo, hi := at(off+int(r)), at(off+int(r)+1)
			pos += copy(db[pos:], sb[lo:hi])
		}
		put(k+1, pos)
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
