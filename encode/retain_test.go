package encode

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestEncoderLetsGoOfTheBatch checks that an Encoder keeps no reference to
// the batch it encoded: an IPC batch's arrays point into the one buffer of
// its whole message, so an encoder that kept its columns bound kept up to
// ~2 MiB per idle stream (182 MiB for 100 streams) until the next batch.
func TestEncoderLetsGoOfTheBatch(t *testing.T) {
	s := arrow.NewSchema([]arrow.Field{
		req("_block_num", arrow.PrimitiveTypes.Uint64),
		req("hash", fsb(32)),
		opt("n", arrow.PrimitiveTypes.Int64),
	}, nil)
	for _, cfg := range []Config{{Stream: "s"}, {Stream: "s", KeyColumns: []string{"hash"}, Envelope: EnvelopeFlat}} {
		enc := newTestEncoder(t, cfg, s)
		var live atomic.Int64
		const n = 1000
		buffer := func(size int) *memory.Buffer {
			b := make([]byte, size)
			for i := range b {
				b[i] = byte(i)
			}
			live.Add(1)
			runtime.AddCleanup(&b[0], func(int) { live.Add(-1) }, 0)
			return memory.NewBufferBytes(b)
		}
		var out Batch
		func() {
			blocks := buffer(8 * n)
			for i := range n {
				binary.LittleEndian.PutUint64(blocks.Bytes()[8*i:], uint64(1+i/10))
			}
			valid := buffer(n / 8)
			cols := []arrow.Array{
				array.MakeFromData(array.NewData(arrow.PrimitiveTypes.Uint64, n, []*memory.Buffer{nil, blocks}, nil, 0, 0)),
				array.MakeFromData(array.NewData(fsb(32), n, []*memory.Buffer{nil, buffer(32 * n)}, nil, 0, 0)),
				array.MakeFromData(array.NewData(arrow.PrimitiveTypes.Int64, n, []*memory.Buffer{valid, buffer(8 * n)}, nil, array.UnknownNullCount, 0)),
			}
			rec := array.NewRecordBatch(s, cols, n)
			for _, c := range cols {
				c.Release()
			}
			require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 100)}}, &out))
			rec.Release()
		}()
		require.Equal(t, n, out.Len())
		deadline := time.Now().Add(5 * time.Second)
		for live.Load() > 0 && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		require.Zero(t, live.Load(), "the encoder (envelope %s, keys %v) still refers to the batch it encoded", cfg.Envelope, cfg.KeyColumns)
		runtime.KeepAlive(enc)
	}
}
