package ampsim

import (
	"github.com/apache/arrow-go/v18/arrow/array"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkStreamTransactions measures how fast the simulator serves a
// catch-up of mainnet-density transactions (171 tx/block, all 27 columns)
// to a Go Flight client: rows/s is reported.
func BenchmarkStreamTransactions(b *testing.B) {
	const blocks = 200
	cfg := Config{NetworkConfig: NetworkConfig{InitialBlocks: blocks}, KeepAlive: KeepAliveOff}
	s, err := New(cfg)
	require.NoError(b, err)
	require.NoError(b, s.Start(b.Context()))
	defer s.Close()
	c := dialB(b, s)
	want, err := s.Primary().ExpectedRows(TableTransactions, 0, blocks-1)
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	rows := 0
	for range b.N {
		info, err := c.info(b.Context(), txSQL)
		require.NoError(b, err)
		st, err := c.doGet(b.Context(), info)
		require.NoError(b, err)
		bs, err := st.readAll()
		require.NoError(b, err)
		n := 0
		for _, x := range bs {
			n += x.rows
		}
		require.Equal(b, want, n)
		rows += n
		st.close()
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// FuzzParseSQL checks that the SQL parser never panics and that whatever it
// accepts plans or fails with a clear error, never a panic.
func FuzzParseSQL(f *testing.F) {
	for _, s := range []string{
		txSQL, streamTx, `SELECT a, "b" FROM x.y WHERE (a >= 1 AND NOT b IS NULL) OR c IN (1, 2) SETTINGS stream = true`,
		`SELECT * FROM (SELECT * FROM eth_rpc.logs) AS amp_partition WHERE amp_partition._block_num >= 1 AND amp_partition._block_num < 5`,
		`SELECT COUNT(*) FROM eth_rpc.blocks LIMIT 3`, `select x'00' from "a/b@1".c -- x`, "/* */", "'", `"`,
	} {
		f.Add(s)
	}
	s, err := New(Config{NetworkConfig: NetworkConfig{InitialBlocks: 1}})
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, sql string) {
		if _, err := parseSQL(sql); err != nil {
			return
		}
		_, _ = s.planSQL(sql)
	})
}

// BenchmarkGenerate measures synthetic row generation straight into Arrow
// builders (the no-filter fast path) alone, without gRPC: ns/op is per row.
func BenchmarkGenerate(b *testing.B) {
	for _, table := range []string{TableTransactions, TableLogs} {
		b.Run(table, func(b *testing.B) {
			s, err := New(Config{NetworkConfig: NetworkConfig{InitialBlocks: 50}})
			require.NoError(b, err)
			p, err := s.planSQL("SELECT * FROM eth_rpc." + table)
			require.NoError(b, err)
			chain := s.Primary()
			blocks := chain.blocks(0, 49)
			br := p.rel.branches[0]
			bb := newBatchBuilder(s.cfg.Allocator, p.schema, 0)
			defer bb.release()
			bs := make([]array.Builder, len(br.cols))
			for i, c := range br.cols {
				bs[c] = bb.b.Field(i)
			}
			rows := 0
			sk := &builderSink{bs: bs, onRow: func() { rows++ }}
			b.ReportAllocs()
			b.ResetTimer()
			for rows < b.N {
				for _, blk := range blocks {
					br.table.gen(chain.sy, chain.cfg, blk, sk)
					bb.flush().Release()
				}
			}
		})
	}
}
