package encode

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// allTypesSchema has a column of every Arrow type of design.md §8 (and the
// extra ones the encoder supports), nullable and not.
func allTypesSchema() *arrow.Schema {
	tsz := func(u arrow.TimeUnit) arrow.DataType { return &arrow.TimestampType{Unit: u, TimeZone: "+00:00"} }
	return arrow.NewSchema([]arrow.Field{
		opt("null", arrow.Null),
		req("bool", arrow.FixedWidthTypes.Boolean), opt("bool_n", arrow.FixedWidthTypes.Boolean),
		req("i8", arrow.PrimitiveTypes.Int8), req("i16", arrow.PrimitiveTypes.Int16),
		req("i32", arrow.PrimitiveTypes.Int32), opt("i64_n", arrow.PrimitiveTypes.Int64),
		req("u8", arrow.PrimitiveTypes.Uint8), req("u16", arrow.PrimitiveTypes.Uint16),
		opt("u32_n", arrow.PrimitiveTypes.Uint32), req("u64", arrow.PrimitiveTypes.Uint64),
		req("f32", arrow.PrimitiveTypes.Float32), opt("f64_n", arrow.PrimitiveTypes.Float64),
		req("utf8", arrow.BinaryTypes.String), opt("large_utf8", arrow.BinaryTypes.LargeString),
		opt("utf8_view", arrow.BinaryTypes.StringView),
		req("binary", arrow.BinaryTypes.Binary), opt("large_binary", arrow.BinaryTypes.LargeBinary),
		opt("binary_view", arrow.BinaryTypes.BinaryView),
		req("fsb20", fsb(20)), opt("fsb32_n", fsb(32)),
		req("dec38", wei()), opt("dec10_4", &arrow.Decimal128Type{Precision: 10, Scale: 4}),
		req("dec1", &arrow.Decimal128Type{Precision: 1, Scale: 0}),
		opt("dec76", &arrow.Decimal256Type{Precision: 76, Scale: 0}),
		req("dec50_10", &arrow.Decimal256Type{Precision: 50, Scale: 10}),
		req("ts_s", tsz(arrow.Second)), req("ts_ms", tsz(arrow.Millisecond)), opt("ts_us", tsz(arrow.Microsecond)),
		req("ts_ns", tsz(arrow.Nanosecond)), req("ts_ns_local", &arrow.TimestampType{Unit: arrow.Nanosecond}),
		opt("date32", arrow.FixedWidthTypes.Date32), req("date64", arrow.FixedWidthTypes.Date64),
		req("time32", arrow.FixedWidthTypes.Time32ms), opt("time64", arrow.FixedWidthTypes.Time64us),
		opt("list_i64", arrow.ListOf(arrow.PrimitiveTypes.Int64)),
		req("list_list_str", arrow.ListOf(arrow.ListOf(arrow.BinaryTypes.String))),
		opt("large_list", arrow.LargeListOf(arrow.BinaryTypes.LargeString)),
		req("fixed_list", arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Int32)),
		opt("struct", arrow.StructOf(req("a", arrow.PrimitiveTypes.Int32), opt("b", arrow.BinaryTypes.String),
			opt("c", arrow.StructOf(req("d", fsb(32)))))),
		opt("list_struct", arrow.ListOf(arrow.StructOf(req("address", fsb(20)), req("keys", arrow.ListOf(fsb(32)))))),
		opt("map", arrow.MapOf(arrow.BinaryTypes.String, arrow.PrimitiveTypes.Int64)),
		opt("dict_str", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int8, ValueType: arrow.BinaryTypes.String}),
		req("dict_fsb", &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Uint32, ValueType: fsb(32)}),
		req("weird name-1", arrow.PrimitiveTypes.Int32),
	}, nil)
}

func newTestEncoder(t testing.TB, cfg Config, s *arrow.Schema) *Encoder {
	t.Helper()
	enc, err := NewEncoder(cfg, s)
	require.NoError(t, err)
	_, err = goavro.NewCodec(enc.Schemas().Value)
	require.NoError(t, err, "value schema must parse with goavro:\n%s", enc.Schemas().Value)
	return enc
}

