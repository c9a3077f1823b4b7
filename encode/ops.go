package encode

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf8"
)

// The row loop runs the columns of a batch as ops, and so do the writers of
// lists (per element) and structs (per field). For a column whose type
// is common in chain data (hashes, addresses, integers, booleans, strings,
// bytes, decimals, and lists when empty) the op holds the column's raw
// buffers, and writeOps encodes the value inline, in one function, so that
// the encoder's buffer stays in registers from column to column and the
// varints and small decimals are written without a call (Go's register ABI
// saves no registers across a call: every call spills the loop's state).
// Any other column, and any value that must be reported as an error, goes to
// the column's writer. Varint lengths are chosen by branches rather than
// computed from the value's bit length: the next column's writes depend on
// the length, and a predicted branch removes that dependency.
//
// Measured with BenchmarkEncode (-cpu 1, medians of interleaved runs on a
// noisy 2-vCPU VM): one writer call per column cost about 210 ns per row of
// the 27-column transactions table; these ops, the per-block envelope tail
// and the inline varints about 175–185 ns, and 105–110 ns on its 15 columns
// of performance.md (the hand-written reference: 75 ns).

type opKind uint8

const (
	opWriter  opKind = iota // call w
	opFixed32               // 32-byte fixed (hashes), copied as words
	opFixed20               // 20-byte fixed (addresses)
	opFixed                 // other fixed widths
	opU64                   // UInt64 → long; above 2^63-1 goes to w (error)
	opI64                   // Int64 and the int64 timestamps → long
	opI32                   // Int32, Date32 → int
	opU32                   // UInt32 → long
	opBool                  // boolean
	opBin                   // binary with int32 offsets
	opStr                   // string with int32 offsets; invalid UTF-8 goes to w (error)
	opDec128                // Decimal128; out of precision goes to w (error)
	opList                  // a list with int32 offsets: empty inline, else w
)

// op is one column of the bound batch.
type op struct {
	kind opKind
	// union is set when the field is nullable: a null is the union's
	// branch 0, any other value is written after branch 2.
	union bool
	bits  []byte // the validity bitmap; nil when the batch has no nulls
	off   int    // the array's offset
	width int    // opFixed: the width
	w     writer // the column's writer (opWriter, and errors)

	data []byte // fixed and binary data, boolean bits
	u64  []uint64
	i64  []int64
	i32  []int32
	u32  []uint32
	offs []int32
	dec  *dec128Writer
}

// opOf returns the op for the bound column writer w.
func opOf(w writer) op {
	switch w := w.(type) {
	case *fixedWriter:
		if w.as == FixedAsFixed {
			o := op{union: w.nullable, bits: w.bits, off: w.off, w: w, data: w.data, kind: opFixed, width: w.width}
			switch w.width {
			case 32:
				o.kind = opFixed32
			case 20:
				o.kind = opFixed20
			}
			return o
		}
	case *uint64Writer:
		return op{kind: opU64, union: w.nullable, bits: w.bits, off: w.off, w: w, u64: w.vals}
	case *intWriter[int64]:
		return op{kind: opI64, union: w.nullable, bits: w.bits, off: w.off, w: w, i64: w.vals}
	case *intWriter[int32]:
		return op{kind: opI32, union: w.nullable, bits: w.bits, off: w.off, w: w, i32: w.vals}
	case *intWriter[uint32]:
		return op{kind: opU32, union: w.nullable, bits: w.bits, off: w.off, w: w, u32: w.vals}
	case *boolWriter:
		return op{kind: opBool, union: w.nullable, bits: w.bits, off: w.off, w: w, data: w.data}
	case *binWriter[int32]:
		o := op{kind: opBin, union: w.nullable, bits: w.bits, off: w.off, w: w, data: w.data, offs: w.offs}
		if w.utf8 {
			o.kind = opStr
		}
		return o
	case *dec128Writer:
		return op{kind: opDec128, union: w.nullable, bits: w.bits, off: w.off, w: w, dec: w}
	case *listWriter[int32]:
		return op{kind: opList, union: w.nullable, bits: w.bits, off: w.off, w: w, offs: w.offs}
	}
	return op{kind: opWriter, w: w}
}

