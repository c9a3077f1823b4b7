package encode

import (
	"bytes"
	"fmt"
	"math"
	"math/big"
	mrand "math/rand"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// gen builds random Arrow arrays, biased towards edge values: minimum and
// maximum integers, decimals at the edge of their precision, empty and
// multi-byte strings, empty lists and nulls.
type gen struct {
	r        *rand.Rand
	mem      memory.Allocator
	nullRate float64
}

func newGen(seed uint64, mem memory.Allocator) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), mem: mem, nullRate: 0.2}
}

func (g *gen) batch(s *arrow.Schema, n int) arrow.RecordBatch {
	cols := make([]arrow.Array, len(s.Fields()))
	for i, f := range s.Fields() {
		cols[i] = g.array(f.Type, f.Nullable, n)
	}
	rec := array.NewRecordBatch(s, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	return rec
}

func (g *gen) array(dt arrow.DataType, nullable bool, n int) arrow.Array {
	if d, ok := dt.(*arrow.DictionaryType); ok {
		return g.dictionary(d, nullable, n)
	}
	b := array.NewBuilder(g.mem, dt)
	defer b.Release()
	for range n {
		g.appendValue(b, dt, nullable)
	}
	return b.NewArray()
}

func (g *gen) dictionary(d *arrow.DictionaryType, nullable bool, n int) arrow.Array {
	dn := 1 + g.r.IntN(5)
	dict := g.array(d.ValueType, false, dn)
	defer dict.Release()
	ib := array.NewBuilder(g.mem, d.IndexType)
	defer ib.Release()
	for range n {
		if nullable && g.r.Float64() < g.nullRate {
			ib.AppendNull()
			continue
		}
		k := g.r.IntN(dn)
		switch x := ib.(type) {
		case *array.Int8Builder:
			x.Append(int8(k))
		case *array.Int16Builder:
			x.Append(int16(k))
		case *array.Int32Builder:
			x.Append(int32(k))
		case *array.Int64Builder:
			x.Append(int64(k))
		case *array.Uint8Builder:
			x.Append(uint8(k))
		case *array.Uint16Builder:
			x.Append(uint16(k))
		case *array.Uint32Builder:
			x.Append(uint32(k))
		case *array.Uint64Builder:
			x.Append(uint64(k))
		}
	}
	idx := ib.NewArray()
	defer idx.Release()
	return array.NewDictionaryArray(d, idx, dict)
}

func (g *gen) pick(edges ...int64) (int64, bool) {
	if g.r.IntN(4) == 0 {
		return edges[g.r.IntN(len(edges))], true
	}
	return 0, false
}

var sampleStrings = []string{"", "a", "0x1234", "héllo wörld", "日本語テキスト", "emoji 🚀", strings.Repeat("x", 300)}

func (g *gen) bytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.r.IntN(256))
	}
	return b
}

func (g *gen) str() string {
	if g.r.IntN(2) == 0 {
		return sampleStrings[g.r.IntN(len(sampleStrings))]
	}
	return fmt.Sprintf("%d", g.r.Int64())
}

