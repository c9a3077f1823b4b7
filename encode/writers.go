package encode

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/decimal256"
)

// writer appends the Avro binary encoding of one Arrow value. bind is called
// once per record batch with the column (or child) array and caches raw
// buffers; write is called per value and must not allocate.
type writer interface {
	bind(a arrow.Array) error
	write(b []byte, i int) []byte
}

// encState records the first value error of a batch; writers report into it
// instead of returning errors so the per-value call stays cheap.
type encState struct {
	err   *ValueError
	row   int
	noOps bool // tests: always use the general writers, never the inline ops
}

func (s *encState) fail(col, value, reason string) {
	if s.err == nil {
		if len(value) > 80 {
			value = value[:80] + "…"
		}
		s.err = &ValueError{Column: col, Row: s.row, Value: value, Reason: reason}
	}
}

// valid handles the validity bitmap and the ["null", T] union branch.
type valid struct {
	bits     []byte
	off      int
	nullable bool
	col      string
	st       *encState
}

func (v *valid) bindValidity(a arrow.Array) {
	d := a.Data()
	v.off = d.Offset()
	v.bits = nil
	if a.NullN() > 0 && len(d.Buffers()) > 0 && d.Buffers()[0] != nil {
		v.bits = d.Buffers()[0].Bytes()
	}
}

func (v *valid) isNull(i int) bool {
	j := v.off + i
	return v.bits != nil && v.bits[j>>3]&(1<<(j&7)) == 0
}

// null writes the union's null branch, or records an error when the field
// is not nullable.
func (v *valid) null(b []byte) []byte {
	if v.nullable {
		return append(b, 0)
	}
	v.st.fail(v.col, "null", "the Arrow field is declared non-nullable but holds a null; fix the producer or make the column nullable")
	return b
}

// headSlow writes the union branch of value i and reports whether the value
// itself must follow. Writers call it only for nullable columns or columns
// with nulls, so a plain non-null column costs one branch.
func (v *valid) headSlow(b []byte, i int) ([]byte, bool) {
	if v.isNull(i) {
		if v.nullable {
			return append(b, 0), false
		}
		v.st.fail(v.col, "null", "the Arrow field is declared non-nullable but holds a null; fix the producer or make the column nullable")
		return b, false
	}
	if v.nullable {
		b = append(b, 2)
	}
	return b, true
}

func appendLong(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	if u < 0x80 {
		return append(b, byte(u))
	}
	return appendVarint(b, u)
}

// appendVarint writes u (at least 0x80) as a varint: values of up to four
// bytes (block numbers, gas, indexes) with putVarint4, longer ones with
// putVarintWide.
func appendVarint(b []byte, u uint64) []byte {
	p := len(b)
	if cap(b)-p < 10 {
		b = growSlow(b, 10)
	}
	d := (*[10]byte)(b[p : p+10])
	if u < 1<<28 {
		return b[:p+putVarint4(d, u)]
	}
	return b[:p+putVarintWide(d, u)]
}

// putVarintWide writes u (at least 0x80) as a varint without branches per
// byte: the low 56 bits are spread into eight 7-bit groups and stored at
// once with the continuation bits of all but the last significant group;
// the ninth and tenth bytes are written only for values that need them. It
// returns the number of significant bytes.
func putVarintWide(d *[10]byte, u uint64) int {
	n := (bits.Len64(u) + 6) / 7 // 2..10
	x := u&0x7f | (u<<1)&0x7f00 | (u<<2)&0x7f0000 | (u<<3)&0x7f000000 |
		(u<<4)&0x7f00000000 | (u<<5)&0x7f0000000000 | (u<<6)&0x7f000000000000 | (u<<7)&0x7f00000000000000
	if n <= 8 {
		x |= 0x8080808080808080 >> (64 - 8*(n-1))
		binary.LittleEndian.PutUint64(d[:8], x)
		return n
	}
	binary.LittleEndian.PutUint64(d[:8], x|0x8080808080808080)
	hi := u >> 56
	d[8] = byte(hi)
	if n == 10 {
		d[8] |= 0x80
		d[9] = byte(hi >> 7)
	}
	return n
}

