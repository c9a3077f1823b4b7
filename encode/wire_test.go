package encode

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestWireBytes pins the exact bytes of one record per envelope (H19):
// testdata/wire_*.golden hold the hex of the framed value (rewrite with
// -update after an intended change). The Debezium case is also checked
// against literal bytes assembled by hand from the Avro specification.
func TestWireBytes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := arrow.NewSchema([]arrow.Field{req("_block_num", arrow.PrimitiveTypes.Uint64), opt("v", arrow.PrimitiveTypes.Int32)}, nil)
	bb := array.NewUint64Builder(mem)
	defer bb.Release()
	bb.Append(300)
	vb := array.NewInt32Builder(mem)
	defer vb.Release()
	vb.Append(-2)
	c0, c1 := bb.NewArray(), vb.NewArray()
	defer c0.Release()
	defer c1.Release()
	rec := array.NewRecordBatch(s, []arrow.Array{c0, c1}, 1)
	defer rec.Release()
	rng := reorg.BlockRange{Network: "n", Start: 1, End: 2}
	rng.Hash[31] = 0xab
	meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{rng}, BatchID: "id", TsMs: 1, RowOffset: 3}

	for _, tc := range []struct {
		file string
		cfg  Config
	}{
		{"wire_debezium.golden", Config{Stream: "s", Version: "v"}},
		{"wire_flat.golden", Config{Stream: "s", Envelope: EnvelopeFlat}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			enc := newTestEncoder(t, tc.cfg, s)
			enc.SetFraming(ConfluentFraming(7), Framing{})
			var out Batch
			require.NoError(t, enc.Encode(rec, meta, &out))
			got := hex.EncodeToString(out.Value(0))
			path := filepath.Join("testdata", tc.file)
			if *updateGolden {
				require.NoError(t, os.WriteFile(path, []byte(got+"\n"), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, strings.TrimSpace(string(want)), got)
			assert.Equal(t, "id", string(out.Key(0)))
		})
	}

	// By hand: Confluent header, before null, after = row, source, op, ts_ms.
	str := func(s string) string { return hex.EncodeToString(appendString(nil, s)) }
	hash := "0x" + strings.Repeat("0", 62) + "ab"
	want := "0000000007" + // magic 0, schema id 7
		"00" + "02" + // before: null; after: branch 1
		"d804" + "0203" + // _block_num 300; v: branch 1, -2
		str(Connector) + str("v") + str("s") + str("n") +
		"02d804" + // source.block_num: branch 1, 300
		str("id") + "02" + "04" + str(hash) + "00" + // batch_id, range_start 1, range_end 2, range_hash, prev null
		"06" + "00" + "00" + // row 3, snapshot false, cause null
		str("c") + "02" // op, ts_ms 1
	enc := newTestEncoder(t, Config{Stream: "s", Version: "v"}, s)
	enc.SetFraming(ConfluentFraming(7), Framing{})
	var out Batch
	require.NoError(t, enc.Encode(rec, meta, &out))
	assert.Equal(t, want, hex.EncodeToString(out.Value(0)))
}
