package labels

import (
	"bytes"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Set is the label files of one stream, read and checked: Load makes it,
// Bind fits it to the query's schema. It is immutable.
type Set struct {
	tables []*table
}

// table is one label file.
type table struct {
	cfg Config
	// keys are the key cells as written, keyLines their lines.
	keys     []string
	keyLines []int
	// cols are the label columns, each an Arrow array of one value per key.
	cols []column
}

// column is one label column of a file.
type column struct {
	name string
	typ  arrow.DataType
	arr  arrow.Array
}

// Load reads and checks every label file of cfgs: the file exists and is
// CSV with a header, the key column and each named column are in the
// header, every cell parses as its column's type, and no key appears
// twice. Every problem is reported, each naming its file (and line and
// column for a cell). An empty cfgs gives a nil Set, which joins nothing.
func Load(cfgs []Config) (*Set, error) {
	if len(cfgs) == 0 {
		return nil, nil
	}
	var errs []error
	s := &Set{}
	for i, c := range cfgs {
		t, err := loadTable(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("labels[%d]: %w", i, err))
			continue
		}
		s.tables = append(s.tables, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// loadTable reads one file.
func loadTable(c Config) (*table, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(c.File)
	if err != nil {
		return nil, fmt.Errorf("reading label file: %w: %w", err, ErrInvalid)
	}
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	r := csv.NewReader(bytes.NewReader(b))
	r.ReuseRecord = false
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("label file %s is empty; it needs a header line naming its columns: %w", c.File, ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("label file %s: %w: %w", c.File, err, ErrInvalid)
	}
	index := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(h)
		header[i] = h
		if h == "" {
			return nil, fmt.Errorf("label file %s: header column %d has no name: %w", c.File, i+1, ErrInvalid)
		}
		if _, dup := index[h]; dup {
			return nil, fmt.Errorf("label file %s: the header names column %q twice: %w", c.File, h, ErrInvalid)
		}
		index[h] = i
	}
	keyCol, ok := index[c.csvKey()]
	if !ok {
		return nil, fmt.Errorf("label file %s has no key column %q (its header: %s); set csv_key to the file's key column: %w",
			c.File, c.csvKey(), strings.Join(header, ","), ErrInvalid)
	}
	names := c.Columns
	if len(names) == 0 {
		for _, h := range header {
			if h != c.csvKey() {
				names = append(names, h)
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("label file %s has no column besides its key %q: nothing to join: %w", c.File, c.csvKey(), ErrInvalid)
	}
	t := &table{cfg: c}
	var idx []int
	var builders []cellBuilder
	for _, n := range names {
		i, ok := index[n]
		switch {
		case !ok:
			return nil, fmt.Errorf("label file %s has no column %q (its header: %s): %w", c.File, n, strings.Join(header, ","), ErrInvalid)
		case n == c.csvKey():
			return nil, fmt.Errorf("label file %s: columns lists the key column %q; the query's %q column already holds it: %w",
				c.File, n, c.Key, ErrInvalid)
		case slices.Contains(idx, i):
			return nil, fmt.Errorf("label file %s: columns lists %q twice: %w", c.File, n, ErrInvalid)
		}
		typ, _ := c.Types[n].arrowType() // validated
		idx = append(idx, i)
		t.cols = append(t.cols, column{name: n, typ: typ})
		builders = append(builders, newCellBuilder(typ))
	}
	for col := range c.Types {
		if _, ok := index[col]; !ok {
			return nil, fmt.Errorf("label file %s: types names column %q, which its header lacks (%s): %w",
				c.File, col, strings.Join(header, ","), ErrInvalid)
		}
		if !slices.Contains(names, col) && col != c.csvKey() {
			return nil, fmt.Errorf("label file %s: types names column %q, which columns does not add: %w", c.File, col, ErrInvalid)
		}
	}
	seen := map[string]int{}
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// csv.ParseError names the line (a short or long record, a
			// stray quote).
			return nil, fmt.Errorf("label file %s: %w: %w", c.File, err, ErrInvalid)
		}
		line, _ := r.FieldPos(keyCol)
		key := strings.TrimSpace(rec[keyCol])
		if key == "" {
			return nil, &CellError{File: c.File, Line: line, Column: c.csvKey(), Value: rec[keyCol], Reason: "the key is empty; every line needs one"}
		}
		if first, dup := seen[key]; dup {
			return nil, &CellError{File: c.File, Line: line, Column: c.csvKey(), Value: key,
				Reason: fmt.Sprintf("the key is also on line %d; each key may appear once (a join would duplicate rows)", first)}
		}
		seen[key] = line
		t.keys = append(t.keys, key)
		t.keyLines = append(t.keyLines, line)
		for j, i := range idx {
			if reason := builders[j].add(rec[i]); reason != "" {
				l, _ := r.FieldPos(i)
				return nil, &CellError{File: c.File, Line: l, Column: header[i], Value: rec[i], Reason: reason}
			}
		}
	}
	for j := range t.cols {
		t.cols[j].arr = builders[j].finish()
	}
	return t, nil
}

// cellBuilder parses cells of one type into an Arrow array.
type cellBuilder struct {
	b     array.Builder
	typ   arrow.DataType
	width int // FixedSizeBinary width
}

func newCellBuilder(typ arrow.DataType) cellBuilder {
	c := cellBuilder{b: array.NewBuilder(memory.DefaultAllocator, typ), typ: typ}
	if f, ok := typ.(*arrow.FixedSizeBinaryType); ok {
		c.width = f.ByteWidth
	}
	return c
}

// add parses one cell; it returns why the cell is malformed, or "".
func (c *cellBuilder) add(cell string) string {
	switch b := c.b.(type) {
	case *array.StringBuilder:
		b.Append(cell)
	case *array.Int64Builder:
		v, err := strconv.ParseInt(strings.TrimSpace(cell), 10, 64)
		if err != nil {
			return "want a base-10 integer (int64)"
		}
		b.Append(v)
	case *array.Float64Builder:
		v, err := strconv.ParseFloat(strings.TrimSpace(cell), 64)
		if err != nil {
			return "want a number (float64)"
		}
		b.Append(v)
	case *array.BooleanBuilder:
		v, err := strconv.ParseBool(strings.TrimSpace(cell))
		if err != nil {
			return "want true or false (bool)"
		}
		b.Append(v)
	case *array.BinaryBuilder:
		v, reason := parseHex(cell, -1)
		if reason != "" {
			return reason
		}
		b.Append(v)
	case *array.FixedSizeBinaryBuilder:
		v, reason := parseHex(cell, c.width)
		if reason != "" {
			return reason
		}
		b.Append(v)
	}
	return ""
}

func (c *cellBuilder) finish() arrow.Array {
	defer c.b.Release()
	return c.b.NewArray()
}

// parseHex parses "0x…" (or "0X…") hex in either case; width is the
// number of bytes wanted, -1 for any. It returns why s is malformed, or "".
func parseHex(s string, width int) ([]byte, string) {
	s = strings.TrimSpace(s)
	want := "0x followed by an even number of hex digits"
	if width >= 0 {
		want = fmt.Sprintf("0x followed by %d hex digits (%d bytes)", 2*width, width)
	}
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok {
		if digits, ok = strings.CutPrefix(s, "0X"); !ok {
			return nil, "want " + want
		}
	}
	if len(digits)%2 != 0 || (width >= 0 && len(digits) != 2*width) {
		return nil, fmt.Sprintf("has %d hex digits; want %s", len(digits), want)
	}
	v, err := hex.DecodeString(digits)
	if err != nil {
		return nil, "has a character that is not a hex digit; want " + want
	}
	return v, ""
}
