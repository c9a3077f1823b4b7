package ampsim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
)

// batchQuery runs a batch query and returns the total rows and the kept
// record batches (released at test end).
func batchQuery(t *testing.T, c *testClient, sql string) (int, []arrow.RecordBatch, *arrow.Schema) {
	t.Helper()
	ctx := testCtx(t)
	info, err := c.info(ctx, sql)
	require.NoError(t, err, sql)
	sc, err := flight.DeserializeSchema(info.Schema, c.mem)
	require.NoError(t, err)
	st, err := c.doGet(ctx, info)
	require.NoError(t, err)
	st.keep = true
	bs, err := st.readAll()
	require.NoError(t, err, sql)
	rows := 0
	var recs []arrow.RecordBatch
	for _, b := range bs {
		rows += b.rows
		if b.rows > 0 {
			recs = append(recs, b.rec)
		}
	}
	return rows, recs, sc
}

func TestSQLFilters(t *testing.T) {
	s := startServer(t, smallConfig(6))
	c := dial(t, s)
	chain := s.Primary()
	all, err := chain.ExpectedRows("transactions", 0, 5)
	require.NoError(t, err)
	mid, err := chain.ExpectedRows("transactions", 2, 3)
	require.NoError(t, err)
	logs, err := chain.ExpectedRows("logs", 0, 5)
	require.NoError(t, err)
	after2, err := chain.ExpectedRows("transactions", 3, 5)
	require.NoError(t, err)
	h3 := hashOf(t, s, 3)
	tests := []struct {
		name string
		sql  string
		want int
	}{
		{"star", `SELECT * FROM eth_rpc.transactions`, all},
		{"range", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num >= 2 AND block_num <= 3`, mid},
		{"reserved column", `SELECT tx_hash FROM eth_rpc.transactions WHERE _block_num > 1 AND _block_num < 4`, mid},
		{"between", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num BETWEEN 2 AND 3`, mid},
		{"not between", `SELECT tx_hash FROM eth_rpc.transactions WHERE NOT (block_num NOT BETWEEN 2 AND 3)`, mid},
		{"in", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num IN (2, 3)`, mid},
		{"or covers all", `SELECT tx_hash FROM eth_rpc.transactions WHERE type = 2 OR type != 2`, all},
		{"<> excludes", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num <> block_num`, 0},
		{"first tx of every block", `SELECT tx_hash FROM eth_rpc.transactions WHERE tx_index = 0`, 6},
		{"quoted column", `SELECT "from", "to" FROM eth_rpc.transactions WHERE "to" IS NULL OR "to" IS NOT NULL`, all},
		{"binary hex literal", fmt.Sprintf(`SELECT hash FROM eth_rpc.blocks WHERE hash = X'%s'`, h3.String()[2:]), 1},
		{"binary 0x string", fmt.Sprintf(`SELECT hash FROM eth_rpc.blocks WHERE hash = '%s'`, h3), 1},
		{"timestamp", `SELECT block_num FROM eth_rpc.blocks WHERE timestamp >= '2025-12-01T00:00:36Z'`, 3},
		{"bool", `SELECT block_num FROM eth_rpc.transactions WHERE status = true OR NOT status`, all},
		{"null comparison is never true", `SELECT block_num FROM eth_rpc.logs WHERE topic3 = topic3 OR topic3 IS NULL`, logs},
		{"qualified with alias", `SELECT t.tx_hash FROM eth_rpc.transactions AS t WHERE t.block_num >= 2 AND t.block_num < 4`, mid},
		{"namespace form", `SELECT tx_hash FROM "edgeandnode/eth_rpc".transactions WHERE block_num >= 2 AND block_num <= 3`, mid},
		{"versioned namespace form", `SELECT tx_hash FROM "edgeandnode/eth_rpc@1.0.0".transactions WHERE block_num IN (2,3)`, mid},
		{"backfill wrapper", `SELECT * FROM (SELECT block_num, tx_hash FROM eth_rpc.transactions WHERE type >= 0) AS amp_partition WHERE amp_partition.block_num >= 2 AND amp_partition.block_num < 4`, mid},
		{"backfill wrapper on renamed column", `SELECT * FROM (SELECT block_num AS bn, tx_hash FROM eth_rpc.transactions) AS amp_partition WHERE amp_partition.bn >= 2 AND amp_partition.bn < 4`, mid},
		{"negative upper bound prunes everything", `SELECT tx_hash FROM eth_rpc.transactions WHERE _block_num < 0`, 0},
		{"empty span", `SELECT * FROM (SELECT * FROM eth_rpc.transactions) AS amp_partition WHERE amp_partition._block_num >= 3 AND amp_partition._block_num < 3`, 0},
		{"literal on the left", `SELECT tx_hash FROM eth_rpc.transactions WHERE 2 <= block_num AND 3 >= block_num`, mid},
		{"equality or equality (not pruned)", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num = 2 OR block_num = 3`, mid},
		{"bound and another filter", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num >= 2 AND tx_index >= 0 AND block_num < 4`, mid},
		{"bounds at the edge of int64", `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num > 2 AND block_num < 9223372036854775807`, after2},
		{"comments and semicolon", "-- c\nSELECT /* x */ tx_hash FROM eth_rpc.transactions WHERE block_num IN (2,3);", mid},
		{"uppercase keywords and columns", `SELECT TX_HASH FROM ETH_RPC.TRANSACTIONS WHERE BLOCK_NUM IN (2, 3)`, mid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, _, _ := batchQuery(t, c, tt.sql)
			assert.Equal(t, tt.want, rows, tt.sql)
		})
	}
}

