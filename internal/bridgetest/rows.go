package bridgetest

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// AmpRows queries the simulator for every row of table up to block upTo (a
// batch query, as bridge verify makes) and returns the rows, sorted, as
// canonical JSON of the given columns (all of them when columns is nil),
// rendered as the consumers of test/flink and test/kstreams render what
// they read: integers as numbers, binary and fixed as 0x-prefixed hex,
// decimals as plain strings, timestamps as their integer value (Avro
// timestamp-nanos is a long, the Flink table declares them BIGINT), lists
// as arrays, structs as objects, null as null.
func (s *Stack) AmpRows(ctx context.Context, t testing.TB, table string, upTo uint64, columns []string) []string {
	t.Helper()
	cfg := source.DefaultConfig()
	cfg.Addr = s.Sim.Addr()
	cl, err := source.New(cfg, source.Deps{})
	require.NoError(t, err)
	defer cl.Close()
	q, err := cl.Query(ctx, fmt.Sprintf("SELECT * FROM %s WHERE _block_num <= %d", table, upTo))
	require.NoError(t, err)
	defer q.Close()
	var out []string
	for {
		e, err := q.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if e.Kind != source.KindBatch || e.Batch == nil || e.Batch.NumRows() == 0 {
			e.Release()
			continue
		}
		rec := e.Batch
		sc := rec.Schema()
		cols := columns
		if cols == nil {
			for _, f := range sc.Fields() {
				cols = append(cols, f.Name)
			}
		}
		for i := range int(rec.NumRows()) {
			row := make(map[string]any, len(cols))
			for _, c := range cols {
				idx := sc.FieldIndices(c)
				require.Len(t, idx, 1, "column %q of the table read is not a column of %s", c, table)
				v, err := arrowValue(rec.Column(idx[0]), i)
				require.NoError(t, err, "column %q", c)
				row[c] = v
			}
			b, err := json.Marshal(row)
			require.NoError(t, err)
			out = append(out, string(b))
		}
		e.Release()
	}
	slices.Sort(out)
	return out
}

// arrowValue renders one Arrow value as AmpRows says.
func arrowValue(col arrow.Array, i int) (any, error) {
	if col.IsNull(i) {
		return nil, nil
	}
	switch a := col.(type) {
	case *array.Uint64:
		return json.Number(strconv.FormatUint(a.Value(i), 10)), nil
	case *array.Uint32:
		return json.Number(strconv.FormatUint(uint64(a.Value(i)), 10)), nil
	case *array.Int64:
		return json.Number(strconv.FormatInt(a.Value(i), 10)), nil
	case *array.Int32:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), nil
	case *array.Boolean:
		return a.Value(i), nil
	case *array.String:
		return a.Value(i), nil
	case *array.FixedSizeBinary:
		return "0x" + hex.EncodeToString(a.Value(i)), nil
	case *array.Binary:
		return "0x" + hex.EncodeToString(a.Value(i)), nil
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale), nil
	case *array.Timestamp:
		return json.Number(strconv.FormatInt(int64(a.Value(i)), 10)), nil
	case *array.List:
		lo, hi := a.ValueOffsets(i)
		out := make([]any, 0, hi-lo)
		for j := lo; j < hi; j++ {
			v, err := arrowValue(a.ListValues(), int(j))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		out := make(map[string]any, a.NumField())
		for j := range a.NumField() {
			v, err := arrowValue(a.Field(j), i)
			if err != nil {
				return nil, err
			}
			out[st.Field(j).Name] = v
		}
		return out, nil
	case *array.Dictionary:
		return arrowValue(a.Dictionary(), a.GetValueIndex(i))
	default:
		return nil, fmt.Errorf("no rendering for %s: extend arrowValue", col.DataType())
	}
}

