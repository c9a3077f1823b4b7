package ampsim

import (
	"encoding/binary"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// blockSplitter cuts the data batches of one microbatch at block
// boundaries as Amp's MessageStreamWithBlockComplete does when _block_num
// is in the output (amp: crates/core/common/src/streaming_query/
// message_stream_with_block_complete.rs, process_data_batch): the first
// batch of a microbatch passes whole; a later batch whose first row is in
// the block of the previous batch's last row and that reaches a later block
// is cut once, at the first row of the next block, and its rest (however
// many blocks it holds) passes whole; any other batch passes whole. So a
// batch is not one block: DataFusion's batches (BatchRows rows) hold many
// blocks of a long microbatch.
type blockSplitter struct {
	col  int    // the _block_num column
	last uint64 // the block of the previous batch's last row
	seen bool   // a batch with rows has passed
}

// cut returns the row at which rec is cut, 0 for none, and notes rec's last
// block. A nil splitter never cuts.
func (bs *blockSplitter) cut(rec arrow.RecordBatch) int {
	n := int(rec.NumRows())
	if bs == nil || n == 0 {
		return 0
	}
	a, ok := rec.Column(bs.col).(*array.Uint64)
	if !ok {
		return 0
	}
	first, last := a.Value(0), a.Value(n-1)
	k := 0
	if bs.seen && first == bs.last && last > bs.last {
		k = sort.Search(n, func(i int) bool { return a.Value(i) > bs.last })
	}
	bs.last, bs.seen = last, true
	return k
}

// batchBytes is the size Amp's split counts for a batch of rec's rows
// built as one (DataFusion's batches own their buffers): the bytes of
// rec's rows in every buffer, so a slice of a larger batch (replay mode's
// templates) counts only its rows.
func batchBytes(rec arrow.RecordBatch) int {
	n := 0
	for _, c := range rec.Columns() {
		n += dataBytes(c.Data(), c.Data().Offset(), c.Len())
	}
	return n
}

// dataBytes is the size of rows [off, off+n) of d (off counts from the
// start of d's buffers). Types it does not know count whole buffers, as
// before: an upper bound.
func dataBytes(d arrow.ArrayData, off, n int) int {
	if n == 0 {
		return 0
	}
	bufs := d.Buffers()
	size := 0
	if len(bufs) > 0 && bufs[0] != nil {
		size += (n + 7) / 8 // validity bitmap
	}
	switch t := d.DataType().(type) {
	case arrow.FixedWidthDataType:
		if d.DataType().ID() == arrow.DICTIONARY {
			break
		}
		return size + (n*t.BitWidth()+7)/8
	case *arrow.BinaryType, *arrow.StringType:
		lo, hi := offsets32(bufs[1], off, n)
		return size + (n+1)*4 + hi - lo
	case *arrow.ListType:
		lo, hi := offsets32(bufs[1], off, n)
		ch := d.Children()[0]
		return size + (n+1)*4 + dataBytes(ch, ch.Offset()+lo, hi-lo)
	case *arrow.StructType:
		for _, ch := range d.Children() {
			size += dataBytes(ch, ch.Offset()+off, n)
		}
		return size
	}
	return dataSize(d)
}

// dataSize is the size of every buffer of d and its children, whatever
// rows d holds.
func dataSize(d arrow.ArrayData) int {
	n := 0
	for _, b := range d.Buffers() {
		if b != nil {
			n += b.Len()
		}
	}
	for _, c := range d.Children() {
		n += dataSize(c)
	}
	if d.DataType().ID() == arrow.DICTIONARY {
		n += dataSize(d.Dictionary())
	}
	return n
}

// offsets32 returns the first and last value offsets of rows [off, off+n)
// in an int32 offsets buffer.
func offsets32(b *memory.Buffer, off, n int) (lo, hi int) {
	bs := b.Bytes()
	return int(int32(binary.LittleEndian.Uint32(bs[4*off:]))), int(int32(binary.LittleEndian.Uint32(bs[4*(off+n):])))
}
