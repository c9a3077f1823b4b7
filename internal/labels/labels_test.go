package labels

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeCSV(t testing.TB, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens.csv")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

func addr(b byte) []byte { return bytes.Repeat([]byte{b}, 20) }

func addrHex(b byte, upper bool) string {
	h := hex.EncodeToString(addr(b))
	if upper {
		return "0X" + strings.ToUpper(h)
	}
	return "0x" + h
}

// transfers is a query result: (block, token address, amount).
func transfers(t testing.TB, mem memory.Allocator, tokens [][]byte) arrow.RecordBatch {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "_block_num", Type: arrow.PrimitiveTypes.Uint64},
		{Name: "token", Type: &arrow.FixedSizeBinaryType{ByteWidth: 20}, Nullable: true},
		{Name: "note", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "topics", Type: arrow.ListOf(arrow.PrimitiveTypes.Int32), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	for i, tok := range tokens {
		b.Field(0).(*array.Uint64Builder).Append(uint64(100 + i))
		if tok == nil {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.FixedSizeBinaryBuilder).Append(tok)
		}
		if i%3 == 2 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.StringBuilder).Append(strings.Repeat("n", i))
		}
		lb := b.Field(3).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues([]int32{int32(i), int32(i * 10)}, nil)
	}
	return b.NewRecordBatch()
}

const tokensCSV = "address,symbol,decimals\n" +
	"0x0101010101010101010101010101010101010101,AAA,18\n" +
	"0X0202020202020202020202020202020202020202,BBB,6\n" +
	"0x0303030303030303030303030303030303030303,CCC,0\n"

// rowsOf renders a batch as one line per row.
func rowsOf(rec arrow.RecordBatch) []string {
	var out []string
	for i := range int(rec.NumRows()) {
		var cells []string
		for _, c := range rec.Columns() {
			if f, ok := c.(*array.FixedSizeBinary); ok && f.IsValid(i) {
				cells = append(cells, hex.EncodeToString(f.Value(i)))
				continue
			}
			cells = append(cells, c.ValueStr(i))
		}
		out = append(out, strings.Join(cells, "|"))
	}
	return out
}

func TestJoin(t *testing.T) {
	tokens := [][]byte{addr(1), addr(9), addr(2), nil, addr(3), addr(1), addr(8)}
	a1, a2, a3 := hex.EncodeToString(addr(1)), hex.EncodeToString(addr(2)), hex.EncodeToString(addr(3))
	tests := []struct {
		name string
		join Join
		want []string
	}{
		{"inner drops the rows without a label and keeps the order", Inner, []string{
			"100|" + a1 + "||[0 0]|AAA|18",
			"102|" + a2 + "|(null)|[2 20]|BBB|6",
			"104|" + a3 + "|nnnn|[4 40]|CCC|0",
			"105|" + a1 + "|(null)|[5 50]|AAA|18",
		}},
		{"left keeps every row with nulls", Left, []string{
			"100|" + a1 + "||[0 0]|AAA|18",
			"101|" + hex.EncodeToString(addr(9)) + "|n|[1 10]|(null)|(null)",
			"102|" + a2 + "|(null)|[2 20]|BBB|6",
			"103|(null)|nnn|[3 30]|(null)|(null)",
			"104|" + a3 + "|nnnn|[4 40]|CCC|0",
			"105|" + a1 + "|(null)|[5 50]|AAA|18",
			"106|" + hex.EncodeToString(addr(8)) + "|nnnnnn|[6 60]|(null)|(null)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			set, err := Load([]Config{{File: writeCSV(t, tokensCSV), Key: "token", CSVKey: "address", Join: tt.join,
				Types: map[string]Type{"decimals": Int64}}})
			require.NoError(t, err)
			rec := transfers(t, mem, tokens)
			defer rec.Release()
			j, err := set.Bind(rec.Schema(), WithAllocator(mem))
			require.NoError(t, err)
			out, miss, err := j.Join(rec)
			require.NoError(t, err)
			defer out.Release()
			if tt.join == Inner {
				assert.Equal(t, Misses{Dropped: 3}, miss)
			} else {
				assert.Equal(t, Misses{Nulls: 3}, miss)
			}
			assert.True(t, out.Schema().Equal(j.Schema()))
			assert.Equal(t, []string{"_block_num", "token", "note", "topics", "symbol", "decimals"}, fieldNames(out.Schema()))
			sym, _ := out.Schema().FieldsByName("symbol")
			assert.Equal(t, tt.join == Left, sym[0].Nullable, "label columns are nullable for left joins only")
			dec, _ := out.Schema().FieldsByName("decimals")
			assert.Equal(t, arrow.PrimitiveTypes.Int64, dec[0].Type)
			got := rowsOf(out)
			// The list rendering differs across arrow versions; compare the
			// other cells.
			assert.Equal(t, normalise(tt.want), normalise(got))
		})
	}
}