func (g *gen) appendValue(b array.Builder, dt arrow.DataType, nullable bool) {
	if nullable && g.r.Float64() < g.nullRate {
		b.AppendNull()
		return
	}
	r := g.r
	switch x := b.(type) {
	case *array.NullBuilder:
		x.AppendNull()
	case *array.BooleanBuilder:
		x.Append(r.IntN(2) == 1)
	case *array.Int8Builder:
		x.Append(int8(r.Int64()))
	case *array.Int16Builder:
		x.Append(int16(r.Int64()))
	case *array.Int32Builder:
		v, ok := g.pick(math.MinInt32, math.MaxInt32, 0, -1)
		if !ok {
			v = int64(int32(r.Uint32()))
		}
		x.Append(int32(v))
	case *array.Int64Builder:
		v, ok := g.pick(math.MinInt64, math.MaxInt64, 0, -1)
		if !ok {
			v = r.Int64() - r.Int64()
		}
		x.Append(v)
	case *array.Uint8Builder:
		x.Append(uint8(r.Uint32()))
	case *array.Uint16Builder:
		x.Append(uint16(r.Uint32()))
	case *array.Uint32Builder:
		v, ok := g.pick(0, math.MaxUint32)
		if !ok {
			v = int64(r.Uint32())
		}
		x.Append(uint32(v))
	case *array.Uint64Builder:
		v, ok := g.pick(0, math.MaxInt64, 1)
		if !ok {
			v = r.Int64N(math.MaxInt64)
		}
		x.Append(uint64(v))
	case *array.Float32Builder:
		x.Append(float32(r.NormFloat64() * 1e6))
	case *array.Float64Builder:
		x.Append([]float64{0, -0.5, math.MaxFloat64, math.SmallestNonzeroFloat64, r.NormFloat64() * 1e12}[r.IntN(5)])
	case *array.StringBuilder:
		x.Append(g.str())
	case *array.LargeStringBuilder:
		x.Append(g.str())
	case *array.StringViewBuilder:
		x.Append(g.str())
	case *array.BinaryBuilder:
		x.Append(g.bytes(r.IntN(40)))
	case *array.BinaryViewBuilder:
		x.Append(g.bytes(r.IntN(40)))
	case *array.FixedSizeBinaryBuilder:
		x.Append(g.bytes(dt.(*arrow.FixedSizeBinaryType).ByteWidth))
	case *array.Decimal128Builder:
		p := dt.(*arrow.Decimal128Type).Precision
		mx := decimal128.GetMaxValue(p)
		switch r.IntN(5) {
		case 0:
			x.Append(mx)
		case 1:
			x.Append(mx.Negate())
		case 2:
			x.Append(decimal128.FromI64(0))
		default:
			v := decimal128.FromBigInt(new(big.Int).Rand(mrand.New(randSource{r}), mx.BigInt()))
			if r.IntN(2) == 0 {
				v = v.Negate()
			}
			x.Append(v)
		}
	case *array.Decimal256Builder:
		p := dt.(*arrow.Decimal256Type).Precision
		mx := decimal256.GetMaxValue(p)
		switch r.IntN(5) {
		case 0:
			x.Append(mx)
		case 1:
			x.Append(mx.Negate())
		case 2:
			x.Append(decimal256.FromI64(-1))
		default:
			v := decimal256.FromBigInt(new(big.Int).Rand(mrand.New(randSource{r}), mx.BigInt()))
			if r.IntN(2) == 0 {
				v = v.Negate()
			}
			x.Append(v)
		}
	case *array.TimestampBuilder:
		unit := dt.(*arrow.TimestampType).Unit
		v := r.Int64N(4_000_000_000) - 1_000_000_000 // seconds
		switch unit {
		case arrow.Second:
			// v is already in seconds.
		case arrow.Millisecond:
			v = v*1000 + r.Int64N(1000)
		case arrow.Microsecond:
			v = v*1_000_000 + r.Int64N(1_000_000)
		case arrow.Nanosecond:
			if e, ok := g.pick(math.MinInt64, math.MaxInt64); ok {
				v = e
			} else {
				v = v*1_000_000_000 + r.Int64N(1_000_000_000)
			}
		}
		x.Append(arrow.Timestamp(v))
	case *array.Date32Builder:
		v, ok := g.pick(0, -719162, 2932896)
		if !ok {
			v = r.Int64N(100_000) - 50_000
		}
		x.Append(arrow.Date32(v))
	case *array.Date64Builder:
		x.Append(arrow.Date64((r.Int64N(100_000) - 50_000) * 86_400_000))
	case *array.Time32Builder:
		x.Append(arrow.Time32(r.Int64N(86_400_000)))
	case *array.Time64Builder:
		x.Append(arrow.Time64(r.Int64N(86_400_000_000)))
	case *array.MapBuilder:
		m := dt.(*arrow.MapType)
		n := r.IntN(4)
		x.Append(true)
		for k := range n {
			x.KeyBuilder().(*array.StringBuilder).Append(fmt.Sprintf("k%d", k))
			g.appendValue(x.ItemBuilder(), m.ItemType(), m.ItemField().Nullable)
		}
	case *array.ListBuilder:
		g.appendList(x, x.ValueBuilder(), dt.(*arrow.ListType).ElemField())
	case *array.LargeListBuilder:
		g.appendList(x, x.ValueBuilder(), dt.(*arrow.LargeListType).ElemField())
	case *array.FixedSizeListBuilder:
		lt := dt.(*arrow.FixedSizeListType)
		x.Append(true)
		for range lt.Len() {
			g.appendValue(x.ValueBuilder(), lt.Elem(), lt.ElemField().Nullable)
		}
	case *array.StructBuilder:
		st := dt.(*arrow.StructType)
		x.Append(true)
		for j, f := range st.Fields() {
			g.appendValue(x.FieldBuilder(j), f.Type, f.Nullable)
		}
	default:
		panic(fmt.Sprintf("gen: no generator for %T (%s)", b, dt))
	}
}