// growSlow returns b with room for n more bytes. It is kept out of line so
// that the writers' hot paths stay small (no spills for the rare growth).
//
//go:noinline
func growSlow(b []byte, n int) []byte { return slices.Grow(b, n) }

func appendBytes(b, v []byte) []byte {
	b = appendLong(b, int64(len(v)))
	return append(b, v...)
}

func appendString(b []byte, v string) []byte {
	b = appendLong(b, int64(len(v)))
	return append(b, v...)
}

func buf(a arrow.Array, i int) []byte {
	bs := a.Data().Buffers()
	if i >= len(bs) || bs[i] == nil {
		return nil
	}
	return bs[i].Bytes()
}

// --- integers ---------------------------------------------------------

type smallInt interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32
}

type intWriter[T smallInt] struct {
	valid
	vals []T
}

func (w *intWriter[T]) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[T](buf(a, 1))
	return nil
}

func (w *intWriter[T]) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	return appendLong(b, int64(w.vals[w.off+i]))
}

type uint64Writer struct {
	valid
	vals []uint64
}

func (w *uint64Writer) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[uint64](buf(a, 1))
	return nil
}

func (w *uint64Writer) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	v := w.vals[w.off+i]
	if v > math.MaxInt64 {
		w.st.fail(w.col, strconv.FormatUint(v, 10), "UInt64 above 2^63-1 does not fit an Avro long; CAST it to a string or DECIMAL in the query")
		return b
	}
	return appendLong(b, int64(v))
}

// scaledWriter writes int64 values multiplied by mul (timestamps in seconds
// become milliseconds) or divided by div (Date64 milliseconds become days).
type scaledWriter struct {
	valid
	vals []int64
	mul  int64
	div  int64
	what string
}

func (w *scaledWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[int64](buf(a, 1))
	return nil
}

func (w *scaledWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	v := w.vals[w.off+i]
	switch {
	case w.div > 1:
		if v%w.div != 0 {
			w.st.fail(w.col, strconv.FormatInt(v, 10), w.what+" is not a whole number of days; CAST it to a timestamp in the query")
			return b
		}
		v /= w.div
	case w.mul > 1:
		if v > math.MaxInt64/w.mul || v < math.MinInt64/w.mul {
			w.st.fail(w.col, strconv.FormatInt(v, 10), w.what+" overflows a long when converted to milliseconds")
			return b
		}
		v *= w.mul
	}
	return appendLong(b, v)
}

// --- boolean, floats, null ---------------------------------------------

type boolWriter struct {
	valid
	data []byte
}

func (w *boolWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.data = buf(a, 1)
	return nil
}

func (w *boolWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	j := w.off + i
	return append(b, (w.data[j>>3]>>(j&7))&1)
}

type float32Writer struct {
	valid
	vals []float32
}

func (w *float32Writer) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[float32](buf(a, 1))
	return nil
}

func (w *float32Writer) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(w.vals[w.off+i]))
}

type float64Writer struct {
	valid
	vals []float64
}

func (w *float64Writer) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[float64](buf(a, 1))
	return nil
}

func (w *float64Writer) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(w.vals[w.off+i]))
}

type nullWriter struct{}

func (nullWriter) bind(arrow.Array) error       { return nil }
func (nullWriter) write(b []byte, _ int) []byte { return b }

// --- strings and binaries ----------------------------------------------

type binWriter[O int32 | int64] struct {
	valid
	offs []O
	data []byte
	utf8 bool
}

func (w *binWriter[O]) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.offs = arrow.GetData[O](buf(a, 1))
	w.data = buf(a, 2)
	return nil
}