func normalise(rows []string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		cells := strings.Split(r, "|")
		cells[3] = "list"
		out[i] = strings.Join(cells, "|")
	}
	return out
}

func fieldNames(s *arrow.Schema) []string {
	var out []string
	for _, f := range s.Fields() {
		out = append(out, f.Name)
	}
	return out
}

func TestJoinEverythingMatchesSharesColumns(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	set, err := Load([]Config{{File: writeCSV(t, tokensCSV), Key: "token", CSVKey: "address"}})
	require.NoError(t, err)
	rec := transfers(t, mem, [][]byte{addr(1), addr(2)})
	defer rec.Release()
	j, err := set.Bind(rec.Schema(), WithAllocator(mem))
	require.NoError(t, err)
	out, _, err := j.Join(rec)
	require.NoError(t, err)
	defer out.Release()
	assert.Same(t, rec.Column(1), out.Column(1), "no row dropped: the query's columns are reused, not copied")
	assert.Equal(t, "AAA", out.Column(4).ValueStr(0))
	assert.Equal(t, "18", out.Column(5).ValueStr(0), "an untyped column is a string")
}

func TestJoinNoRowMatches(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	set, err := Load([]Config{{File: writeCSV(t, tokensCSV), Key: "token", CSVKey: "address"}})
	require.NoError(t, err)
	rec := transfers(t, mem, [][]byte{addr(7), nil})
	defer rec.Release()
	j, err := set.Bind(rec.Schema(), WithAllocator(mem))
	require.NoError(t, err)
	out, _, err := j.Join(rec)
	require.NoError(t, err)
	defer out.Release()
	assert.Zero(t, out.NumRows())
	assert.True(t, out.Schema().Equal(j.Schema()))
}

func TestJoinSeveralFiles(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	risk := writeCSV(t, "block,risk,flag,raw\n100,low,true,0xAB\n102,high,false,0x\n104,mid,1,0x00ff\n")
	set, err := Load([]Config{
		{File: writeCSV(t, tokensCSV), Key: "token", CSVKey: "address", Columns: []string{"decimals", "symbol"}},
		{File: risk, Key: "_block_num", CSVKey: "block", Join: Left, Types: map[string]Type{"flag": Bool, "raw": Hex}},
	})
	require.NoError(t, err)
	rec := transfers(t, mem, [][]byte{addr(1), addr(1), addr(2), addr(5), addr(3)})
	defer rec.Release()
	j, err := set.Bind(rec.Schema(), WithAllocator(mem))
	require.NoError(t, err)
	out, _, err := j.Join(rec)
	require.NoError(t, err)
	defer out.Release()
	assert.Equal(t, []string{"_block_num", "token", "note", "topics", "decimals", "symbol", "risk", "flag", "raw"}, fieldNames(out.Schema()),
		"columns in the configured order, then the next file's")
	var got []string
	for i := range int(out.NumRows()) {
		got = append(got, strings.Join([]string{out.Column(0).ValueStr(i), out.Column(5).ValueStr(i), out.Column(6).ValueStr(i),
			out.Column(7).ValueStr(i), out.Column(8).ValueStr(i)}, "|"))
	}
	assert.Equal(t, []string{"100|AAA|low|true|qw==", "101|AAA|(null)|(null)|(null)", "102|BBB|high|false|", "104|CCC|mid|true|AP8="}, got)
}

