package ampsim

import (
	"errors"
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replayConfig is a replay-mode chain small enough that batches wrap
// around the templates many times, with a reorg so that the fork changes
// inside a batch.
func replayConfig(t *testing.T) *Server {
	t.Helper()
	cfg := smallConfig(30)
	cfg.ReplayBlocks = 3
	cfg.BatchRows = 7
	s := startServer(t, cfg)
	require.NoError(t, s.Reorg(4, 6))
	return s
}

// readKept runs sql (batch or streaming, until the microbatch of the head
// is complete) and returns its non-empty record batches, retained until the
// test ends.
func readKept(t *testing.T, s *Server, sql string) []arrow.RecordBatch {
	t.Helper()
	c := dial(t, s)
	info, err := c.info(testCtx(t), sql)
	require.NoError(t, err)
	st, err := c.doGet(testCtx(t), info)
	require.NoError(t, err)
	st.keep = true
	head, _ := s.Head()
	var out []arrow.RecordBatch
	for {
		b, err := st.next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "reading %s", sql)
		if b.rows > 0 {
			out = append(out, b.rec)
		}
		if b.complete && len(b.ranges) == 1 && b.ranges[0].End == head {
			break
		}
	}
	return out
}

func concatRecords(t *testing.T, recs []arrow.RecordBatch) arrow.RecordBatch {
	t.Helper()
	require.NotEmpty(t, recs)
	cols := make([]arrow.Array, recs[0].NumCols())
	n := int64(0)
	for _, r := range recs {
		n += r.NumRows()
	}
	for c := range cols {
		parts := make([]arrow.Array, len(recs))
		for i, r := range recs {
			parts[i] = r.Column(c)
		}
		a, err := array.Concatenate(parts, memory.NewGoAllocator())
		require.NoError(t, err)
		cols[c] = a
	}
	rec := array.NewRecordBatch(recs[0].Schema(), cols, n)
	for _, a := range cols {
		a.Release()
	}
	t.Cleanup(rec.Release)
	return rec
}

// TestReplaySlicesEqualRows checks that in replay mode the zero-copy slice
// path (unfiltered scans) sends exactly the batches of the row path
// (filtered scans that keep every row), for both tables, with and without
// _block_num, and that row counts match ExpectedRows.
func TestReplaySlicesEqualRows(t *testing.T) {
	s := replayConfig(t)
	head, _ := s.Head()
	const txCols = `block_num, block_hash, "timestamp", tx_index, tx_hash, "from", "to", nonce, value, gas_price, gas_limit, gas_used, input, type, status`
	tests := []struct {
		name, fast, slow, table string
	}{
		{"transactions all columns", "SELECT * FROM eth_rpc.transactions",
			"SELECT * FROM eth_rpc.transactions WHERE tx_index >= 0", TableTransactions},
		{"transactions 15 columns", "SELECT " + txCols + " FROM eth_rpc.transactions",
			"SELECT " + txCols + " FROM eth_rpc.transactions WHERE tx_index >= 0", TableTransactions},
		{"transactions block bounded", "SELECT * FROM eth_rpc.transactions WHERE _block_num >= 5 AND _block_num < 27",
			"SELECT * FROM eth_rpc.transactions WHERE _block_num >= 5 AND _block_num < 27 AND tx_index >= 0", TableTransactions},
		{"logs", "SELECT * FROM eth_rpc.logs", "SELECT * FROM eth_rpc.logs WHERE log_index >= 0", TableLogs},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fast := readKept(t, s, tc.fast)
			slow := readKept(t, s, tc.slow)
			require.NotEmpty(t, slow, "the query returned rows")
			require.Len(t, fast, len(slow), "same batch boundaries")
			for i := range fast {
				require.True(t, array.RecordEqual(fast[i], slow[i]), "batch %d differs:\n%v\n%v", i, fast[i], slow[i])
			}
		})
	}
	t.Run("streaming with _block_num equals batch", func(t *testing.T) {
		all := concatRecords(t, readKept(t, s, "SELECT * FROM eth_rpc.transactions"))
		want, err := s.Primary().ExpectedRows(TableTransactions, 0, head)
		require.NoError(t, err)
		require.EqualValues(t, want, all.NumRows())
		off := int64(0)
		for _, r := range readKept(t, s, "SELECT * FROM eth_rpc.transactions SETTINGS stream = true") {
			sl := all.NewSlice(off, off+r.NumRows())
			assert.True(t, array.RecordEqual(r, sl), "streaming batch at row %d", off)
			sl.Release()
			off += r.NumRows()
		}
		require.Equal(t, all.NumRows(), off)
	})
	t.Run("tx_hash unique and logs join transactions", func(t *testing.T) {
		txs := concatRecords(t, readKept(t, s, "SELECT tx_hash FROM eth_rpc.transactions"))
		seen := map[string]bool{}
		col := txs.Column(0).(*array.FixedSizeBinary)
		for i := range col.Len() {
			h := string(col.Value(i))
			require.False(t, seen[h], "tx_hash of row %d repeats", i)
			seen[h] = true
		}
		logs := concatRecords(t, readKept(t, s, "SELECT tx_hash FROM eth_rpc.logs"))
		lc := logs.Column(0).(*array.FixedSizeBinary)
		for i := range lc.Len() {
			require.True(t, seen[string(lc.Value(i))], "log row %d has the tx_hash of a transaction", i)
		}
	})
}

// TestReplayCountAndLimit checks COUNT(*) and LIMIT in replay mode.
func TestReplayCountAndLimit(t *testing.T) {
	s := replayConfig(t)
	head, _ := s.Head()
	want, err := s.Primary().ExpectedRows(TableLogs, 0, head)
	require.NoError(t, err)
	recs := readKept(t, s, "SELECT COUNT(*) FROM eth_rpc.logs")
	require.Len(t, recs, 1)
	assert.EqualValues(t, want, recs[0].Column(0).(*array.Int64).Value(0))
	n := int64(0)
	for _, r := range readKept(t, s, "SELECT * FROM eth_rpc.logs LIMIT 10") {
		n += r.NumRows()
	}
	assert.EqualValues(t, 10, n)
}

func TestReplayConfigValidate(t *testing.T) {
	_, err := New(Config{ReplayBlocks: -1})
	require.ErrorContains(t, err, "ReplayBlocks")
}
