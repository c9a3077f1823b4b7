package encode

import (
	"encoding/binary"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
)

// Plain writers: for a batch in which a column has no nulls, Encode runs a
// variant of its writer without the validity handling (no bitmap test, and
// for a non-nullable field no union branch at all), chosen once per batch.
// Each variant is the same struct under another type, so choosing one
// allocates nothing.

// plainer is implemented by writers that have such a variant. plain returns
// nil when the bound column has nulls or no variant applies.
type plainer interface {
	plain() writer
}

func (w *fixedWriter) plain() writer {
	if w.bits != nil || w.as != FixedAsFixed {
		return nil
	}
	switch {
	case w.width == 32 && !w.nullable:
		return (*fixed32Plain)(w)
	case w.width == 20 && !w.nullable:
		return (*fixed20Plain)(w)
	}
	return (*fixedPlain)(w)
}

// fixed32Plain copies a non-null 32-byte value (hashes) as four words.
type fixed32Plain fixedWriter

func (w *fixed32Plain) bind(a arrow.Array) error { return (*fixedWriter)(w).bind(a) }

func (w *fixed32Plain) write(b []byte, i int) []byte {
	s := (w.off + i) * 32
	v := w.data[s : s+32 : s+32]
	n := len(b)
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
}

// fixed20Plain copies a non-null 20-byte value (addresses).
type fixed20Plain fixedWriter

func (w *fixed20Plain) bind(a arrow.Array) error { return (*fixedWriter)(w).bind(a) }

func (w *fixed20Plain) write(b []byte, i int) []byte {
	s := (w.off + i) * 20
	v := w.data[s : s+20 : s+20]
	n := len(b)
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

// fixedPlain writes any other width, or a nullable field without nulls.
type fixedPlain fixedWriter

func (w *fixedPlain) bind(a arrow.Array) error { return (*fixedWriter)(w).bind(a) }

func (w *fixedPlain) write(b []byte, i int) []byte {
	if w.nullable {
		b = append(b, 2)
	}
	s := (w.off + i) * w.width
	return append(b, w.data[s:s+w.width]...)
}

func (w *uint64Writer) plain() writer {
	if w.bits != nil {
		return nil
	}
	return (*uint64Plain)(w)
}

type uint64Plain uint64Writer

func (w *uint64Plain) bind(a arrow.Array) error { return (*uint64Writer)(w).bind(a) }

func (w *uint64Plain) write(b []byte, i int) []byte {
	if w.nullable {
		b = append(b, 2)
	}
	v := w.vals[w.off+i]
	if v > math.MaxInt64 {
		w.st.fail(w.col, strconv.FormatUint(v, 10), "UInt64 above 2^63-1 does not fit an Avro long; CAST it to a string or DECIMAL in the query")
		return b
	}
	u := v << 1
	if u < 0x80 {
		return append(b, byte(u))
	}
	return appendVarint(b, u)
}

func (w *intWriter[T]) plain() writer {
	if w.bits != nil {
		return nil
	}
	return (*intPlain[T])(w)
}

type intPlain[T smallInt] intWriter[T]

func (w *intPlain[T]) bind(a arrow.Array) error { return (*intWriter[T])(w).bind(a) }

func (w *intPlain[T]) write(b []byte, i int) []byte {
	if w.nullable {
		b = append(b, 2)
	}
	return appendLong(b, int64(w.vals[w.off+i]))
}

func (w *boolWriter) plain() writer {
	if w.bits != nil {
		return nil
	}
	return (*boolPlain)(w)
}

type boolPlain boolWriter

func (w *boolPlain) bind(a arrow.Array) error { return (*boolWriter)(w).bind(a) }

func (w *boolPlain) write(b []byte, i int) []byte {
	j := w.off + i
	v := (w.data[j>>3] >> (j & 7)) & 1
	if w.nullable {
		return append(b, 2, v)
	}
	return append(b, v)
}

func (w *binWriter[O]) plain() writer {
	if w.bits != nil {
		return nil
	}
	return (*binPlain[O])(w)
}

type binPlain[O int32 | int64] binWriter[O]

func (w *binPlain[O]) bind(a arrow.Array) error { return (*binWriter[O])(w).bind(a) }

func (w *binPlain[O]) write(b []byte, i int) []byte {
	if w.nullable {
		b = append(b, 2)
	}
	j := w.off + i
	v := w.data[w.offs[j]:w.offs[j+1]]
	if w.utf8 && !utf8.Valid(v) {
		w.st.fail(w.col, strconv.Quote(string(v)), "invalid UTF-8 in a string column; CAST it to binary in the query")
		return b
	}
	return appendBytes(b, v)
}

func (w *dec128Writer) plain() writer {
	if w.bits != nil {
		return nil
	}
	return (*dec128Plain)(w)
}

type dec128Plain dec128Writer

func (w *dec128Plain) bind(a arrow.Array) error { return (*dec128Writer)(w).bind(a) }

func (w *dec128Plain) write(b []byte, i int) []byte {
	if w.nullable {
		b = append(b, 2)
	}
	v := w.vals[w.off+i]
	hi, lo := v.HighBits(), v.LowBits()
	if hi > w.maxHi || (hi == w.maxHi && lo > w.maxLo) || hi < w.minHi || (hi == w.minHi && lo < w.minLo) {
		return (*dec128Writer)(w).write(b[:len(b)-boolInt(w.nullable)], i)
	}
	return appendDecimal128(b, hi, lo)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// plainOf returns w's plain variant for the bound batch, or w.
func plainOf(w writer) writer {
	if p, ok := w.(plainer); ok {
		if pw := p.plain(); pw != nil {
			return pw
		}
	}
	return w
}

// plainChild is plainOf for a nested writer (general when the encoder's
// tests ask for it).
func (v *valid) plainChild(w writer) writer {
	if v.st != nil && v.st.noPlain {
		return w
	}
	return plainOf(w)
}