func TestSQLProjectionSchema(t *testing.T) {
	s := startServer(t, smallConfig(2))
	c := dial(t, s)
	_, recs, sc := batchQuery(t, c, `SELECT block_num AS bn, "from", access_list, value v FROM eth_rpc.transactions`)
	require.Equal(t, 4, sc.NumFields())
	assert.Equal(t, []string{"bn", "from", "access_list", "v"}, fieldNames(sc))
	assert.Equal(t, arrow.PrimitiveTypes.Uint64, sc.Field(0).Type)
	assert.Equal(t, "fixed_size_binary[20]", sc.Field(1).Type.String())
	assert.True(t, sc.Field(2).Nullable)
	require.NotEmpty(t, recs)
	assert.True(t, recs[0].Schema().Equal(sc), "batches carry the FlightInfo schema")
	_, _, sc = batchQuery(t, c, `SELECT * FROM eth_rpc.blocks`)
	assert.True(t, sc.Equal(blocksSchema()))
	_, _, sc = batchQuery(t, c, `SELECT * FROM eth_rpc.logs`)
	assert.True(t, sc.Equal(logsSchema()))
}

func fieldNames(sc *arrow.Schema) []string {
	var out []string
	for _, f := range sc.Fields() {
		out = append(out, f.Name)
	}
	return out
}

func TestSQLErrors(t *testing.T) {
	s := startServer(t, smallConfig(1))
	c := dial(t, s)
	tests := []struct{ sql, contains string }{
		{`SELECT * FROM eth_rpc.blocks a JOIN eth_rpc.logs b ON a.block_num = b.block_num`, "JOIN is not supported"},
		{`SELECT * FROM eth_rpc.blocks, eth_rpc.logs`, "comma join"},
		{`SELECT * FROM eth_rpc.blocks WHERE hash LIKE 'x%'`, "LIKE"},
		{`SELECT * FROM eth_rpc.blocks WHERE lower(extra_data) = 'x'`, "function lower() in WHERE"},
		{`SELECT nope FROM eth_rpc.blocks`, `column "nope" not found`},
		{`SELECT block_num FROM eth_rpc.blocks WHERE hash = 5`, "cannot compare column hash"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE block_num = 'x'`, "cannot compare column block_num"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE hash = 'abc'`, "X'…' or '0x…'"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE block_num = 1.5`, "not an integer"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE x.block_num = 1`, `unknown table or alias "x"`},
		{`SELECT block_num + 1 FROM eth_rpc.blocks`, "operator +"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE`, "expected an expression"},
		{`SELECT block_num FROM eth_rpc.blocks WHERE block_num`, "boolean"},
		{`SELECT block_num FROM eth_rpc.blocks UNION SELECT block_num FROM eth_rpc.blocks`, "UNION ALL"},
		{`SELECT block_num FROM eth_rpc.blocks UNION ALL SELECT hash FROM eth_rpc.blocks`, "UNION ALL column 1"},
		{`WITH x AS (SELECT 1) SELECT * FROM x`, "WITH"},
		{`INSERT INTO eth_rpc.blocks VALUES (1)`, "only SELECT"},
		{`SELECT 'unterminated FROM eth_rpc.blocks`, "unterminated"},
		{`SELECT * FROM other.blocks`, `dataset "other" not found`},
		{`SELECT * FROM eth_rpc.blocks LIMIT x`, "LIMIT"},
		{`SELECT * FROM eth_rpc.blocks ORDER BY block_num`, "ORDER BY is not supported by the simulator in batch queries"},
		{`SELECT miner FROM eth_rpc.blocks GROUP BY miner`, "GROUP BY is not supported by the simulator in batch queries"},
		{`SELECT DISTINCT block_num FROM eth_rpc.blocks UNION ALL SELECT block_num FROM eth_rpc.blocks`, "DISTINCT in a UNION ALL branch"},
		{`SELECT * FROM (SELECT block_num FROM eth_rpc.blocks SETTINGS stream = true) AS p`, "expected ')'"},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			_, err := c.info(testCtx(t), tt.sql)
			requireCode(t, err, codes.InvalidArgument, tt.contains)
		})
	}
}