func TestJoinIntegerAndStringKeys(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{{Name: "n", Type: arrow.PrimitiveTypes.Int32}, {Name: "s", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(mem, schema)
	b.Field(0).(*array.Int32Builder).AppendValues([]int32{-5, 7, 8}, nil)
	b.Field(1).(*array.StringBuilder).AppendValues([]string{"x", "Y", "y"}, nil)
	rec := b.NewRecordBatch()
	b.Release()
	defer rec.Release()
	set, err := Load([]Config{
		{File: writeCSV(t, "n,a\n-5,minus five\n8,eight\n"), Key: "n", Join: Left},
		{File: writeCSV(t, "s,b\ny,lower\n"), Key: "s", Join: Left},
	})
	require.NoError(t, err)
	j, err := set.Bind(schema, WithAllocator(mem))
	require.NoError(t, err)
	out, _, err := j.Join(rec)
	require.NoError(t, err)
	defer out.Release()
	assert.Equal(t, []string{"-5|x|minus five|(null)", "7|Y|(null)|(null)", "8|y|eight|lower"}, rowsOf(out),
		"integers match by value, strings exactly")
}

func TestJoinRefusesAChangedSchema(t *testing.T) {
	set, err := Load([]Config{{File: writeCSV(t, tokensCSV), Key: "token", CSVKey: "address"}})
	require.NoError(t, err)
	rec := transfers(t, memory.DefaultAllocator, [][]byte{addr(1)})
	defer rec.Release()
	other := arrow.NewSchema(append(rec.Schema().Fields(), arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Int8}), nil)
	j, err := set.Bind(other)
	require.NoError(t, err)
	_, _, err = j.Join(rec)
	require.ErrorIs(t, err, ErrSchemaChanged)
}

func TestNilSetJoinsNothing(t *testing.T) {
	set, err := Load(nil)
	require.NoError(t, err)
	require.Nil(t, set)
	j, err := set.Bind(arrow.NewSchema(nil, nil))
	require.NoError(t, err)
	rec := transfers(t, memory.DefaultAllocator, [][]byte{addr(1)})
	defer rec.Release()
	out, _, err := j.Join(rec)
	require.NoError(t, err)
	defer out.Release()
	assert.Same(t, rec, out)
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name        string
		csv         string
		cfg         Config
		errContains []string
	}{
		{"missing file", "", Config{File: "/nonexistent/tokens.csv", Key: "token"}, []string{"/nonexistent/tokens.csv", "no such file"}},
		{"empty file", "", Config{Key: "token"}, []string{"is empty", "header"}},
		{"no key column", tokensCSV, Config{Key: "token"}, []string{`no key column "token"`, "address,symbol,decimals", "csv_key"}},
		{"duplicate key", tokensCSV + "0x0101010101010101010101010101010101010101,AAB,18\n", Config{Key: "token", CSVKey: "address"},
			[]string{"line 5", `column "address"`, "also on line 2"}},
		{"empty key", "address,symbol\n,AAA\n", Config{Key: "token", CSVKey: "address"}, []string{"line 2", "key is empty"}},
		{"bad int", "address,decimals\n0x01,eighteen\n", Config{Key: "token", CSVKey: "address", Types: map[string]Type{"decimals": Int64}},
			[]string{"tokens.csv line 2", `column "decimals"`, `"eighteen"`, "int64"}},
		{"bad hex value", "address,raw\n0x01,0xZZ\n", Config{Key: "token", CSVKey: "address", Types: map[string]Type{"raw": Hex}},
			[]string{"line 2", `column "raw"`, "not a hex digit"}},
		{"short hexN value", "address,owner\n0x01,0x1234\n", Config{Key: "token", CSVKey: "address", Types: map[string]Type{"owner": "hex20"}},
			[]string{"line 2", `column "owner"`, "has 4 hex digits", "40 hex digits"}},
		{"ragged line", "address,symbol\n0x01,A,extra\n", Config{Key: "token", CSVKey: "address"}, []string{"line 2", "wrong number of fields"}},
		{"unknown column", tokensCSV, Config{Key: "token", CSVKey: "address", Columns: []string{"name"}}, []string{`no column "name"`}},
		{"unknown type", tokensCSV, Config{Key: "token", CSVKey: "address", Types: map[string]Type{"decimals": "uint8"}},
			[]string{`"uint8"`, "want string, int64"}},
		{"type for a column not in the file", tokensCSV, Config{Key: "token", CSVKey: "address", Types: map[string]Type{"price": Float64}},
			[]string{`types names column "price"`}},
		{"bad join", tokensCSV, Config{Key: "token", Join: "outer"}, []string{`join "outer"`, "inner or left"}},
		{"nothing to add", "address\n0x01\n", Config{Key: "token", CSVKey: "address"}, []string{"no column besides its key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.File == "" {
				tt.cfg.File = writeCSV(t, tt.csv)
			}
			_, err := Load([]Config{tt.cfg})
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestBindErrors(t *testing.T) {
	rec := transfers(t, memory.DefaultAllocator, nil)
	defer rec.Release()
	tests := []struct {
		name        string
		csv         string
		cfg         Config
		errContains []string
	}{
		{"key not in the query", tokensCSV, Config{Key: "contract", CSVKey: "address"},
			[]string{`key "contract"`, "has no column", "_block_num, token, note, topics"}},
		{"key of a type that cannot be joined", "topics,x\n1,a\n", Config{Key: "topics"}, []string{"cannot join", "list"}},
		{"address of the wrong length", "address,symbol\n0x0102,A\n", Config{Key: "token", CSVKey: "address"},
			[]string{"line 2", `column "address"`, "has 4 hex digits", "40 hex digits (20 bytes)", `"token"`}},
		{"address without 0x", "address,symbol\n" + strings.Repeat("ab", 20) + ",A\n", Config{Key: "token", CSVKey: "address"},
			[]string{"line 2", "want 0x followed by 40 hex digits"}},
		{"the same address in two cases", "address,symbol\n" + addrHex(1, false) + ",A\n" + addrHex(1, true) + ",B\n",
			Config{Key: "token", CSVKey: "address"}, []string{"line 3", "same key as line 2"}},
		{"a label column named like a query column", "address,note\n" + addrHex(1, false) + ",A\n", Config{Key: "token", CSVKey: "address"},
			[]string{`adds column "note"`, "already a column of the query"}},
		{"integer key out of range", "_block_num,x\n-1,a\n", Config{Key: "_block_num"}, []string{"line 2", "non-negative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.File = writeCSV(t, tt.csv)
			set, err := Load([]Config{tt.cfg})
			require.NoError(t, err)
			_, err = set.Bind(rec.Schema())
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	t.Run("two files adding one column", func(t *testing.T) {
		f := writeCSV(t, tokensCSV)
		set, err := Load([]Config{{File: f, Key: "token", CSVKey: "address"}, {File: f, Key: "token", CSVKey: "address", Columns: []string{"symbol"}}})
		require.NoError(t, err)
		_, err = set.Bind(rec.Schema())
		require.ErrorIs(t, err, ErrInvalid)
		assert.Contains(t, err.Error(), `adds column "symbol", which is already a column of label file`)
	})
}