// TestDifferentialAllTypes encodes random batches (biased to edge values) of
// every supported type with the hot path and checks that goavro decodes
// exactly the Arrow values, in the Debezium envelope, the flat envelope and
// row-key mode, for whole and sliced record batches.
func TestDifferentialAllTypes(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := allTypesSchema()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"debezium", Config{Stream: "s1", Topic: "t.all", Version: "v1"}},
		{"flat", Config{Stream: "s1", Topic: "t.all", Envelope: EnvelopeFlat}},
		{"rowkey-hex", Config{Stream: "s1", KeyColumns: []string{"fsb20", "i32"}, FixedAs: FixedAsHex}},
		{"fixed-as-bytes", Config{Stream: "s1", FixedAs: FixedAsBytes}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := newTestEncoder(t, tc.cfg, s)
			vt, err := parseSchema(enc.Schemas().Value)
			require.NoError(t, err)
			rowT := vt
			if tc.cfg.Envelope == EnvelopeDebezium {
				rowT, _ = vt.fields[1].typ.nullable()
			}
			for seed := uint64(1); seed <= 4; seed++ {
				rec := newGen(seed, mem).batch(s, 150)
				for _, sl := range [][2]int64{{0, 150}, {7, 90}} {
					part := rec.NewSlice(sl[0], sl[1])
					var out Batch
					meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(10, 12)}, TsMs: 1700000000123, RowOffset: 5}
					require.NoError(t, enc.Encode(part, meta, &out))
					require.Equal(t, int(part.NumRows()), out.Len())
					got := decodeAll(t, enc, &out)
					for i, g := range got {
						want := expectedRow(rowT, part, i)
						row := g
						if tc.cfg.Envelope == EnvelopeDebezium {
							assert.Nil(t, g["before"])
							row = g["after"].(map[string]any)
							assert.Equal(t, "c", g["op"])
							assert.Equal(t, int64(1700000000123), g["ts_ms"])
						}
						for k, v := range want {
							require.Equal(t, v, row[k], "seed %d slice %v row %d column %s", seed, sl, i, k)
						}
					}
					if len(tc.cfg.KeyColumns) > 0 {
						kc, err := goavro.NewCodec(enc.Schemas().Key)
						require.NoError(t, err)
						kt, err := parseSchema(enc.Schemas().Key)
						require.NoError(t, err)
						for i := range out.Len() {
							_, body, err := ParseHeader(out.Key(i))
							require.NoError(t, err)
							native, rest, err := kc.NativeFromBinary(body)
							require.NoError(t, err)
							require.Empty(t, rest)
							k := normalize(kt, native).(map[string]any)
							assert.Equal(t, expected(kt.fields[0].typ, part.Column(19), i), k["fsb20"])
							assert.Equal(t, expected(kt.fields[1].typ, part.Column(5), i), k["i32"])
						}
					}
					part.Release()
				}
				rec.Release()
			}
		})
	}
}

