package ampsim

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchBytesOfSlices: the split is sized by the rows a batch holds, so
// a slice (replay mode's templates) counts as the same rows copied into a
// batch of their own, not as the buffers it shares.
func TestBatchBytesOfSlices(t *testing.T) {
	cfg := smallConfig(30)
	cfg.TxPerBlock = 40
	cfg.BatchRows = 100_000
	s := startServer(t, cfg)
	c := dial(t, s)
	ctx := testCtx(t)
	info, err := c.info(ctx, `SELECT * FROM eth_rpc.transactions`)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.keep = true
	bs, err := st.readAll()
	require.NoError(t, err)
	var rec arrow.RecordBatch
	for _, b := range bs {
		if b.rows > 0 {
			rec = b.rec
			break
		}
	}
	require.NotNil(t, rec)
	require.Greater(t, rec.NumRows(), int64(600))
	mem := memory.NewGoAllocator()
	whole := 0
	for _, col := range rec.Columns() {
		whole += dataSize(col.Data())
	}
	for _, r := range [][2]int64{{0, rec.NumRows()}, {0, 10}, {123, 456}, {rec.NumRows() - 1, rec.NumRows()}} {
		sl := rec.NewSlice(r[0], r[1])
		cols := make([]arrow.Array, sl.NumCols())
		for i, col := range sl.Columns() {
			cols[i], err = array.Concatenate([]arrow.Array{col}, mem)
			require.NoError(t, err)
		}
		own := array.NewRecordBatch(sl.Schema(), cols, sl.NumRows())
		got, want := batchBytes(sl), 0
		for _, col := range own.Columns() {
			want += dataSize(col.Data())
		}
		// Builders round the validity bitmaps and fixed buffers up to 64 bytes.
		assert.InDelta(t, want, got, float64(64*3*len(cols)), "rows %v", r)
		if r[1]-r[0] < rec.NumRows() {
			assert.Less(t, got, whole/2, "rows %v: a slice is not sized by the buffers it shares", r)
		}
		own.Release()
		for _, a := range cols {
			a.Release()
		}
		sl.Release()
	}
}