func (w *binWriter[O]) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	j := w.off + i
	v := w.data[w.offs[j]:w.offs[j+1]]
	if w.utf8 && !utf8.Valid(v) {
		w.st.fail(w.col, strconv.Quote(string(v)), "invalid UTF-8 in a string column; CAST it to binary in the query")
		return b
	}
	return appendBytes(b, v)
}

type viewWriter struct {
	valid
	utf8 bool
	sv   *array.StringView
	bv   *array.BinaryView
}

func (w *viewWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.sv, w.bv = nil, nil
	switch x := a.(type) {
	case *array.StringView:
		w.sv = x
	case *array.BinaryView:
		w.bv = x
	default:
		return fmt.Errorf("%w: column %q: expected a view array, got %T", ErrUnsupportedType, w.col, a)
	}
	return nil
}

func (w *viewWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	if w.sv != nil {
		v := w.sv.Value(i)
		if !utf8.ValidString(v) {
			w.st.fail(w.col, strconv.Quote(v), "invalid UTF-8 in a string column; CAST it to binary in the query")
			return b
		}
		return appendString(b, v)
	}
	return appendBytes(b, w.bv.Value(i))
}

type fixedWriter struct {
	valid
	data  []byte
	width int
	as    FixedAs // fixed, a "0x…" string, or bytes (the length, then the value)
}

func (w *fixedWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.data = buf(a, 1)
	return nil
}

func (w *fixedWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	s := (w.off + i) * w.width
	v := w.data[s : s+w.width]
	switch w.as {
	case FixedAsHex:
		return appendHex(b, v)
	case FixedAsBytes:
		return appendBytes(b, v)
	case FixedAsFixed:
	}
	// Hashes and addresses are copied as machine words: four or three loads
	// and stores instead of a memmove call.
	n := len(b)
	switch w.width {
	case 32:
		if cap(b)-n < 32 {
			b = growSlow(b, 32)
		}
		b = b[:n+32]
		d := b[n : n+32 : n+32]
		le := binary.LittleEndian
		le.PutUint64(d[0:], le.Uint64(v[0:]))
		le.PutUint64(d[8:], le.Uint64(v[8:]))
		le.PutUint64(d[16:], le.Uint64(v[16:]))
		le.PutUint64(d[24:], le.Uint64(v[24:]))
		return b
	case 20:
		if cap(b)-n < 20 {
			b = growSlow(b, 20)
		}
		b = b[:n+20]
		d := b[n : n+20 : n+20]
		le := binary.LittleEndian
		le.PutUint64(d[0:], le.Uint64(v[0:]))
		le.PutUint64(d[8:], le.Uint64(v[8:]))
		le.PutUint32(d[16:], le.Uint32(v[16:]))
		return b
	}
	return append(b, v...)
}

func appendHex(b, v []byte) []byte {
	b = appendLong(b, int64(2+2*len(v)))
	b = append(b, '0', 'x')
	n := len(b)
	if cap(b)-n < 2*len(v) {
		b = growSlow(b, 2*len(v))
	}
	b = b[:n+2*len(v)]
	hex.Encode(b[n:], v)
	return b
}

// --- decimals ----------------------------------------------------------

// appendTwosComplement writes the minimal big-endian two's-complement form of
// the big-endian value be (as Java's BigInteger.toByteArray and goavro do):
// leading 0x00 bytes followed by a byte with the top bit clear, and leading
// 0xFF bytes followed by a byte with the top bit set, are dropped; at least
// one byte remains.
func appendTwosComplement(b []byte, be []byte) []byte {
	k := 0
	for k < len(be)-1 {
		if (be[k] == 0 && be[k+1]&0x80 == 0) || (be[k] == 0xff && be[k+1]&0x80 != 0) {
			k++
			continue
		}
		break
	}
	return appendBytes(b, be[k:])
}