func TestParseSettings(t *testing.T) {
	tests := []struct {
		sql    string
		stream bool
	}{
		{`SELECT * FROM eth_rpc.blocks SETTINGS stream = true`, true},
		{`SELECT * FROM eth_rpc.blocks SETTINGS STREAM = True;`, true},
		{`SELECT * FROM eth_rpc.blocks SETTINGS foo = 1, stream = true`, true},
		{`SELECT * FROM eth_rpc.blocks SETTINGS stream = 1`, false},
		{`SELECT * FROM eth_rpc.blocks SETTINGS stream = false`, false},
		{`SELECT * FROM eth_rpc.blocks SETTINGS stream = 'true'`, false},
		{`SELECT * FROM eth_rpc.blocks WHERE extra_data = X'00' -- SETTINGS stream = true`, false},
		{`SELECT * FROM eth_rpc.blocks`, false},
	}
	for _, tt := range tests {
		t.Run(tt.sql, func(t *testing.T) {
			q, err := parseSQL(tt.sql)
			require.NoError(t, err)
			assert.Equal(t, tt.stream, q.streamSetting)
		})
	}
}

func TestSQLDataDiffersPerFork(t *testing.T) {
	s := startServer(t, smallConfig(3))
	c := dial(t, s)
	hashes := func() []string {
		_, recs, _ := batchQuery(t, c, `SELECT tx_hash FROM eth_rpc.transactions WHERE block_num = 2`)
		var out []string
		for _, r := range recs {
			col := r.Column(0).(*array.FixedSizeBinary)
			for i := range col.Len() {
				out = append(out, fmt.Sprintf("%x", col.Value(i)))
			}
		}
		return out
	}
	before := hashes()
	require.NotEmpty(t, before)
	require.NoError(t, s.Reorg(1, 1))
	after := hashes()
	require.NotEmpty(t, after)
	assert.NotEqual(t, strings.Join(before, ","), strings.Join(after, ","), "a reorged block has different rows")
}

// TestFastPathMatchesRowPath checks that the builder fast path (no filter)
// and the row path (filter) produce identical batches for every table.
func TestFastPathMatchesRowPath(t *testing.T) {
	cfg := smallConfig(8)
	cfg.TxPerBlock = 40
	s := startServer(t, cfg)
	c := dial(t, s)
	for _, table := range []string{TableBlocks, TableTransactions, TableLogs} {
		t.Run(table, func(t *testing.T) {
			_, fastRecs, _ := batchQuery(t, c, `SELECT * FROM eth_rpc.`+table)
			_, rowRecs, _ := batchQuery(t, c, `SELECT * FROM eth_rpc.`+table+` WHERE block_num >= 0`)
			require.NotEmpty(t, fastRecs)
			require.NotEmpty(t, rowRecs)
			fast := array.NewTableFromRecords(fastRecs[0].Schema(), fastRecs)
			defer fast.Release()
			slow := array.NewTableFromRecords(rowRecs[0].Schema(), rowRecs)
			defer slow.Release()
			require.Positive(t, fast.NumRows())
			assert.True(t, array.TableEqual(fast, slow), "fast and row paths differ for %s", table)
		})
	}
}