func (g *gen) appendList(lb interface{ Append(bool) }, vb array.Builder, elem arrow.Field) {
	lb.Append(true)
	n := []int{0, 1, 2, 5}[g.r.IntN(4)]
	for range n {
		g.appendValue(vb, elem.Type, elem.Nullable)
	}
}

type randSource struct{ r *rand.Rand }

func (s randSource) Int63() int64   { return s.r.Int64() }
func (s randSource) Seed(int64)     {}
func (s randSource) Uint64() uint64 { return s.r.Uint64() }

// --- expected values --------------------------------------------------

// expected converts value i of a (an Arrow array) to the normal form that
// normalize produces from a goavro-decoded datum of type t.
func expected(t *avroType, a arrow.Array, i int) any {
	if t.kind == kNull {
		return nil
	}
	if inner, ok := t.nullable(); ok {
		if a.IsNull(i) {
			return nil
		}
		if d, ok := a.(*array.Dictionary); ok && d.Dictionary().IsNull(d.GetValueIndex(i)) {
			return nil
		}
		t = inner
	}
	if d, ok := a.(*array.Dictionary); ok {
		return expected(t, d.Dictionary(), d.GetValueIndex(i))
	}
	switch x := a.(type) {
	case *array.Boolean:
		return x.Value(i)
	case *array.Int8:
		return int64(x.Value(i))
	case *array.Int16:
		return int64(x.Value(i))
	case *array.Int32:
		return int64(x.Value(i))
	case *array.Int64:
		return x.Value(i)
	case *array.Uint8:
		return int64(x.Value(i))
	case *array.Uint16:
		return int64(x.Value(i))
	case *array.Uint32:
		return int64(x.Value(i))
	case *array.Uint64:
		return int64(x.Value(i))
	case *array.Float32:
		return x.Value(i)
	case *array.Float64:
		return x.Value(i)
	case *array.String:
		return x.Value(i)
	case *array.LargeString:
		return x.Value(i)
	case *array.StringView:
		return x.Value(i)
	case *array.Binary:
		return bytes.Clone(x.Value(i))
	case *array.LargeBinary:
		return bytes.Clone(x.Value(i))
	case *array.BinaryView:
		return bytes.Clone(x.Value(i))
	case *array.FixedSizeBinary:
		if t.kind == kString {
			return fmt.Sprintf("0x%x", x.Value(i))
		}
		return bytes.Clone(x.Value(i))
	case *array.Decimal128:
		return x.Value(i).BigInt().String()
	case *array.Decimal256:
		return x.Value(i).BigInt().String()
	case *array.Timestamp:
		v := int64(x.Value(i))
		if x.DataType().(*arrow.TimestampType).Unit == arrow.Second {
			v *= 1000
		}
		return v
	case *array.Date32:
		return int64(x.Value(i))
	case *array.Date64:
		return int64(x.Value(i)) / 86_400_000
	case *array.Time32:
		return int64(x.Value(i))
	case *array.Time64:
		return int64(x.Value(i))
	case *array.Map:
		s, e := x.ValueOffsets(i)
		out := map[string]any{}
		keys := x.Keys().(*array.String)
		for k := int(s); k < int(e); k++ {
			out[keys.Value(k)] = expected(t.values, x.Items(), k)
		}
		return out
	case array.ListLike:
		s, e := x.ValueOffsets(i)
		out := []any{}
		for k := int(s); k < int(e); k++ {
			out = append(out, expected(t.items, x.ListValues(), k))
		}
		return out
	case *array.Struct:
		out := map[string]any{}
		for j, f := range t.fields {
			out[f.name] = expected(f.typ, x.Field(j), i)
		}
		return out
	}
	panic(fmt.Sprintf("expected: unhandled %T", a))
}