func TestEnvelopeSourceFields(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := logsSchema()
	rec := newGen(3, mem).batch(s, 20)
	defer rec.Release()
	r1 := testRange(100, 101)
	r2 := testRange(7, 7)
	r2.Network, r2.HasPrevHash = "base", false
	tests := []struct {
		name   string
		cfg    Config
		meta   BatchMeta
		fields map[string]any
	}{
		{
			name: "debezium live",
			cfg:  Config{Stream: "logs", Topic: "eth.logs", Version: "1.2.3"},
			meta: BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{r1}, TsMs: 42, RowOffset: 100},
			fields: map[string]any{"connector": Connector, "version": "1.2.3", "stream": "logs", "network": "mainnet",
				"batch_id": reorg.BatchID([]reorg.BlockRange{r1}), "range_start": int64(100), "range_end": int64(101),
				"range_hash": r1.Hash.String(), "range_prev_hash": r1.PrevHash.String(), "snapshot": false, "cause": nil},
		},
		{
			name: "debezium backfill two networks",
			cfg:  Config{Stream: "logs", Version: "dev"},
			meta: BatchMeta{Op: OpRead, Ranges: []reorg.BlockRange{r1, r2}, TsMs: 42, Snapshot: true, BatchID: "abc"},
			fields: map[string]any{"connector": Connector, "version": "dev", "stream": "logs", "network": "mainnet|base",
				"batch_id": "abc", "range_start": int64(100), "range_end": int64(101),
				"range_hash": r1.Hash.String() + "|" + r2.Hash.String(), "range_prev_hash": r1.PrevHash.String() + "|",
				"snapshot": true, "cause": nil},
		},
		{
			// source.row beyond the inline varint of the row loop
			name:   "debezium large row offset",
			cfg:    Config{Stream: "logs", Version: "dev"},
			meta:   BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{r1}, TsMs: 1 << 40, RowOffset: 1<<27 - 10},
			fields: map[string]any{"connector": Connector, "network": "mainnet", "snapshot": false},
		},
		{
			name:   "debezium delete",
			cfg:    Config{Stream: "logs", Version: "dev"},
			meta:   BatchMeta{Op: OpDelete, Ranges: []reorg.BlockRange{r1}, TsMs: 42, Cause: "rewind"},
			fields: map[string]any{"connector": Connector, "network": "mainnet", "cause": "rewind"},
		},
		{
			name: "flat",
			cfg:  Config{Stream: "logs", Envelope: EnvelopeFlat},
			meta: BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{r1}, TsMs: 42, RowOffset: 100},
			fields: map[string]any{"_amp_op": "c", "_amp_ts_ms": int64(42), "_amp_stream": "logs", "_amp_network": "mainnet",
				"_amp_batch_id": reorg.BatchID([]reorg.BlockRange{r1}), "_amp_range_start": int64(100), "_amp_range_end": int64(101),
				"_amp_range_hash": r1.Hash.String(), "_amp_range_prev_hash": r1.PrevHash.String(), "_amp_snapshot": false, "_amp_cause": nil},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enc := newTestEncoder(t, tc.cfg, s)
			var out Batch
			require.NoError(t, enc.Encode(rec, tc.meta, &out))
			got := decodeAll(t, enc, &out)
			blk := rec.Column(0).(*array.Uint64)
			wantID := tc.meta.BatchID
			if wantID == "" {
				wantID = reorg.BatchID(tc.meta.Ranges)
			}
			for i, g := range got {
				assert.Equal(t, wantID, string(out.Key(i)))
				fields := g
				rowField, blockField, idxField := "", "_amp_block_num", "_amp_row"
				if tc.cfg.Envelope == EnvelopeDebezium {
					fields = g["source"].(map[string]any)
					blockField, idxField = "block_num", "row"
					assert.Equal(t, string(tc.meta.Op), g["op"])
					if tc.meta.Op == OpDelete {
						rowField = "before"
						assert.Nil(t, g["after"])
					} else {
						rowField = "after"
						assert.Nil(t, g["before"])
					}
					assert.Equal(t, expected(enc.cs.row.fields[7].typ, rec.Column(7), i),
						g[rowField].(map[string]any)["address"])
				}
				for k, v := range tc.fields {
					assert.Equal(t, v, fields[k], k)
				}
				assert.Equal(t, int64(blk.Value(i)), fields[blockField])
				assert.Equal(t, tc.meta.RowOffset+int64(i), fields[idxField])
			}
		})
	}
}

func TestBlockNumAbsentIsNull(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := arrow.NewSchema([]arrow.Field{req("x", arrow.PrimitiveTypes.Int64)}, nil)
	rec := newGen(1, mem).batch(s, 3)
	defer rec.Release()
	enc := newTestEncoder(t, Config{Stream: "s"}, s)
	var out Batch
	require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 1)}}, &out))
	for _, g := range decodeAll(t, enc, &out) {
		assert.Nil(t, g["source"].(map[string]any)["block_num"])
	}
}

