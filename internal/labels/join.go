package labels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ErrSchemaChanged is returned by Join for a batch whose schema is not the
// one the Joiner was bound to: Amp's result changed under a running stream.
var ErrSchemaChanged = errors.New("the batch's Arrow schema differs from the one the labels were bound to")

// keyKind is how a key column's values are looked up.
type keyKind int

const (
	keyBytes  keyKind = iota // FixedSizeBinary, Binary, LargeBinary: the bytes
	keyString                // String, LargeString: the text
	keyInt                   // signed integers: 8 bytes big-endian
	keyUint                  // unsigned integers: 8 bytes big-endian
)

// bound is one label file bound to the query's key column.
type bound struct {
	t    *table
	col  int // the key column's index in the query's schema
	kind keyKind
	join Join
	// rows maps a key, as bytes, to its line's index in the table.
	rows map[string]int32
}

// Joiner joins a Set onto batches of one Arrow schema. It is safe for
// concurrent use (the backfill's workers share it).
type Joiner struct {
	in, out *arrow.Schema
	tables  []bound
	mem     memory.Allocator
	scratch sync.Pool
}

// Option configures a Joiner.
type Option func(*Joiner)

// WithAllocator sets the allocator of the joined batches' new buffers
// (default memory.DefaultAllocator).
func WithAllocator(mem memory.Allocator) Option {
	return func(j *Joiner) { j.mem = mem }
}