// childOp is opOf for the child of a nested writer (a list's element, a
// struct's field): the general writer when the encoder's tests ask for it.
func (v *valid) childOp(w writer) op {
	if v.st != nil && v.st.noOps {
		return op{kind: opWriter, w: w}
	}
	return opOf(w)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// An opWriter op has neither bits nor union: the writer writes those.

// chooseOps fills ops with the op of each bound column writer.
func chooseOps(ops []op, ws []writer, general bool) []op {
	ops = ops[:0]
	for _, w := range ws {
		if general {
			ops = append(ops, op{kind: opWriter, w: w})
			continue
		}
		ops = append(ops, opOf(w))
	}
	return ops
}

// writeOps appends the columns of row i.
func writeOps(b []byte, ops []op, i int) []byte {
	le := binary.LittleEndian
	for k := range ops {
		o := &ops[k]
		j := o.off + i
		if o.bits != nil && o.bits[j>>3]&(1<<(j&7)) == 0 {
			if !o.union {
				b = o.w.write(b, i) // a null in a non-nullable field: the error
				continue
			}
			b = append(b, 0)
			continue
		}
		if o.union {
			b = append(b, 2)
		}
		switch o.kind {
		case opWriter:
			b = o.w.write(b, i)
		case opList:
			if o.offs[j] == o.offs[j+1] {
				b = append(b, 0) // an empty array
				continue
			}
			b = o.w.write(b[:len(b)-boolInt(o.union)], i)
		case opFixed32:
			// Hashes and addresses are copied as machine words: a memmove
			// call would cost more than the copy.
			s, n := j*32, len(b)
			if cap(b)-n < 32 {
				b = growSlow(b, 32)
			}
			v, d := o.data[s:s+32:s+32], b[n:n+32:n+32]
			le.PutUint64(d[0:], le.Uint64(v[0:]))
			le.PutUint64(d[8:], le.Uint64(v[8:]))
			le.PutUint64(d[16:], le.Uint64(v[16:]))
			le.PutUint64(d[24:], le.Uint64(v[24:]))
			b = b[:n+32]
		case opFixed20:
			s, n := j*20, len(b)
			if cap(b)-n < 20 {
				b = growSlow(b, 20)
			}
			v, d := o.data[s:s+20:s+20], b[n:n+20:n+20]
			le.PutUint64(d[0:], le.Uint64(v[0:]))
			le.PutUint64(d[8:], le.Uint64(v[8:]))
			le.PutUint32(d[16:], le.Uint32(v[16:]))
			b = b[:n+20]
		case opU64, opI64, opI32, opU32:
			var u uint64 // the zig-zag encoded value
			if o.kind == opU64 {
				v := o.u64[j]
				if v > math.MaxInt64 {
					b = o.w.write(b[:len(b)-boolInt(o.union)], i) // reports the error
					continue
				}
				u = v << 1
			} else if o.kind == opI64 {
				v := o.i64[j]
				u = uint64(v<<1) ^ uint64(v>>63)
			} else if o.kind == opI32 {
				v := int64(o.i32[j])
				u = uint64(v<<1) ^ uint64(v>>63)
			} else {
				u = uint64(o.u32[j]) << 1
			}
			n := len(b)
			if cap(b)-n < 10 {
				b = growSlow(b, 10)
			}
			d := (*[10]byte)(b[n : n+10])
			if u < 1<<28 {
				b = b[:n+putVarint4(d, u)]
				continue
			}
			b = b[:n+putVarintWide(d, u)]
		case opBool:
			b = append(b, (o.data[j>>3]>>(j&7))&1)
		case opBin, opStr:
			v := o.data[o.offs[j]:o.offs[j+1]]
			if o.kind == opStr && !ascii(v) && !utf8.Valid(v) {
				b = o.w.write(b[:len(b)-boolInt(o.union)], i) // reports the error
				continue
			}
			n := len(b)
			if cap(b)-n < 10+len(v) {
				b = growSlow(b, 10+len(v))
			}
			if len(v) < 1<<27 {
				n += putVarint4((*[10]byte)(b[n:n+10]), uint64(len(v))<<1)
			} else {
				n += putVarintWide((*[10]byte)(b[n:n+10]), uint64(len(v))<<1)
			}
			b = b[:n+copy(b[n:n+len(v)], v)]
		case opDec128:
			w := o.dec
			v := w.vals[j]
			hi, lo := v.HighBits(), v.LowBits()
			if hi > w.maxHi || (hi == w.maxHi && lo > w.maxLo) || hi < w.minHi || (hi == w.minHi && lo < w.minLo) {
				b = o.w.write(b[:len(b)-boolInt(o.union)], i) // reports the error
				continue
			}
			if hi != 0 || lo > math.MaxInt64 {
				b = appendDecimal128(b, hi, lo)
				continue
			}
			// A positive value of up to 63 bits (amounts in wei and gwei):
			// its length byte and up to eight big-endian bytes.
			n := len(b)
			if cap(b)-n < 9 {
				b = growSlow(b, 9)
			}
			d := b[n : n+9 : n+9]
			k := bits.Len64(lo)/8 + 1
			d[0] = byte(2 * k)
			binary.BigEndian.PutUint64(d[1:], lo<<(64-8*uint(k)))
			b = b[:n+1+k]
		case opFixed:
			s := j * o.width
			b = append(b, o.data[s:s+o.width]...)
		}
	}
	return b
}

// varint4 returns the varint of u (below 2^28: block numbers, gas, indexes,
// lengths) as the little-endian word x, whose first m bytes are to be
// written: the caller stores all four bytes at once and keeps m. The length
// is chosen by branches, not computed, because a predicted branch lets the
// next column's writes start before this value is known (a column's values
// mostly share a length).
func varint4(u uint64) (x uint32, m int) {
	x = uint32(u)
	x = x&0x7f | (x<<1)&0x7f00 | (x<<2)&0x7f0000 | (x<<3)&0x7f000000
	if u < 1<<7 {
		return x, 1
	}
	if u < 1<<14 {
		return x | 0x80, 2
	}
	if u < 1<<21 {
		return x | 0x8080, 3
	}
	return x | 0x808080, 4
}

// putVarint4 writes u (below 2^28) as a varint into d and returns its
// length (see varint4).
func putVarint4(d *[10]byte, u uint64) int {
	x, m := varint4(u)
	binary.LittleEndian.PutUint32(d[:4], x)
	return m
}

// ascii reports whether v is ASCII, eight bytes at a time: decimal amounts
// and most text are, and skip utf8.Valid.
func ascii(v []byte) bool {
	var acc uint64
	for len(v) >= 8 {
		acc |= binary.LittleEndian.Uint64(v)
		v = v[8:]
	}
	for _, c := range v {
		acc |= uint64(c)
	}
	return acc&0x8080808080808080 == 0
}