func TestValueErrors(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	build := func(dt arrow.DataType, nullable bool, fill func(b array.Builder)) arrow.RecordBatch {
		s := arrow.NewSchema([]arrow.Field{{Name: "col", Type: dt, Nullable: nullable}}, nil)
		b := array.NewBuilder(mem, dt)
		defer b.Release()
		fill(b)
		a := b.NewArray()
		defer a.Release()
		return array.NewRecordBatch(s, []arrow.Array{a}, int64(a.Len()))
	}
	tests := []struct {
		name        string
		rec         arrow.RecordBatch
		errContains string
		row         int
	}{
		{"uint64 above int64", build(arrow.PrimitiveTypes.Uint64, false, func(b array.Builder) {
			b.(*array.Uint64Builder).AppendValues([]uint64{1, math.MaxUint64}, nil)
		}), "18446744073709551615", 1},
		{"invalid utf8", build(arrow.BinaryTypes.String, false, func(b array.Builder) {
			b.(*array.StringBuilder).AppendValues([]string{"ok", "ok", "bad\xff"}, nil)
		}), "invalid UTF-8", 2},
		{"invalid utf8 view", build(arrow.BinaryTypes.StringView, false, func(b array.Builder) {
			b.(*array.StringViewBuilder).AppendValues([]string{"bad\xc3"}, nil)
		}), "invalid UTF-8", 0},
		{"null in non-nullable", build(arrow.PrimitiveTypes.Int32, false, func(b array.Builder) {
			b.(*array.Int32Builder).AppendValues([]int32{1, 2}, []bool{true, false})
		}), "non-nullable", 1},
		{"decimal beyond precision", build(&arrow.Decimal128Type{Precision: 3, Scale: 1}, false, func(b array.Builder) {
			b.(*array.Decimal128Builder).Append(decimal128FromI64(12345))
		}), "precision 3", 0},
		{"date64 not whole days", build(arrow.FixedWidthTypes.Date64, false, func(b array.Builder) {
			b.(*array.Date64Builder).Append(arrow.Date64(1))
		}), "whole number of days", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.rec.Release()
			enc := newTestEncoder(t, Config{Stream: "s"}, tc.rec.Schema())
			out := Batch{}
			empty := tc.rec.NewSlice(0, 0)
			defer empty.Release()
			require.NoError(t, enc.Encode(empty, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 1)}}, &out))
			before := out.Size()
			err := enc.Encode(tc.rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 1)}}, &out)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrValue)
			assert.ErrorContains(t, err, tc.errContains)
			var ve *ValueError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, "col", ve.Column)
			assert.Equal(t, tc.row, ve.Row)
			assert.Equal(t, 0, out.Len(), "nothing is appended on error")
			assert.Equal(t, before, out.Size())
		})
	}
}

// TestByteExactAgainstGoavro checks the hot path writes exactly the bytes
// goavro writes for the same datum (minimal two's-complement decimals, one
// block per array, zig-zag varints), on every type except maps (goavro writes
// map entries in Go's random iteration order).
func TestByteExactAgainstGoavro(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	all := allTypesSchema()
	var noMap []arrow.Field
	for _, f := range all.Fields() {
		if f.Type.ID() != arrow.MAP {
			noMap = append(noMap, f)
		}
	}
	for name, s := range map[string]*arrow.Schema{"all-but-map": arrow.NewSchema(noMap, nil),
		"blocks": blocksSchema(), "transactions": transactionsSchema(), "logs": logsSchema()} {
		t.Run(name, func(t *testing.T) {
			enc := newTestEncoder(t, Config{Stream: "s", Version: "v"}, s)
			codec, err := goavro.NewCodec(enc.Schemas().Value)
			require.NoError(t, err)
			rec := newGen(11, mem).batch(s, 100)
			defer rec.Release()
			var out Batch
			require.NoError(t, enc.Encode(rec, BatchMeta{Op: OpRead, Snapshot: true, Ranges: []reorg.BlockRange{testRange(5, 9)}, TsMs: 1}, &out))
			for i := range out.Len() {
				_, body, err := ParseHeader(out.Value(i))
				require.NoError(t, err)
				native, _, err := codec.NativeFromBinary(body)
				require.NoError(t, err)
				again, err := codec.BinaryFromNative(nil, native)
				require.NoError(t, err)
				require.Equal(t, again, body, "record %d", i)
			}
		})
	}
}