// CanonicalRows re-encodes a consumer's JSON lines with sorted keys and
// numbers kept as written, sorted, so they compare with AmpRows.
func CanonicalRows(t testing.TB, lines []string) []string {
	t.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		m := decodeRow(t, l, "output line %q", l)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// ProjectRows keeps the given columns of rows (canonical JSON, as from
// AmpRows), sorted.
func ProjectRows(t testing.TB, rows []string, columns []string) []string {
	t.Helper()
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		m := decodeRow(t, r)
		p := make(map[string]any, len(columns))
		for _, c := range columns {
			p[c] = m[c]
		}
		b, err := json.Marshal(p)
		require.NoError(t, err)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// decodeRow decodes one JSON object with numbers as json.Number; msgAndArgs
// say what it is when it is not.
func decodeRow(t testing.TB, row string, msgAndArgs ...any) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(row))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&m), msgAndArgs...)
	return m
}

// DiffRows compares two multisets of rows: missing are in want and not in
// got, extra in got and not in want (each as many times as it differs),
// both sorted.
func DiffRows(want, got []string) (missing, extra []string) {
	count := map[string]int{}
	for _, r := range want {
		count[r]++
	}
	for _, r := range got {
		count[r]--
	}
	for r, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, r)
		}
		for ; n < 0; n++ {
			extra = append(extra, r)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return missing, extra
}

// RequireSameRows fails the test when the rows of table (what a consumer
// materialised, "the KTable") are not Amp's rows want, with the counts and
// the first few rows that differ.
func RequireSameRows(t testing.TB, table string, want, got []string) {
	t.Helper()
	missing, extra := DiffRows(want, got)
	if len(missing)+len(extra) == 0 {
		return
	}
	first := func(rows []string) string {
		if len(rows) > 3 {
			rows = rows[:3]
		}
		return strings.Join(rows, "\n")
	}
	t.Fatalf("%s (%d rows) differs from Amp (%d rows): %d of Amp's rows missing, %d extra\nmissing (first 3):\n%s\nextra (first 3):\n%s",
		table, len(got), len(want), len(missing), len(extra), first(missing), first(extra))
}

// RequireStaleDetected is a negative check of the comparison: against the
// rows Amp had before a reorg (stale, in the columns of got), the rows of
// table must lack the replaced blocks' rows and have the replacements'.
func RequireStaleDetected(t testing.TB, table string, stale, got []string) {
	t.Helper()
	missing, extra := DiffRows(stale, got)
	require.NotEmpty(t, missing, "the replaced blocks' rows must be missing from %s", table)
	require.NotEmpty(t, extra, "the replacement blocks' rows must be extra against the stale rows")
	t.Logf("stale expectation: %d rows missing (retracted), %d extra (replacements)", len(missing), len(extra))
}

// RequireChangedRowDetected is a negative check of the comparison: with
// column of the first of the rows want changed and the second duplicated,
// DiffRows against got (equal to want) must find two rows missing and one
// extra.
func RequireChangedRowDetected(t testing.TB, want, got []string, column string) {
	t.Helper()
	bad := slices.Clone(want)
	row := decodeRow(t, bad[0])
	row[column] = "changed"
	b, err := json.Marshal(row)
	require.NoError(t, err)
	bad[0] = string(b)
	bad = append(bad, bad[1]) // and a duplicate
	missing, extra := DiffRows(bad, got)
	require.Len(t, missing, 2)
	require.Len(t, extra, 1)
}

// NullAt returns rows (canonical JSON, as from AmpRows) with column set to
// null in the rows of the given blocks (by block_num), sorted: what a
// consumer reading with a schema that has column sees of a topic whose rows
// of those blocks were written without it (schema evolution: an added
// column's default in older rows).
func NullAt(t testing.TB, rows []string, column string, blocks map[uint64]bool) []string {
	t.Helper()
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		m := decodeRow(t, r)
		n, ok := m["block_num"].(json.Number)
		require.True(t, ok, "row without block_num: %s", r)
		b, err := strconv.ParseUint(n.String(), 10, 64)
		require.NoError(t, err)
		if blocks[b] {
			m[column] = nil
		}
		j, err := json.Marshal(m)
		require.NoError(t, err)
		out = append(out, string(j))
	}
	slices.Sort(out)
	return out
}
