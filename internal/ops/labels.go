package ops

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/labels"
)

// rowLabels is one label file as verify joins it onto Amp's rows: its own
// reading of the CSV and its own join over rows in the canonical form,
// sharing no code with internal/labels (which the bridge joins Arrow
// batches with), so that a join that dropped, misplaced or mistyped a
// label shows as a difference.
type rowLabels struct {
	// col is the key column's index in Amp's rows.
	col  int
	left bool
	// byKey maps a key in the canonical form (JSON text) to the label
	// values in the canonical form; width is the number of label columns.
	byKey map[string][]any
	width int
}

// newRowLabels reads the label files of sc for Amp's schema s.
func newRowLabels(sc config.StreamConfig, s *arrow.Schema) ([]rowLabels, error) {
	var out []rowLabels
	for i, l := range sc.Labels {
		idx := s.FieldIndices(l.Key)
		if len(idx) != 1 {
			return nil, fmt.Errorf("config streams (%s).labels[%d]: the query's result has no column %q", sc.ID, i, l.Key)
		}
		rl, err := readRowLabels(l, s.Field(idx[0]).Type)
		if err != nil {
			return nil, fmt.Errorf("config streams (%s).labels[%d]: %w", sc.ID, i, err)
		}
		rl.col = idx[0]
		out = append(out, rl)
	}
	return out, nil
}

func readRowLabels(l config.LabelConfig, keyType arrow.DataType) (rowLabels, error) {
	rl := rowLabels{left: l.Join == labels.Left, byKey: map[string][]any{}}
	b, err := os.ReadFile(l.File)
	if err != nil {
		return rl, err
	}
	recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")))).ReadAll()
	if err != nil {
		return rl, fmt.Errorf("reading label file %s: %w", l.File, err)
	}
	if len(recs) == 0 {
		return rl, fmt.Errorf("label file %s is empty", l.File)
	}
	header := recs[0]
	for i := range header {
		header[i] = strings.TrimSpace(header[i])
	}
	csvKey := l.CSVKey
	if csvKey == "" {
		csvKey = l.Key
	}
	keyAt := slices.Index(header, csvKey)
	cols := l.Columns
	if len(cols) == 0 {
		for _, h := range header {
			if h != csvKey {
				cols = append(cols, h)
			}
		}
	}
	at := make([]int, len(cols))
	for i, c := range cols {
		if at[i] = slices.Index(header, c); at[i] < 0 || keyAt < 0 {
			return rl, fmt.Errorf("label file %s lacks column %q or %q", l.File, c, csvKey)
		}
	}
	rl.width = len(cols)
	for n, rec := range recs[1:] {
		key, err := canonicalKey(strings.TrimSpace(rec[keyAt]), keyType)
		if err != nil {
			return rl, fmt.Errorf("label file %s line %d: %w", l.File, n+2, err)
		}
		vals := make([]any, len(cols))
		for i, c := range cols {
			if vals[i], err = canonicalCell(rec[at[i]], l.Types[c]); err != nil {
				return rl, fmt.Errorf("label file %s line %d column %q: %w", l.File, n+2, c, err)
			}
		}
		rl.byKey[key] = vals
	}
	return rl, nil
}

// canonicalKey renders a key cell as Amp's key column renders in the
// canonical form (rows.go), as JSON text.
func canonicalKey(cell string, t arrow.DataType) (string, error) {
	var v any
	switch t.ID() {
	case arrow.FIXED_SIZE_BINARY, arrow.BINARY, arrow.LARGE_BINARY:
		v = strings.ToLower(cell)
	case arrow.STRING, arrow.LARGE_STRING:
		v = cell
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		n, err := strconv.ParseInt(cell, 10, 64)
		if err != nil {
			return "", err
		}
		v = intNumber(n)
	default:
		n, err := strconv.ParseUint(cell, 10, 64)
		if err != nil {
			return "", err
		}
		v = uintNumber(n)
	}
	return marshalCanonical(v)
}

// canonicalCell renders a label cell of type typ in the canonical form.
func canonicalCell(cell, typ string) (any, error) {
	t := strings.TrimSpace(cell)
	switch {
	case typ == "" || typ == "string":
		return cell, nil
	case typ == "int64":
		n, err := strconv.ParseInt(t, 10, 64)
		return intNumber(n), err
	case typ == "float64":
		x, err := strconv.ParseFloat(t, 64)
		return floatValue(x, 64), err
	case typ == "bool":
		return strconv.ParseBool(t)
	case strings.HasPrefix(typ, "hex"):
		return strings.ToLower(t), nil
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}

// joinRow joins the label files onto one of Amp's rows in the canonical
// form; false means an inner join drops it.
func joinRow(tables []rowLabels, row []any) ([]any, bool, error) {
	for _, t := range tables {
		key, err := marshalCanonical(row[t.col])
		if err != nil {
			return nil, false, err
		}
		vals, ok := t.byKey[key]
		switch {
		case ok && row[t.col] != nil:
			row = append(row, vals...)
		case t.left:
			row = append(row, make([]any, t.width)...)
		default:
			return nil, false, nil
		}
	}
	return row, true, nil
}
