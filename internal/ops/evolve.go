package ops

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// projector lets verify compare a topic whose schema evolved under the
// stream id: a row written with an older schema holds that schema's
// columns only (a consumer reading it with the current schema sees the
// columns added since as null, their default), so it is compared with
// Amp's row of the same block on the columns both schemas have, in the
// writer's order. Rows written with the current schema, and Amp's rows of
// blocks no older row covers, are compared whole.
type projector struct {
	// current are the current schema's row fields, in Amp's column order.
	current []string
	// byBlock are the writer fields of the rows at a block whose writer
	// schema is not the current one.
	byBlock map[uint64][]string
}

// fieldNames returns the fields of record s, without those skip names.
func (s *avroSchema) fieldNames(skip func(string) bool) []string {
	var out []string
	for _, f := range s.fields {
		if skip == nil || !skip(f.name) {
			out = append(out, f.name)
		}
	}
	return out
}

// rowFields returns the row fields of a value envelope schema: the flat
// envelope's non-_amp_ fields or the Debezium envelope's after record's.
func rowFields(valueSchema string) ([]string, error) {
	s, err := parseAvroSchema(valueSchema)
	if err != nil {
		return nil, err
	}
	if _, flat := s.field("_amp_op"); flat {
		return s.fieldNames(func(n string) bool { return strings.HasPrefix(n, "_amp_") }), nil
	}
	after, ok := s.field("after")
	if !ok {
		return nil, fmt.Errorf("the stream's value schema has neither _amp_op nor after")
	}
	return after.nonNull().fieldNames(nil), nil
}

func newProjector(valueSchema string, live map[string]rowState) (*projector, error) {
	cur, err := rowFields(valueSchema)
	if err != nil {
		return nil, fmt.Errorf("reading the stream's current row fields: %w", err)
	}
	p := &projector{current: cur, byBlock: map[uint64][]string{}}
	for _, s := range live {
		if s.names != nil && !slices.Equal(s.names, cur) {
			p.byBlock[s.block] = s.names
		}
	}
	return p, nil
}

// pick returns the elements at idx of the canonical JSON array row.
func pick(row string, idx []int) (string, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(row), &elems); err != nil {
		return "", fmt.Errorf("projecting a row: %w", err)
	}
	parts := make([]string, len(idx))
	for i, k := range idx {
		parts[i] = string(elems[k])
	}
	return "[" + strings.Join(parts, ",") + "]", nil
}

// actual renders a topic row for comparison: a row of an older schema on
// the fields the current schema also has.
func (p *projector) actual(s rowState) (string, error) {
	if s.names == nil || slices.Equal(s.names, p.current) {
		return s.row, nil
	}
	var idx []int
	for i, n := range s.names {
		if slices.Contains(p.current, n) {
			idx = append(idx, i)
		}
	}
	return pick(s.row, idx)
}

// expected renders Amp's row i of rec (rendered whole as row) for
// comparison: on an older schema's fields where such rows cover its block.
func (p *projector) expected(rec arrow.RecordBatch, i int, row string) (string, error) {
	if len(p.byBlock) == 0 {
		return row, nil
	}
	col := rec.Schema().FieldIndices("_block_num")
	if len(col) == 0 {
		return row, nil
	}
	nums, ok := rec.Column(col[0]).(*array.Uint64)
	if !ok {
		return row, nil
	}
	names, ok := p.byBlock[nums.Value(i)]
	if !ok {
		return row, nil
	}
	var idx []int
	for _, n := range names {
		if k := slices.Index(p.current, n); k >= 0 {
			idx = append(idx, k)
		}
	}
	return pick(row, idx)
}