// appendDecimal128 writes the 128-bit two's-complement value hi:lo in its
// minimal big-endian form (the result of appendTwosComplement, computed from
// the bit length instead of byte by byte). It reserves 17 bytes and stores
// whole words, shifted so that the value's first byte lands first; the bytes
// written past the value are beyond len and are overwritten later.
func appendDecimal128(b []byte, hi int64, lo uint64) []byte {
	uh, ul := uint64(hi), lo
	if hi < 0 {
		uh, ul = ^uh, ^ul
	}
	var bitLen int
	if uh != 0 {
		bitLen = 128 - bits.LeadingZeros64(uh)
	} else {
		bitLen = 64 - bits.LeadingZeros64(ul)
	}
	n := bitLen/8 + 1 // 1..16 bytes
	p := len(b)
	if cap(b)-p < 17 {
		b = growSlow(b, 17)
	}
	d := b[p : p+17 : p+17]
	d[0] = byte(2 * n)
	be := binary.BigEndian
	if n <= 8 {
		be.PutUint64(d[1:9], lo<<(64-8*uint(n)))
	} else {
		h := uint(n - 8) // bytes of hi, 1..8
		be.PutUint64(d[1:9], uint64(hi)<<(64-8*h))
		be.PutUint64(d[1+h:9+h], lo)
	}
	return b[:p+1+n]
}

type dec128Writer struct {
	valid
	vals     []decimal128.Num
	max, min decimal128.Num
	prec     int32
	scale    int32
	// maxHi:maxLo and minHi:minLo are max and min as 128-bit integers,
	// compared inline.
	maxHi, minHi int64
	maxLo, minLo uint64
}

func (w *dec128Writer) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[decimal128.Num](buf(a, 1))
	return nil
}

func (w *dec128Writer) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	v := w.vals[w.off+i]
	hi, lo := v.HighBits(), v.LowBits()
	if hi > w.maxHi || (hi == w.maxHi && lo > w.maxLo) || hi < w.minHi || (hi == w.minHi && lo < w.minLo) {
		w.st.fail(w.col, v.ToString(w.scale), fmt.Sprintf("has more digits than the declared precision %d", w.prec))
		return b
	}
	return appendDecimal128(b, hi, lo)
}

type dec256Writer struct {
	valid
	vals     []decimal256.Num
	max, min decimal256.Num
	prec     int32
	scale    int32
}

func (w *dec256Writer) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.vals = arrow.GetData[decimal256.Num](buf(a, 1))
	return nil
}

func (w *dec256Writer) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	v := w.vals[w.off+i]
	if v.Greater(w.max) || v.Less(w.min) {
		w.st.fail(w.col, v.ToString(w.scale), fmt.Sprintf("has more digits than the declared precision %d", w.prec))
		return b
	}
	arr := v.Array()
	var be [32]byte
	binary.BigEndian.PutUint64(be[0:], arr[3])
	binary.BigEndian.PutUint64(be[8:], arr[2])
	binary.BigEndian.PutUint64(be[16:], arr[1])
	binary.BigEndian.PutUint64(be[24:], arr[0])
	return appendTwosComplement(b, be[:])
}

// --- nested ------------------------------------------------------------

type listWriter[O int32 | int64] struct {
	valid
	offs  []O
	child writer
	ops   []op // the child's op for the bound batch (one)
}

func (w *listWriter[O]) bind(a arrow.Array) error {
	w.bindValidity(a)
	w.offs = arrow.GetData[O](buf(a, 1))
	var values arrow.Array
	switch x := a.(type) {
	case *array.List:
		values = x.ListValues()
	case *array.LargeList:
		values = x.ListValues()
	case *array.Map:
		values = x.ListValues()
	default:
		return fmt.Errorf("%w: column %q: expected a list array, got %T", ErrUnsupportedType, w.col, a)
	}
	if err := w.child.bind(values); err != nil {
		return err
	}
	w.ops = append(w.ops[:0], w.childOp(w.child))
	return nil
}

func (w *listWriter[O]) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	j := w.off + i
	s, e := int(w.offs[j]), int(w.offs[j+1])
	if e > s {
		b = appendLong(b, int64(e-s))
		for k := s; k < e; k++ {
			b = writeOps(b, w.ops, k)
		}
	}
	return append(b, 0)
}