// Bind fits the label files to the query's Arrow schema in: each key column
// must be exactly one column of in, of a type that can be joined
// (FixedSizeBinary, Binary, String, or an integer), and each file's key
// cells must parse as that type (a FixedSizeBinary(n) key as 0x and 2n hex
// digits); a key that two cells spell differently (0xAB, 0xab) is a
// duplicate. A label column named like a column of in, or like a label
// column of an earlier file, is refused. A nil Set binds to a nil Joiner,
// whose Schema is in and whose Join returns the batch as it is.
func (s *Set) Bind(in *arrow.Schema, opts ...Option) (*Joiner, error) {
	if s == nil {
		return nil, nil
	}
	j := &Joiner{in: in, mem: memory.DefaultAllocator}
	for _, o := range opts {
		o(j)
	}
	fields := append([]arrow.Field(nil), in.Fields()...)
	names := map[string]string{}
	for _, f := range in.Fields() {
		names[f.Name] = "a column of the query"
	}
	var errs []error
	for i, t := range s.tables {
		b, err := bind(t, in)
		if err != nil {
			errs = append(errs, fmt.Errorf("labels[%d]: %w", i, err))
			continue
		}
		for _, c := range t.cols {
			if what, dup := names[c.name]; dup {
				errs = append(errs, fmt.Errorf("labels[%d]: label file %s adds column %q, which is already %s; "+
					"leave it out of columns or rename it in the file: %w", i, t.cfg.File, c.name, what, ErrInvalid))
				continue
			}
			names[c.name] = "a column of label file " + t.cfg.File
			fields = append(fields, arrow.Field{Name: c.name, Type: c.typ, Nullable: b.join == Left})
		}
		j.tables = append(j.tables, b)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	md := in.Metadata()
	j.out = arrow.NewSchema(fields, &md)
	return j, nil
}

// bind binds one file.
func bind(t *table, in *arrow.Schema) (bound, error) {
	c := t.cfg
	b := bound{t: t, join: c.join(), rows: make(map[string]int32, len(t.keys))}
	idx := in.FieldIndices(c.Key)
	if len(idx) != 1 {
		names := make([]string, in.NumFields())
		for i, f := range in.Fields() {
			names[i] = f.Name
		}
		what := "has no column"
		if len(idx) > 1 {
			what = fmt.Sprintf("has %d columns named", len(idx))
		}
		return b, fmt.Errorf("key %q: the query's result %s %q (its columns: %s): %w",
			c.Key, what, c.Key, strings.Join(names, ", "), ErrInvalid)
	}
	b.col = idx[0]
	typ := in.Field(b.col).Type
	width := -1
	switch tt := typ.(type) {
	case *arrow.FixedSizeBinaryType:
		b.kind, width = keyBytes, tt.ByteWidth
	case *arrow.BinaryType, *arrow.LargeBinaryType:
		b.kind = keyBytes
	case *arrow.StringType, *arrow.LargeStringType:
		b.kind = keyString
	case *arrow.Int8Type, *arrow.Int16Type, *arrow.Int32Type, *arrow.Int64Type:
		b.kind = keyInt
	case *arrow.Uint8Type, *arrow.Uint16Type, *arrow.Uint32Type, *arrow.Uint64Type:
		b.kind = keyUint
	default:
		return b, fmt.Errorf("key %q is the query's %s column, which labels cannot join on; "+
			"join on a FixedSizeBinary, Binary, String or integer column: %w", c.Key, typ, ErrInvalid)
	}
	bits := 64
	if fw, ok := typ.(arrow.FixedWidthDataType); ok && b.kind >= keyInt {
		bits = fw.BitWidth()
	}
	lines := make(map[string]int, len(t.keys))
	var buf [8]byte
	for i, cell := range t.keys {
		var key string
		switch b.kind {
		case keyBytes:
			v, reason := parseHex(cell, width)
			if reason != "" {
				return b, &CellError{File: c.File, Line: t.keyLines[i], Column: c.csvKey(), Value: cell,
					Reason: reason + fmt.Sprintf(" to match the query's %s column %q", typ, c.Key)}
			}
			key = string(v)
		case keyString:
			key = cell
		case keyInt:
			v, err := strconv.ParseInt(cell, 10, bits)
			if err != nil {
				return b, &CellError{File: c.File, Line: t.keyLines[i], Column: c.csvKey(), Value: cell,
					Reason: fmt.Sprintf("want a base-10 integer that fits the query's %s column %q", typ, c.Key)}
			}
			binary.BigEndian.PutUint64(buf[:], uint64(v))
			key = string(buf[:])
		case keyUint:
			v, err := strconv.ParseUint(cell, 10, bits)
			if err != nil {
				return b, &CellError{File: c.File, Line: t.keyLines[i], Column: c.csvKey(), Value: cell,
					Reason: fmt.Sprintf("want a non-negative base-10 integer that fits the query's %s column %q", typ, c.Key)}
			}
			binary.BigEndian.PutUint64(buf[:], v)
			key = string(buf[:])
		}
		if first, dup := lines[key]; dup {
			return b, &CellError{File: c.File, Line: t.keyLines[i], Column: c.csvKey(), Value: cell,
				Reason: fmt.Sprintf("the same key as line %d; each key may appear once (a join would duplicate rows)", first)}
		}
		lines[key] = t.keyLines[i]
		b.rows[key] = int32(i)
	}
	return b, nil
}

// Schema is the joined batches' schema: the query's columns, then each
// file's label columns in order. A nil Joiner has no schema of its own:
// callers use the query's.
func (j *Joiner) Schema() *arrow.Schema { return j.out }

// scratch is the per-call working memory of Join, pooled so that a
// stream's steady state allocates none of it.
type scratch struct {
	match [][]int32 // per table: the label row of each input row, -1 for none
	keep  []int32   // the input rows kept
	idx   []int32   // one file's label row per kept row
}

// Misses counts the rows of a batch whose key a label file lacks.
type Misses struct {
	// Dropped are the rows an inner join dropped.
	Dropped int
	// Nulls are the rows kept with a left join's labels null.
	Nulls int
}

// Join returns rec with the label columns added, a new reference the
// caller must release; rec itself is not released. An inner join's rows
// without a label are dropped (the result may have no rows), a left
// join's get nulls; the rows kept stay in their order. Allocation: the
// label columns (and, when an inner join drops rows, the query's columns)
// are new buffers from the Joiner's allocator; nothing is allocated per
// row.
func (j *Joiner) Join(rec arrow.RecordBatch) (arrow.RecordBatch, Misses, error) {
	if j == nil {
		rec.Retain()
		return rec, Misses{}, nil
	}
	if !rec.Schema().Equal(j.in) {
		return nil, Misses{}, fmt.Errorf("%w: bound to %s, got %s", ErrSchemaChanged, j.in, rec.Schema())
	}
	var miss Misses
	n := int(rec.NumRows())
	sc, _ := j.scratch.Get().(*scratch)
	if sc == nil {
		sc = &scratch{}
	}
	defer j.scratch.Put(sc)
	if len(sc.match) < len(j.tables) {
		sc.match = make([][]int32, len(j.tables))
	}
	all := true
	for ti := range j.tables {
		b := &j.tables[ti]
		sc.match[ti] = grow(sc.match[ti], n)
		b.lookup(rec.Column(b.col), sc.match[ti])
	}
	sc.keep = sc.keep[:0]
	for i := range n {
		kept, nulls := true, false
		for ti := range j.tables {
			if sc.match[ti][i] < 0 {
				if j.tables[ti].join == Inner {
					kept = false
					break
				}
				nulls = true
			}
		}
		switch {
		case !kept:
			all = false
			miss.Dropped++
		case nulls:
			miss.Nulls++
			sc.keep = append(sc.keep, int32(i))
		default:
			sc.keep = append(sc.keep, int32(i))
		}
	}
	cols := make([]arrow.Array, 0, j.out.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	if all {
		for _, c := range rec.Columns() {
			c.Retain()
			cols = append(cols, c)
		}
	} else {
		for i, c := range rec.Columns() {
			out, err := take(j.mem, c, sc.keep)
			if err != nil {
				return nil, Misses{}, fmt.Errorf("labels: selecting the rows with a label from column %q: %w", rec.Schema().Field(i).Name, err)
			}
			cols = append(cols, out)
		}
	}
	for ti := range j.tables {
		b := &j.tables[ti]
		m := sc.match[ti]
		sc.idx = sc.idx[:0]
		for _, r := range sc.keep {
			sc.idx = append(sc.idx, m[r])
		}
		for _, c := range b.t.cols {
			out, err := take(j.mem, c.arr, sc.idx)
			if err != nil {
				return nil, Misses{}, fmt.Errorf("labels: joining column %q of %s: %w", c.name, b.t.cfg.File, err)
			}
			cols = append(cols, out)
		}
	}
	return array.NewRecordBatch(j.out, cols, int64(len(sc.keep))), miss, nil
}

// lookup writes, for each row of the key column col, the label row of its
// key, or -1 (no such key, or a null key). The type switch is outside the
// loops: the per-row work is one map lookup that allocates nothing (the
// compiler does not copy a []byte converted to string for a map index).
func (b *bound) lookup(col arrow.Array, out []int32) {
	m := b.rows
	find := func(i int, k string) {
		if col.IsNull(i) {
			out[i] = -1
		} else if r, ok := m[k]; ok {
			out[i] = r
		} else {
			out[i] = -1
		}
	}
	switch a := col.(type) {
	case *array.FixedSizeBinary:
		for i := range out {
			find(i, string(a.Value(i)))
		}
	case *array.Binary:
		for i := range out {
			find(i, string(a.Value(i)))
		}
	case *array.LargeBinary:
		for i := range out {
			find(i, string(a.Value(i)))
		}
	case *array.String:
		for i := range out {
			find(i, a.Value(i))
		}
	case *array.LargeString:
		for i := range out {
			find(i, a.Value(i))
		}
	default:
		var buf [8]byte
		for i := range out {
			binary.BigEndian.PutUint64(buf[:], intValue(col, i))
			find(i, string(buf[:]))
		}
	}
}

// intValue is an integer column's value as the 64 bits bind keyed it by.
func intValue(col arrow.Array, i int) uint64 {
	switch a := col.(type) {
	case *array.Int8:
		return uint64(int64(a.Value(i)))
	case *array.Int16:
		return uint64(int64(a.Value(i)))
	case *array.Int32:
		return uint64(int64(a.Value(i)))
	case *array.Int64:
		return uint64(a.Value(i))
	case *array.Uint8:
		return uint64(a.Value(i))
	case *array.Uint16:
		return uint64(a.Value(i))
	case *array.Uint32:
		return uint64(a.Value(i))
	case *array.Uint64:
		return a.Value(i)
	}
	return 0
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