// normalize maps a goavro native datum of type t to the normal form: unions
// unwrapped, ints as int64, logical types as their underlying integers,
// decimals as the decimal string of the unscaled integer.
func normalize(t *avroType, v any) any {
	switch t.kind {
	case kNull:
		return nil
	case kUnion:
		if v == nil {
			return nil
		}
		m := v.(map[string]any)
		for name, val := range m {
			for _, br := range t.branches {
				if goavroBranchName(br) == name {
					return normalize(br, val)
				}
			}
			panic(fmt.Sprintf("normalize: union branch %q not in %s", name, t.marshal()))
		}
	case kInt:
		switch x := v.(type) {
		case int32:
			return int64(x)
		case time.Time:
			return x.Unix() / 86400
		case time.Duration:
			return int64(x / time.Millisecond)
		}
	case kLong:
		switch x := v.(type) {
		case int64:
			return x
		case time.Time:
			if t.logical == "timestamp-millis" {
				return x.UnixMilli()
			}
			return x.UnixMicro()
		case time.Duration:
			return int64(x / time.Microsecond)
		}
	case kBytes:
		if r, ok := v.(*big.Rat); ok {
			scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.scale)), nil)
			n := new(big.Rat).Mul(r, new(big.Rat).SetInt(scale))
			if !n.IsInt() {
				panic("normalize: decimal is not an integer after scaling")
			}
			return n.Num().String()
		}
		return v
	case kArray:
		out := []any{}
		for _, it := range v.([]any) {
			out = append(out, normalize(t.items, it))
		}
		return out
	case kMap:
		out := map[string]any{}
		for k, it := range v.(map[string]any) {
			out[k] = normalize(t.values, it)
		}
		return out
	case kRecord:
		m := v.(map[string]any)
		out := map[string]any{}
		for _, f := range t.fields {
			out[f.name] = normalize(f.typ, m[f.name])
		}
		return out
	case kBoolean, kFloat, kDouble, kString, kEnum, kFixed:
		// Already in normal form.
	}
	return v
}

// goavroBranchName is the key goavro uses for a union branch.
func goavroBranchName(t *avroType) string {
	if t.kind.named() {
		return t.fullName()
	}
	switch t.logical {
	case "timestamp-millis", "timestamp-micros", "time-millis", "time-micros", "date", "decimal":
		return t.kind.String() + "." + t.logical
	}
	return t.kind.String()
}

// expectedRow is the normal form of row i of rec as the row record t.
func expectedRow(t *avroType, rec arrow.RecordBatch, i int) map[string]any {
	out := map[string]any{}
	for j := range int(rec.NumCols()) {
		f := t.fields[j]
		out[f.name] = expected(f.typ, rec.Column(j), i)
	}
	return out
}

// decodeAll decodes every value of out with goavro (after checking and
// stripping the framing) and returns the normal forms.
func decodeAll(t testing.TB, enc *Encoder, out *Batch) []map[string]any {
	t.Helper()
	codec, err := goavro.NewCodec(enc.Schemas().Value)
	require.NoError(t, err)
	vt, err := parseSchema(enc.Schemas().Value)
	require.NoError(t, err)
	res := make([]map[string]any, out.Len())
	for i := range out.Len() {
		f, body, err := ParseHeader(out.Value(i))
		require.NoError(t, err)
		require.Equal(t, enc.ValueFraming(), f)
		native, rest, err := codec.NativeFromBinary(body)
		require.NoError(t, err, "record %d", i)
		require.Empty(t, rest, "record %d has trailing bytes", i)
		res[i] = normalize(vt, native).(map[string]any)
	}
	return res
}

func testRange(start, end uint64) reorg.BlockRange {
	var h, p reorg.Hash
	h[0], h[31] = byte(end), 0xaa
	p[0], p[31] = byte(start-1), 0xbb
	return reorg.BlockRange{Network: "mainnet", Start: start, End: end, Hash: h, PrevHash: p, HasPrevHash: true}
}

func decimal128FromI64(v int64) decimal128.Num { return decimal128.FromI64(v) }