func TestDecimalMinimalBytes(t *testing.T) {
	tests := []struct {
		name string
		be   []byte
		want []byte
	}{
		{"zero", make([]byte, 16), []byte{0x00}},
		{"one", append(make([]byte, 15), 1), []byte{0x01}},
		{"127", append(make([]byte, 15), 0x7f), []byte{0x7f}},
		{"128 needs a sign byte", append(make([]byte, 15), 0x80), []byte{0x00, 0x80}},
		{"minus one", bytesOf(16, 0xff), []byte{0xff}},
		{"minus 128", append(bytesOf(15, 0xff), 0x80), []byte{0x80}},
		{"minus 129", append(bytesOf(14, 0xff), 0xff, 0x7f), []byte{0xff, 0x7f}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := appendTwosComplement(nil, tc.be)
			assert.Equal(t, append([]byte{byte(2 * len(tc.want))}, tc.want...), got)
		})
	}
}

func bytesOf(n int, b byte) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

func TestVarintAndDecimalFastPaths(t *testing.T) {
	r := newGen(5, memory.DefaultAllocator).r
	for range 20000 {
		v := r.Int64() >> r.IntN(64)
		if r.IntN(2) == 0 {
			v = -v
		}
		// appendLong against the byte-at-a-time reference.
		u := uint64(v<<1) ^ uint64(v>>63)
		var want []byte
		for u >= 0x80 {
			want = append(want, byte(u)|0x80)
			u >>= 7
		}
		want = append(want, byte(u))
		require.Equal(t, want, appendLong([]byte{}, v), "long %d", v)
		// putVarint4 (the inline path of lengths and integers below 2^28).
		if u := uint64(v<<1) ^ uint64(v>>63); u < 1<<28 {
			var d [10]byte
			require.Equal(t, want, d[:putVarint4(&d, u)], "varint4 %d", u)
		}

		// appendDecimal128 against appendTwosComplement.
		hi, lo := v>>r.IntN(64), r.Uint64()>>r.IntN(64)
		var be [16]byte
		binary.BigEndian.PutUint64(be[:8], uint64(hi))
		binary.BigEndian.PutUint64(be[8:], lo)
		require.Equal(t, appendTwosComplement([]byte{7}, be[:]), appendDecimal128([]byte{7}, hi, lo), "decimal %d:%d", hi, lo)
	}
}

// TestASCIIFastPath checks the ASCII test that lets strings skip utf8.Valid:
// it must be true exactly when every byte is below 0x80, at every length
// and position of the first non-ASCII byte.
func TestASCIIFastPath(t *testing.T) {
	for n := range 40 {
		v := bytes.Repeat([]byte{'7'}, n)
		require.True(t, ascii(v), "len %d", n)
		for k := range n {
			for _, c := range []byte{0x80, 0xc3, 0xff} {
				w := bytes.Clone(v)
				w[k] = c
				require.False(t, ascii(w), "len %d, byte %#x at %d", n, c, k)
			}
		}
	}
}

// TestEncodeSchemaChanged checks that a batch whose schema differs from the
// encoder's is refused with ErrSchemaChanged, also after batches of an
// equal schema (a distinct *Schema, as a new IPC stream gives) were
// accepted: the encoder remembers which schema it compared, not that it
// compared once.
func TestEncodeSchemaChanged(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	mk := func(f arrow.Field) arrow.RecordBatch {
		s := arrow.NewSchema([]arrow.Field{f}, nil)
		b := array.NewRecordBuilder(mem, s)
		defer b.Release()
		switch bb := b.Field(0).(type) {
		case *array.Int64Builder:
			bb.Append(7)
		case *array.StringBuilder:
			bb.Append("x")
		}
		return b.NewRecordBatch()
	}
	enc := newTestEncoder(t, Config{Stream: "s1"}, arrow.NewSchema([]arrow.Field{req("a", arrow.PrimitiveTypes.Int64)}, nil))
	meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}}
	for range 2 {
		rec := mk(req("a", arrow.PrimitiveTypes.Int64)) // equal, not the same pointer
		var out Batch
		require.NoError(t, enc.Encode(rec, meta, &out))
		require.NoError(t, enc.Encode(rec, meta, &out))
		rec.Release()
	}
	for _, f := range []arrow.Field{req("a", arrow.BinaryTypes.String), req("b", arrow.PrimitiveTypes.Int64)} {
		rec := mk(f)
		var out Batch
		err := enc.Encode(rec, meta, &out)
		rec.Release()
		require.ErrorIs(t, err, ErrSchemaChanged, "schema %s", f)
	}
}