// TestSQLLimitInsidePartitionWrapper: the backfill's partition wrapper
// around a query with LIMIT is evaluated as SQL says: the LIMIT keeps its
// rows from every synced block first, then the wrapper's WHERE filters
// them, so the partitions' results are the LIMIT's rows of their blocks
// (not LIMIT rows per partition, the seed's split-aggregate bug).
func TestSQLLimitInsidePartitionWrapper(t *testing.T) {
	s := startServer(t, smallConfig(6)) // 6 blocks of 4 transactions each
	c := dial(t, s)
	inner := `SELECT _block_num, tx_index FROM eth_rpc.transactions LIMIT 10`
	whole, _, _ := batchQuery(t, c, inner)
	require.Equal(t, 10, whole)
	wrap := func(a, b int) string {
		return fmt.Sprintf("SELECT * FROM (\n%s\n) AS amp_partition WHERE amp_partition._block_num >= %d AND amp_partition._block_num < %d", inner, a, b)
	}
	// kept[b] is how many of the LIMIT's rows are in block b.
	kept, left := map[int]int{}, 10
	for b := range 6 {
		n, err := s.Primary().ExpectedRows("transactions", uint64(b), uint64(b))
		require.NoError(t, err)
		kept[b] = min(n, left)
		left -= kept[b]
	}
	require.Positive(t, kept[0])
	require.Zero(t, kept[5], "the LIMIT ends before the last block")
	total := 0
	for _, p := range [][2]int{{0, 2}, {2, 4}, {4, 6}} {
		n, _, _ := batchQuery(t, c, wrap(p[0], p[1]))
		want := 0
		for b := p[0]; b < p[1]; b++ {
			want += kept[b]
		}
		assert.Equal(t, want, n, "partition [%d, %d) holds the LIMIT's rows of its blocks", p[0], p[1])
		total += n
	}
	assert.Equal(t, 10, total, "the partitions together hold exactly the LIMIT's rows")
	n, _, _ := batchQuery(t, c, wrap(5, 6))
	assert.Zero(t, n, "the LIMIT keeps no row of block 5")

	_, err := c.info(testCtx(t), "SELECT _block_num FROM (SELECT _block_num FROM eth_rpc.transactions LIMIT 3) AS p")
	requireCode(t, err, codes.InvalidArgument, "only SELECT * … WHERE …")
	_, err = c.info(testCtx(t), "SELECT * FROM (SELECT COUNT(*) AS n FROM eth_rpc.transactions) AS p")
	requireCode(t, err, codes.InvalidArgument, "COUNT inside a subquery")
}

// TestSQLDistinct: SELECT DISTINCT drops repeated rows, also inside the
// backfill's partition wrapper (whose WHERE on an output column may filter
// before the DISTINCT: the rows left are the same).
func TestSQLDistinct(t *testing.T) {
	s := startServer(t, smallConfig(6))
	c := dial(t, s)
	all, _, _ := batchQuery(t, c, `SELECT _block_num FROM eth_rpc.transactions`)
	blocks, _, _ := batchQuery(t, c, `SELECT DISTINCT _block_num FROM eth_rpc.transactions`)
	require.Greater(t, all, blocks, "blocks with several transactions")
	assert.Equal(t, 6, blocks, "one row per block")
	n, _, _ := batchQuery(t, c, `SELECT * FROM (SELECT DISTINCT _block_num FROM eth_rpc.transactions) AS p WHERE p._block_num >= 2 AND p._block_num < 4`)
	assert.Equal(t, 2, n)
	n, _, _ = batchQuery(t, c, `SELECT DISTINCT _block_num, tx_index FROM eth_rpc.transactions`)
	assert.Equal(t, all, n, "(block, index) pairs are unique")
	n, _, _ = batchQuery(t, c, `SELECT DISTINCT _block_num FROM eth_rpc.transactions LIMIT 4`)
	assert.Equal(t, 4, n, "the LIMIT counts distinct rows")
}