type fixedListWriter struct {
	valid
	size  int
	child writer
	ops   []op // the child's op for the bound batch (one)
}

func (w *fixedListWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	x, ok := a.(*array.FixedSizeList)
	if !ok {
		return fmt.Errorf("%w: column %q: expected a fixed-size list array, got %T", ErrUnsupportedType, w.col, a)
	}
	if err := w.child.bind(x.ListValues()); err != nil {
		return err
	}
	w.ops = append(w.ops[:0], w.childOp(w.child))
	return nil
}

func (w *fixedListWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	if w.size > 0 {
		b = appendLong(b, int64(w.size))
		s := (w.off + i) * w.size
		for k := s; k < s+w.size; k++ {
			b = writeOps(b, w.ops, k)
		}
	}
	return append(b, 0)
}

// mapWriter writes an Arrow map (a list of key/value structs) as an Avro map.
type mapWriter struct {
	valid
	offs []int32
	key  writer
	item writer
}

func (w *mapWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	m, ok := a.(*array.Map)
	if !ok {
		return fmt.Errorf("%w: column %q: expected a map array, got %T", ErrUnsupportedType, w.col, a)
	}
	w.offs = arrow.GetData[int32](buf(a, 1))
	if err := w.key.bind(m.Keys()); err != nil {
		return err
	}
	return w.item.bind(m.Items())
}

func (w *mapWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	j := w.off + i
	s, e := int(w.offs[j]), int(w.offs[j+1])
	if e > s {
		b = appendLong(b, int64(e-s))
		for k := s; k < e; k++ {
			b = w.key.write(b, k)
			b = w.item.write(b, k)
		}
	}
	return append(b, 0)
}

type structWriter struct {
	valid
	children []writer
	ops      []op // the children's ops for the bound batch
}

func (w *structWriter) bind(a arrow.Array) error {
	w.bindValidity(a)
	s, ok := a.(*array.Struct)
	if !ok {
		return fmt.Errorf("%w: column %q: expected a struct array, got %T", ErrUnsupportedType, w.col, a)
	}
	for j, c := range w.children {
		if err := c.bind(s.Field(j)); err != nil {
			return err
		}
	}
	w.ops = w.ops[:0]
	for _, c := range w.children {
		w.ops = append(w.ops, w.childOp(c))
	}
	return nil
}

func (w *structWriter) write(b []byte, i int) []byte {
	if w.bits != nil || w.nullable {
		if w.isNull(i) {
			return w.null(b)
		}
		if w.nullable {
			b = append(b, 2)
		}
	}
	return writeOps(b, w.ops, i)
}

type dictIndex interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// dictWriter writes the dictionary value an index points to. The inner
// writer is compiled non-nullable; a null index or a null dictionary value
// becomes the union's null branch.
type dictWriter[T dictIndex] struct {
	valid
	idx   []T
	inner writer
	dict  valid
}

func (w *dictWriter[T]) bind(a arrow.Array) error {
	d, ok := a.(*array.Dictionary)
	if !ok {
		return fmt.Errorf("%w: column %q: expected a dictionary array, got %T", ErrUnsupportedType, w.col, a)
	}
	w.bindValidity(a)
	ind := d.Indices()
	w.off = ind.Data().Offset()
	w.idx = arrow.GetData[T](buf(ind, 1))
	w.dict.bindValidity(d.Dictionary())
	return w.inner.bind(d.Dictionary())
}

func (w *dictWriter[T]) write(b []byte, i int) []byte {
	if w.isNull(i) {
		b, _ = w.headSlow(b, i)
		return b
	}
	k := int(w.idx[w.off+i])
	if w.dict.isNull(k) {
		if w.nullable {
			return append(b, 0)
		}
		w.st.fail(w.col, "null", "the dictionary value is null but the field is declared non-nullable")
		return b
	}
	if w.nullable {
		b = append(b, 2)
	}
	return w.inner.write(b, k)
}
