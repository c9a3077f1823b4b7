package encode

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestOpsMatchGeneral encodes batches whose columns have no nulls and
// batches with nulls (inline ops, also for the elements of lists and the
// fields of structs: access and authorization lists), in every
// envelope and in row-key mode, and checks the bytes equal those of the
// general writers.
func TestOpsMatchGeneral(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	txs := transactionsBatch(mem, 300, 9)
	defer txs.Release()
	all := newGen(4, mem).batch(allTypesSchema(), 200)
	defer all.Release()
	allOne := all.NewSlice(3, 4) // one row: many nullable columns without nulls
	defer allOne.Release()
	meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(3, 4)}, TsMs: 7, RowOffset: 100}
	tests := []struct {
		name string
		cfg  Config
		rec  arrow.RecordBatch
	}{
		{"transactions debezium", Config{Stream: "s"}, txs},
		{"transactions flat", Config{Stream: "s", Envelope: EnvelopeFlat}, txs},
		{"transactions row key", Config{Stream: "s", KeyColumns: []string{"tx_hash", "block_num", "value"}}, txs},
		{"all types", Config{Stream: "s"}, all},
		{"all types one row", Config{Stream: "s"}, allOne},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inline := newTestEncoder(t, tc.cfg, tc.rec.Schema())
			general := newTestEncoder(t, tc.cfg, tc.rec.Schema())
			general.st.noOps = true
			var p, g Batch
			require.NoError(t, inline.Encode(tc.rec, meta, &p))
			require.NoError(t, general.Encode(tc.rec, meta, &g))
			require.Equal(t, g.Len(), p.Len())
			for i := range p.Len() {
				require.Equal(t, g.Value(i), p.Value(i), "value of row %d", i)
				require.Equal(t, g.Key(i), p.Key(i), "key of row %d", i)
			}
			// inline ops were in use for at least one
			// column, and only the general writers in the other encoder
			n := 0
			for j, o := range inline.ops {
				if o.kind != opWriter || o.w != inline.cs.cols[j] {
					n++
				}
			}
			require.Positive(t, n)
			for j, o := range general.ops {
				require.True(t, o.kind == opWriter && o.w == general.cs.cols[j], "column %d: general writer", j)
			}
		})
	}
}

// TestEncodeManyColumns encodes a wide record (71 columns).
func TestEncodeManyColumns(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var fs []arrow.Field
	for i := range 71 {
		dt := arrow.DataType(arrow.PrimitiveTypes.Int64)
		if i%3 == 1 {
			dt = arrow.BinaryTypes.String
		}
		fs = append(fs, arrow.Field{Name: fmt.Sprintf("c%d", i), Type: dt, Nullable: i%2 == 0})
	}
	s := arrow.NewSchema(fs, nil)
	rec := newGen(5, mem).batch(s, 20)
	defer rec.Release()
	enc := newTestEncoder(t, Config{Stream: "wide"}, s)
	var out Batch
	require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}}, &out))
	vt, err := parseSchema(enc.Schemas().Value)
	require.NoError(t, err)
	rowT, _ := vt.fields[1].typ.nullable()
	for i, g := range decodeAll(t, enc, &out) {
		require.Equal(t, expectedRow(rowT, rec, i), g["after"], "row %d", i)
	}
}

// TestAppendHashMatchesString checks the allocation-free hash writer of the
// envelope against reorg.Hash.String.
func TestAppendHashMatchesString(t *testing.T) {
	for _, h := range []reorg.Hash{{}, testRange(7, 9).Hash, {0xff, 0x01, 31: 0x80}} {
		require.Equal(t, appendString(nil, h.String()), appendHash(nil, &h))
	}
}
