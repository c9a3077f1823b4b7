package encode

import (
	"bytes"
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/memory"
	hamba "github.com/hamba/avro/v2"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// benchRows is the size of one Arrow record batch (Amp sends ~10k rows).
const benchRows = 10_000

// transactionsBatch builds realistic rows of the transactions table: 1–3 KB
// calldata tails, mostly type-2 transactions with EIP-1559 fees, few access
// lists, rare blob and authorization lists.
func transactionsBatch(mem memory.Allocator, n int, seed uint64) arrow.RecordBatch {
	r := rand.New(rand.NewPCG(seed, 1))
	bld := array.NewRecordBuilder(mem, transactionsSchema())
	defer bld.Release()
	fill := func(b *array.FixedSizeBinaryBuilder, w int) {
		v := make([]byte, w)
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		b.Append(v)
	}
	gwei := func(b *array.Decimal128Builder, null bool) {
		if null {
			b.AppendNull()
			return
		}
		b.Append(decimal128.FromU64(1_000_000_000 * (1 + r.Uint64N(80))))
	}
	block := uint64(24_000_000)
	for i := range n {
		if i%170 == 0 {
			block++
		}
		typ := []int32{0, 2, 2, 2, 2, 2, 2, 3, 4, 1}[r.IntN(10)]
		bld.Field(0).(*array.Uint64Builder).Append(block)
		fill(bld.Field(1).(*array.FixedSizeBinaryBuilder), 32)
		bld.Field(2).(*array.Uint64Builder).Append(block)
		bld.Field(3).(*array.TimestampBuilder).Append(arrow.Timestamp(int64(1_700_000_000+block*12) * 1_000_000_000))
		bld.Field(4).(*array.Uint32Builder).Append(uint32(i % 170))
		fill(bld.Field(5).(*array.FixedSizeBinaryBuilder), 32)
		if r.IntN(100) == 0 {
			bld.Field(6).AppendNull()
		} else {
			fill(bld.Field(6).(*array.FixedSizeBinaryBuilder), 20)
		}
		bld.Field(7).(*array.Uint64Builder).Append(r.Uint64N(100_000))
		gwei(bld.Field(8).(*array.Decimal128Builder), false)
		bld.Field(9).(*array.Uint64Builder).Append(21_000 + r.Uint64N(300_000))
		bld.Field(10).(*array.StringBuilder).Append(fmt.Sprint(r.Uint64N(1 << 62)))
		inLen := []int{0, 4, 68, 68, 68, 132, 196, 260, 580, 1200}[r.IntN(10)]
		input := make([]byte, inLen)
		for k := range input {
			input[k] = byte(r.Uint32())
		}
		bld.Field(11).(*array.BinaryBuilder).Append(input)
		fill(bld.Field(12).(*array.FixedSizeBinaryBuilder), 32)
		fill(bld.Field(13).(*array.FixedSizeBinaryBuilder), 32)
		bld.Field(14).(*array.BooleanBuilder).Append(r.IntN(2) == 0)
		bld.Field(15).(*array.Uint64Builder).Append(1)
		bld.Field(16).(*array.Uint64Builder).Append(21_000 + r.Uint64N(200_000))
		bld.Field(17).(*array.Int32Builder).Append(typ)
		gwei(bld.Field(18).(*array.Decimal128Builder), typ < 2)
		gwei(bld.Field(19).(*array.Decimal128Builder), typ < 2)
		gwei(bld.Field(20).(*array.Decimal128Builder), typ != 3)
		fill(bld.Field(21).(*array.FixedSizeBinaryBuilder), 20)
		bld.Field(22).(*array.BooleanBuilder).Append(r.IntN(50) != 0)
		bld.Field(23).AppendNull()
		al := bld.Field(24).(*array.ListBuilder)
		if typ == 0 {
			al.AppendNull()
		} else {
			al.Append(true)
			if r.IntN(8) == 0 {
				sb := al.ValueBuilder().(*array.StructBuilder)
				sb.Append(true)
				fill(sb.FieldBuilder(0).(*array.FixedSizeBinaryBuilder), 20)
				kb := sb.FieldBuilder(1).(*array.ListBuilder)
				kb.Append(true)
				for range 2 {
					fill(kb.ValueBuilder().(*array.FixedSizeBinaryBuilder), 32)
				}
			}
		}
		bh := bld.Field(25).(*array.ListBuilder)
		if typ == 3 {
			bh.Append(true)
			fill(bh.ValueBuilder().(*array.FixedSizeBinaryBuilder), 32)
		} else {
			bh.AppendNull()
		}
		au := bld.Field(26).(*array.ListBuilder)
		if typ == 4 {
			au.Append(true)
			sb := au.ValueBuilder().(*array.StructBuilder)
			sb.Append(true)
			sb.FieldBuilder(0).(*array.Uint64Builder).Append(1)
			fill(sb.FieldBuilder(1).(*array.FixedSizeBinaryBuilder), 20)
			sb.FieldBuilder(2).(*array.Uint64Builder).Append(7)
			sb.FieldBuilder(3).(*array.BooleanBuilder).Append(true)
			fill(sb.FieldBuilder(4).(*array.FixedSizeBinaryBuilder), 32)
			fill(sb.FieldBuilder(5).(*array.FixedSizeBinaryBuilder), 32)
		} else {
			au.AppendNull()
		}
	}
	return bld.NewRecordBatch()
}

// goavroNative converts Arrow value i to goavro's native form for type t:
// the map-based path the baseline measures.
func goavroNative(t *avroType, a arrow.Array, i int) any {
	if inner, ok := t.nullable(); ok {
		if a.IsNull(i) {
			return nil
		}
		return goavro.Union(goavroBranchName(inner), goavroNative(inner, a, i))
	}
	switch x := a.(type) {
	case *array.Uint64:
		return int64(x.Value(i))
	case *array.Uint32:
		return int64(x.Value(i))
	case *array.Int32:
		return x.Value(i)
	case *array.Boolean:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.Binary:
		return x.Value(i)
	case *array.FixedSizeBinary:
		return x.Value(i)
	case *array.Timestamp:
		return int64(x.Value(i))
	case *array.Decimal128:
		return new(big.Rat).SetInt(x.Value(i).BigInt())
	case *array.List:
		s, e := x.ValueOffsets(i)
		out := make([]any, 0, e-s)
		for k := int(s); k < int(e); k++ {
			out = append(out, goavroNative(t.items, x.ListValues(), k))
		}
		return out
	case *array.Struct:
		out := make(map[string]any, len(t.fields))
		for j, f := range t.fields {
			out[f.name] = goavroNative(f.typ, x.Field(j), i)
		}
		return out
	}
	panic(fmt.Sprintf("goavroNative: %T", a))
}

// Go structs for the hamba baseline (Arrow → struct → hamba Encoder).
type hAccess struct {
	Address     [20]byte    `avro:"address"`
	StorageKeys []*[32]byte `avro:"storage_keys"`
}

type hAuth struct {
	ChainID int64    `avro:"chain_id"`
	Address [20]byte `avro:"address"`
	Nonce   int64    `avro:"nonce"`
	YParity bool     `avro:"y_parity"`
	R       [32]byte `avro:"r"`
	S       [32]byte `avro:"s"`
}

type hTx struct {
	BlockNum0   int64       `avro:"_block_num"`
	BlockHash   [32]byte    `avro:"block_hash"`
	BlockNum    int64       `avro:"block_num"`
	Timestamp   int64       `avro:"timestamp"`
	TxIndex     int64       `avro:"tx_index"`
	TxHash      [32]byte    `avro:"tx_hash"`
	To          *[20]byte   `avro:"to"`
	Nonce       int64       `avro:"nonce"`
	GasPrice    *big.Rat    `avro:"gas_price"`
	GasLimit    int64       `avro:"gas_limit"`
	Value       string      `avro:"value"`
	Input       []byte      `avro:"input"`
	R           [32]byte    `avro:"r"`
	S           [32]byte    `avro:"s"`
	VParity     bool        `avro:"v_parity"`
	ChainID     *int64      `avro:"chain_id"`
	GasUsed     int64       `avro:"gas_used"`
	Type        int32       `avro:"type"`
	MaxFee      *big.Rat    `avro:"max_fee_per_gas"`
	MaxPrio     *big.Rat    `avro:"max_priority_fee_per_gas"`
	MaxBlob     *big.Rat    `avro:"max_fee_per_blob_gas"`
	From        [20]byte    `avro:"from"`
	Status      bool        `avro:"status"`
	StateRoot   *[32]byte   `avro:"state_root"`
	AccessList  []*hAccess  `avro:"access_list"`
	BlobHashes  []*[32]byte `avro:"blob_versioned_hashes"`
	AuthList    []*hAuth    `avro:"authorization_list"`
	to          [20]byte
	stateRoot   [32]byte
	chainID     int64
	blobStorage [][32]byte
}

type hSource struct {
	Connector     string  `avro:"connector"`
	Version       string  `avro:"version"`
	Stream        string  `avro:"stream"`
	Network       string  `avro:"network"`
	BlockNum      *int64  `avro:"block_num"`
	BatchID       string  `avro:"batch_id"`
	RangeStart    int64   `avro:"range_start"`
	RangeEnd      int64   `avro:"range_end"`
	RangeHash     string  `avro:"range_hash"`
	RangePrevHash *string `avro:"range_prev_hash"`
	Row           int64   `avro:"row"`
	Snapshot      bool    `avro:"snapshot"`
	Cause         *string `avro:"cause"`
}

type hEnvelope struct {
	Before *hTx    `avro:"before"`
	After  *hTx    `avro:"after"`
	Source hSource `avro:"source"`
	Op     string  `avro:"op"`
	TsMs   int64   `avro:"ts_ms"`
}

func ratOrNil(a *array.Decimal128, i int) *big.Rat {
	if a.IsNull(i) {
		return nil
	}
	return new(big.Rat).SetInt(a.Value(i).BigInt())
}

// fillTx copies row i of rec into tx, reusing tx's storage.
func fillTx(tx *hTx, rec arrow.RecordBatch, i int) {
	c := rec.Columns()
	fsbv := func(j int) []byte { return c[j].(*array.FixedSizeBinary).Value(i) }
	u64 := func(j int) int64 { return int64(c[j].(*array.Uint64).Value(i)) }
	tx.BlockNum0, tx.BlockNum = u64(0), u64(2)
	copy(tx.BlockHash[:], fsbv(1))
	tx.Timestamp = int64(c[3].(*array.Timestamp).Value(i))
	tx.TxIndex = int64(c[4].(*array.Uint32).Value(i))
	copy(tx.TxHash[:], fsbv(5))
	tx.To = nil
	if !c[6].IsNull(i) {
		copy(tx.to[:], fsbv(6))
		tx.To = &tx.to
	}
	tx.Nonce = u64(7)
	tx.GasPrice = ratOrNil(c[8].(*array.Decimal128), i)
	tx.GasLimit = u64(9)
	tx.Value = c[10].(*array.String).Value(i)
	tx.Input = c[11].(*array.Binary).Value(i)
	copy(tx.R[:], fsbv(12))
	copy(tx.S[:], fsbv(13))
	tx.VParity = c[14].(*array.Boolean).Value(i)
	tx.ChainID = nil
	if !c[15].IsNull(i) {
		tx.chainID = u64(15)
		tx.ChainID = &tx.chainID
	}
	tx.GasUsed = u64(16)
	tx.Type = c[17].(*array.Int32).Value(i)
	tx.MaxFee = ratOrNil(c[18].(*array.Decimal128), i)
	tx.MaxPrio = ratOrNil(c[19].(*array.Decimal128), i)
	tx.MaxBlob = ratOrNil(c[20].(*array.Decimal128), i)
	copy(tx.From[:], fsbv(21))
	tx.Status = c[22].(*array.Boolean).Value(i)
	tx.StateRoot = nil
	if !c[23].IsNull(i) {
		copy(tx.stateRoot[:], fsbv(23))
		tx.StateRoot = &tx.stateRoot
	}
	tx.AccessList = tx.AccessList[:0]
	if al := c[24].(*array.List); !al.IsNull(i) {
		st := al.ListValues().(*array.Struct)
		s, e := al.ValueOffsets(i)
		for k := int(s); k < int(e); k++ {
			var a hAccess
			copy(a.Address[:], st.Field(0).(*array.FixedSizeBinary).Value(k))
			kl := st.Field(1).(*array.List)
			ks, ke := kl.ValueOffsets(k)
			a.StorageKeys = []*[32]byte{}
			for m := int(ks); m < int(ke); m++ {
				var h [32]byte
				copy(h[:], kl.ListValues().(*array.FixedSizeBinary).Value(m))
				a.StorageKeys = append(a.StorageKeys, &h)
			}
			tx.AccessList = append(tx.AccessList, &a)
		}
		if tx.AccessList == nil {
			tx.AccessList = []*hAccess{}
		}
	} else {
		tx.AccessList = nil
	}
	tx.BlobHashes = nil
	if bh := c[25].(*array.List); !bh.IsNull(i) {
		s, e := bh.ValueOffsets(i)
		tx.blobStorage = tx.blobStorage[:0]
		for k := int(s); k < int(e); k++ {
			var h [32]byte
			copy(h[:], bh.ListValues().(*array.FixedSizeBinary).Value(k))
			tx.blobStorage = append(tx.blobStorage, h)
		}
		tx.BlobHashes = []*[32]byte{}
		for k := range tx.blobStorage {
			tx.BlobHashes = append(tx.BlobHashes, &tx.blobStorage[k])
		}
	}
	tx.AuthList = nil
	if au := c[26].(*array.List); !au.IsNull(i) {
		st := au.ListValues().(*array.Struct)
		s, e := au.ValueOffsets(i)
		tx.AuthList = []*hAuth{}
		for k := int(s); k < int(e); k++ {
			var a hAuth
			a.ChainID = int64(st.Field(0).(*array.Uint64).Value(k))
			copy(a.Address[:], st.Field(1).(*array.FixedSizeBinary).Value(k))
			a.Nonce = int64(st.Field(2).(*array.Uint64).Value(k))
			a.YParity = st.Field(3).(*array.Boolean).Value(k)
			copy(a.R[:], st.Field(4).(*array.FixedSizeBinary).Value(k))
			copy(a.S[:], st.Field(5).(*array.FixedSizeBinary).Value(k))
			tx.AuthList = append(tx.AuthList, &a)
		}
	}
}

// reportPerRow reports wall-clock rows/s and ns/row, the process CPU time
// per row (cpu-ns/row: on a shared 2-core machine the wall clock includes
// time other processes ran, the CPU time does not) and allocations per row.
func reportPerRow(b *testing.B, rows int, mallocs uint64, cpu0 time.Duration) {
	total := float64(b.N) * float64(rows)
	cpu := cpuTime() - cpu0
	b.ReportMetric(total/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/total, "ns/row")
	b.ReportMetric(float64(cpu.Nanoseconds())/total, "cpu-ns/row")
	b.ReportMetric(total/cpu.Seconds(), "rows/cpu-s")
	b.ReportMetric(float64(mallocs)/total, "allocs/row")
}

// cpuTime is the user+system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkEncode encodes the transactions table (27 columns, 10k-row
// batches) into Confluent-framed Debezium envelopes three ways: the compiled
// hot path, goavro from maps, and hamba from structs. Compare rows/s and
// allocs/row within one run:
//
//	go test -run '^$' -bench Encode -benchmem -cpu 1 ./encode/
func BenchmarkEncode(b *testing.B) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(b, 0)
	rec := transactionsBatch(mem, benchRows, 1)
	defer rec.Release()
	enc, err := NewEncoder(Config{Stream: "eth_txs", Topic: "mainnet.transactions", Version: "bench"}, rec.Schema())
	require.NoError(b, err)
	enc.SetFraming(ConfluentFraming(1), Framing{})
	meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(24_000_001, 24_000_059)}, TsMs: 1_700_000_000_000}
	meta.BatchID = reorg.BatchID(meta.Ranges)
	vt, err := parseSchema(enc.Schemas().Value)
	require.NoError(b, err)
	rowT, _ := vt.fields[1].typ.nullable()

	b.Run("hotpath", func(b *testing.B) {
		var out Batch
		require.NoError(b, enc.Encode(rec, meta, &out)) // warm the arena
		b.ReportAllocs()
		b.SetBytes(int64(out.Size()))
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			out.Reset()
			if err := enc.Encode(rec, meta, &out); err != nil {
				b.Fatal(err)
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	// The bridge's case: each batch's columns and its arena are cold, as
	// after a Flight message arrives and the previous transaction's records
	// went out. Batches and arenas rotate through a ring larger than the
	// CPU's last-level cache (8 distinct 10k-row batches, ~60 MB of Arrow,
	// and as many arenas; 2 in make test's smoke run, whose figures mean
	// nothing).
	b.Run("hotpath-cold", func(b *testing.B) {
		ring := 8
		if testenv.BenchSmoke() {
			ring = 2
		}
		recs := make([]arrow.RecordBatch, ring)
		outs := make([]Batch, ring)
		for k := range recs {
			recs[k] = transactionsBatch(mem, benchRows, uint64(k+2))
			defer recs[k].Release()
			require.NoError(b, enc.Encode(recs[k], meta, &outs[k])) // size the arena
		}
		b.ReportAllocs()
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		k := 0
		for b.Loop() {
			out := &outs[k%ring]
			out.Reset()
			if err := enc.Encode(recs[k%ring], meta, out); err != nil {
				b.Fatal(err)
			}
			k++
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	// The same rows in 1,000-row record batches: the Arrow columns and the
	// arena of one batch stay in the CPU caches.
	b.Run("hotpath-1k", func(b *testing.B) {
		const n = 1000
		parts := make([]arrow.RecordBatch, benchRows/n)
		for k := range parts {
			parts[k] = rec.NewSlice(int64(k*n), int64((k+1)*n))
			defer parts[k].Release()
		}
		var out Batch
		require.NoError(b, enc.Encode(parts[0], meta, &out))
		b.ReportAllocs()
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			for _, p := range parts {
				out.Reset()
				if err := enc.Encode(p, meta, &out); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	// The 15 columns performance.md measured its anchors on (block_num,
	// block_hash, timestamp, tx_index, tx_hash, from, to, nonce, value,
	// gas_price, gas_limit, gas_used, input, type, status).
	var fs []arrow.Field
	var cols []arrow.Array
	for _, i := range []int{2, 1, 3, 4, 5, 21, 6, 7, 10, 8, 9, 16, 11, 17, 22} {
		fs = append(fs, rec.Schema().Field(i))
		cols = append(cols, rec.Column(i))
	}
	sub := array.NewRecordBatch(arrow.NewSchema(fs, nil), cols, rec.NumRows())
	defer sub.Release()
	enc15, err := NewEncoder(Config{Stream: "eth_txs", Topic: "mainnet.transactions", Version: "bench"}, sub.Schema())
	require.NoError(b, err)
	enc15.SetFraming(ConfluentFraming(1), Framing{})
	b.Run("hotpath-15cols", func(b *testing.B) {
		var out Batch
		require.NoError(b, enc15.Encode(sub, meta, &out))
		b.ReportAllocs()
		b.SetBytes(int64(out.Size()))
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			out.Reset()
			if err := enc15.Encode(sub, meta, &out); err != nil {
				b.Fatal(err)
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	// A calibration reference, not a product path: performance.md's
	// hand-written prototype loop over the same 15 columns, row only (no
	// envelope, no null or value checks). Its anchor is 62 ns/row on an idle
	// machine; the ratio hotpath-15cols / this one is what transfers between
	// machines and loads.
	b.Run("reference-handwritten-15cols", func(b *testing.B) {
		c := rec.Columns()
		u64 := func(j int) []uint64 { return c[j].(*array.Uint64).Values() }
		fsbd := func(j int) []byte { return c[j].Data().Buffers()[1].Bytes() }
		bn, bh, ts, ti, th, fr, no := u64(2), fsbd(1), c[3].(*array.Timestamp).Values(), c[4].(*array.Uint32).Values(), fsbd(5), fsbd(21), u64(7)
		to, tod, va, gp := c[6], fsbd(6), c[10].(*array.String), c[8].(*array.Decimal128)
		gl, gu, in, ty, st := u64(9), u64(16), c[11].(*array.Binary), c[17].(*array.Int32).Values(), c[22].(*array.Boolean)
		buf := make([]byte, 0, 16<<20)
		b.ReportAllocs()
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			buf = buf[:0]
			for i := range benchRows {
				buf = append(buf, 0, 0, 0, 0, 1)
				buf = appendLong(buf, int64(bn[i]))
				buf = append(buf, bh[i*32:i*32+32]...)
				buf = appendLong(buf, int64(ts[i]))
				buf = appendLong(buf, int64(ti[i]))
				buf = append(buf, th[i*32:i*32+32]...)
				buf = append(buf, fr[i*20:i*20+20]...)
				if to.IsNull(i) {
					buf = append(buf, 0)
				} else {
					buf = append(buf, 2)
					buf = append(buf, tod[i*20:i*20+20]...)
				}
				buf = appendLong(buf, int64(no[i]))
				buf = appendString(buf, va.Value(i))
				v := gp.Value(i)
				buf = append(buf, 2)
				buf = appendDecimal128(buf, v.HighBits(), v.LowBits())
				buf = appendLong(buf, int64(gl[i]))
				buf = appendLong(buf, int64(gu[i]))
				buf = appendBytes(buf, in.Value(i))
				buf = appendLong(buf, int64(ty[i]))
				buf = append(buf, boolByte(st.Value(i)))
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	codec, err := goavro.NewCodec(enc.Schemas().Value)
	require.NoError(b, err)
	// goavro from maps, over the 27 columns and over the 15 of target (b).
	goavroMaps := func(codec *goavro.Codec, rowT *avroType, rec arrow.RecordBatch, blockNum string) func(b *testing.B) {
		return func(b *testing.B) {
			buf := make([]byte, 0, 1<<20)
			rows := 1000 // a slice keeps one op short; rows/s is per row
			part := rec.NewSlice(0, int64(rows))
			defer part.Release()
			b.ReportAllocs()
			m0, c0 := mallocs(), cpuTime()
			b.ResetTimer()
			for b.Loop() {
				buf = buf[:0]
				for i := range rows {
					after := make(map[string]any, len(rowT.fields))
					for j, f := range rowT.fields {
						after[f.name] = goavroNative(f.typ, part.Column(j), i)
					}
					native := map[string]any{
						"before": nil,
						"after":  goavro.Union(rowT.fullName(), after),
						"source": map[string]any{"connector": Connector, "version": "bench", "stream": "eth_txs", "network": "mainnet",
							"block_num": goavro.Union("long", after[blockNum]), "batch_id": meta.BatchID,
							"range_start": int64(24_000_001), "range_end": int64(24_000_059), "range_hash": "0x", "range_prev_hash": nil,
							"row": int64(i), "snapshot": false, "cause": nil},
						"op": "c", "ts_ms": meta.TsMs,
					}
					buf = append(buf, 0, 0, 0, 0, 1)
					var err error
					if buf, err = codec.BinaryFromNative(buf, native); err != nil {
						b.Fatal(err)
					}
				}
			}
			reportPerRow(b, rows, mallocs()-m0, c0)
		}
	}
	b.Run("goavro-maps", goavroMaps(codec, rowT, rec, "_block_num"))
	codec15, err := goavro.NewCodec(enc15.Schemas().Value)
	require.NoError(b, err)
	vt15, err := parseSchema(enc15.Schemas().Value)
	require.NoError(b, err)
	rowT15, _ := vt15.fields[1].typ.nullable()
	b.Run("goavro-maps-15cols", goavroMaps(codec15, rowT15, sub, "block_num"))

	hs, err := hamba.Parse(enc.Schemas().Value)
	require.NoError(b, err)
	b.Run("hamba-structs", func(b *testing.B) {
		var w bytes.Buffer
		henc := hamba.NewEncoderForSchema(hs, &w)
		var tx hTx
		env := hEnvelope{After: &tx, Op: "c", TsMs: meta.TsMs,
			Source: hSource{Connector: Connector, Version: "bench", Stream: "eth_txs", Network: "mainnet", BatchID: meta.BatchID,
				RangeStart: 24_000_001, RangeEnd: 24_000_059, RangeHash: "0x"}}
		// Sanity: hamba's bytes decode with goavro to the same row.
		fillTx(&tx, rec, 0)
		require.NoError(b, henc.Encode(&env))
		native, _, err := codec.NativeFromBinary(w.Bytes())
		require.NoError(b, err)
		require.Equal(b, expectedRow(rowT, rec, 0), normalize(vt, native).(map[string]any)["after"])
		b.ReportAllocs()
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			w.Reset()
			for i := range benchRows {
				fillTx(&tx, rec, i)
				bn := tx.BlockNum0
				env.Source.BlockNum, env.Source.Row = &bn, int64(i)
				w.Write([]byte{0, 0, 0, 0, 1})
				if err := henc.Encode(&env); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})

	// hamba from a struct with the 15 fields of target (b) only (hamba
	// encodes the fields the schema names).
	hs15, err := hamba.Parse(enc15.Schemas().Value)
	require.NoError(b, err)
	b.Run("hamba-structs-15cols", func(b *testing.B) {
		var w bytes.Buffer
		henc := hamba.NewEncoderForSchema(hs15, &w)
		var tx hTx
		env := hEnvelope{After: &tx, Op: "c", TsMs: meta.TsMs,
			Source: hSource{Connector: Connector, Version: "bench", Stream: "eth_txs", Network: "mainnet", BatchID: meta.BatchID,
				RangeStart: 24_000_001, RangeEnd: 24_000_059, RangeHash: "0x"}}
		fillTx15(&tx, rec, 0)
		require.NoError(b, henc.Encode(&env))
		native, _, err := codec15.NativeFromBinary(w.Bytes())
		require.NoError(b, err)
		require.Equal(b, expectedRow(rowT15, sub, 0), normalize(vt15, native).(map[string]any)["after"])
		b.ReportAllocs()
		m0, c0 := mallocs(), cpuTime()
		b.ResetTimer()
		for b.Loop() {
			w.Reset()
			for i := range benchRows {
				fillTx15(&tx, rec, i)
				bn := tx.BlockNum
				env.Source.BlockNum, env.Source.Row = &bn, int64(i)
				w.Write([]byte{0, 0, 0, 0, 1})
				if err := henc.Encode(&env); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportPerRow(b, benchRows, mallocs()-m0, c0)
	})
}

// fillTx15 sets the 15 fields of target (b) of tx from row i of the
// transactions batch rec (its 27 columns).
func fillTx15(tx *hTx, rec arrow.RecordBatch, i int) {
	c := rec.Columns()
	fsbv := func(j int) []byte { return c[j].(*array.FixedSizeBinary).Value(i) }
	u64 := func(j int) int64 { return int64(c[j].(*array.Uint64).Value(i)) }
	tx.BlockNum = u64(2)
	copy(tx.BlockHash[:], fsbv(1))
	tx.Timestamp = int64(c[3].(*array.Timestamp).Value(i))
	tx.TxIndex = int64(c[4].(*array.Uint32).Value(i))
	copy(tx.TxHash[:], fsbv(5))
	tx.To = nil
	if !c[6].IsNull(i) {
		copy(tx.to[:], fsbv(6))
		tx.To = &tx.to
	}
	tx.Nonce = u64(7)
	tx.GasPrice = ratOrNil(c[8].(*array.Decimal128), i)
	tx.GasLimit = u64(9)
	tx.Value = c[10].(*array.String).Value(i)
	tx.Input = c[11].(*array.Binary).Value(i)
	tx.GasUsed = u64(16)
	tx.Type = c[17].(*array.Int32).Value(i)
	copy(tx.From[:], fsbv(21))
	tx.Status = c[22].(*array.Boolean).Value(i)
}

// BenchmarkRetract turns transactions-table inserts into retractions by
// schema-aware skipping (the reorg path: performance.md target (c)).
func BenchmarkRetract(b *testing.B) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(b, 0)
	rec := transactionsBatch(mem, 1000, 3)
	defer rec.Release()
	enc, err := NewEncoder(Config{Stream: "eth_txs", Version: "bench"}, rec.Schema())
	require.NoError(b, err)
	var out Batch
	require.NoError(b, enc.Encode(rec, BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}}, &out))
	rt := NewRetractor()
	require.NoError(b, rt.Add(enc.ValueFraming(), enc.Schemas().Value))
	dst := make([]byte, 0, 2*out.Size())
	b.ReportAllocs()
	m0, c0 := mallocs(), cpuTime()
	b.ResetTimer()
	for b.Loop() {
		dst = dst[:0]
		for i := range out.Len() {
			if dst, err = rt.Retract(dst, out.Value(i), 1, "reorg"); err != nil {
				b.Fatal(err)
			}
		}
	}
	reportPerRow(b, out.Len(), mallocs()-m0, c0)
}
