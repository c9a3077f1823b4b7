package labels

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// benchRows is one Arrow batch as Amp sends it (about 10k rows).
const benchRows = 10_000

// contracts is the simulator's pool of log addresses (ampsim: 300).
func contracts() [][]byte {
	out := make([][]byte, 300)
	for k := range out {
		sum := sha256.Sum256([]byte(fmt.Sprint("contract", k)))
		out[k] = sum[:20]
	}
	return out
}

// logsBatch is a batch of the logs table's shape: addresses from the pool,
// 32-byte hashes and topics, 0–128 bytes of data.
func logsBatch(mem memory.Allocator, n int) arrow.RecordBatch {
	hash := &arrow.FixedSizeBinaryType{ByteWidth: 32}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_block_num", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "block_hash", Type: hash},
		{Name: "tx_hash", Type: hash},
		{Name: "log_index", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "address", Type: &arrow.FixedSizeBinaryType{ByteWidth: 20}},
		{Name: "topic0", Type: hash, Nullable: true},
		{Name: "topic1", Type: hash, Nullable: true},
		{Name: "data", Type: arrow.BinaryTypes.Binary},
	}, nil)
	r := rand.New(rand.NewPCG(1, 2))
	pool := contracts()
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	rnd := func(w int) []byte {
		v := make([]byte, w)
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		return v
	}
	for i := range n {
		b.Field(0).(*array.Uint64Builder).Append(uint64(24_000_000 + i/200))
		b.Field(1).(*array.FixedSizeBinaryBuilder).Append(rnd(32))
		b.Field(2).(*array.FixedSizeBinaryBuilder).Append(rnd(32))
		b.Field(3).(*array.Uint32Builder).Append(uint32(i % 200))
		b.Field(4).(*array.FixedSizeBinaryBuilder).Append(pool[r.IntN(len(pool))])
		b.Field(5).(*array.FixedSizeBinaryBuilder).Append(rnd(32))
		if r.IntN(3) == 0 {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.FixedSizeBinaryBuilder).Append(rnd(32))
		}
		b.Field(7).(*array.BinaryBuilder).Append(rnd(32 * r.IntN(5)))
	}
	return b.NewRecordBatch()
}

// tokenCSV labels the first half of the pool: about half the rows match.
func tokenCSV(tb testing.TB) string {
	var sb strings.Builder
	sb.WriteString("address,symbol,decimals\n")
	for k, a := range contracts()[:150] {
		fmt.Fprintf(&sb, "0x%s,TOK%d,%d\n", hex.EncodeToString(a), k, k%19)
	}
	p := filepath.Join(tb.TempDir(), "tokens.csv")
	require.NoError(tb, os.WriteFile(p, []byte(sb.String()), 0o600))
	return p
}

func benchEncoder(b *testing.B, s *arrow.Schema) *encode.Encoder {
	enc, err := encode.NewEncoder(encode.Config{Stream: "bench", Topic: "bench", Version: "bench"}, s)
	require.NoError(b, err)
	f, err := encode.SingleObjectFraming(enc.Schemas().Value)
	require.NoError(b, err)
	enc.SetFraming(f, encode.Framing{})
	return enc
}

// BenchmarkLabels compares the encoding of a logs batch without labels
// (the unlabelled path), the join alone, and join plus encoding, for an
// inner and a left join of a token CSV that labels about half the rows.
// The ratio the README gives is encode+join over encode, per input row.
func BenchmarkLabels(b *testing.B) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(b, 0)
	rec := logsBatch(mem, benchRows)
	defer rec.Release()
	meta := encode.BatchMeta{Op: encode.OpCreate, BatchID: "0123456789abcdef", Ranges: []reorg.BlockRange{{Network: "eth", Start: 1, End: 2}}}
	b.Run("unlabelled/encode", func(b *testing.B) {
		enc := benchEncoder(b, rec.Schema())
		var out encode.Batch
		b.ReportAllocs()
		for b.Loop() {
			out.Reset()
			if err := enc.Encode(rec, meta, &out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
	})
	csv := tokenCSV(b)
	for _, join := range []Join{Inner, Left} {
		set, err := Load([]Config{{File: csv, Key: "address", Join: join, Types: map[string]Type{"decimals": Int64}}})
		require.NoError(b, err)
		j, err := set.Bind(rec.Schema(), WithAllocator(mem))
		require.NoError(b, err)
		b.Run(string(join)+"/join", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, _, err := j.Join(rec)
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
		b.Run(string(join)+"/join+encode", func(b *testing.B) {
			enc := benchEncoder(b, j.Schema())
			var out encode.Batch
			b.ReportAllocs()
			for b.Loop() {
				joined, _, err := j.Join(rec)
				if err != nil {
					b.Fatal(err)
				}
				out.Reset()
				err = enc.Encode(joined, meta, &out)
				joined.Release()
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchRows), "ns/row")
		})
	}
}
