package ampsim

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestIntegrationPyArrowReader runs testdata/pyarrow_check.py, an
// independent pyarrow.flight reader, against the simulator: a batch query on
// each table and two streaming queries (from the start, and resumed with a
// cursor), checking schemas, every batch's app_metadata and the row counts.
func TestIntegrationPyArrowReader(t *testing.T) {
	python := testenv.Python(t)
	cfg := smallConfig(35)
	cfg.MaxMicrobatchBlocks = 10
	s := startServer(t, cfg)
	chain := s.Primary()
	head, _ := s.Head()

	type mbExp struct {
		Start    uint64     `json:"start"`
		End      uint64     `json:"end"`
		Hash     reorg.Hash `json:"hash"`
		PrevHash reorg.Hash `json:"prev_hash"`
		Rows     int        `json:"rows"`
	}
	type caseExp struct {
		SQL          string             `json:"sql"`
		Table        string             `json:"table"`
		Headers      map[string]string  `json:"headers,omitempty"`
		Rows         int                `json:"rows,omitempty"`
		Ranges       []reorg.BlockRange `json:"ranges,omitempty"`
		Microbatches []mbExp            `json:"microbatches,omitempty"`
	}
	full, err := chain.Range(0, head)
	require.NoError(t, err)
	var exp struct {
		Batch  []caseExp `json:"batch"`
		Stream []caseExp `json:"stream"`
	}
	for _, table := range []string{TableBlocks, TableTransactions, TableLogs} {
		n, err := chain.ExpectedRows(table, 0, head)
		require.NoError(t, err)
		exp.Batch = append(exp.Batch, caseExp{SQL: "SELECT * FROM eth_rpc." + table, Table: table, Rows: n, Ranges: []reorg.BlockRange{full}})
	}
	mbs := func(table string, from uint64) []mbExp {
		var out []mbExp
		for start := from; start <= head; start += 10 {
			end := min(start+9, head)
			r, err := chain.Range(start, end)
			require.NoError(t, err)
			n, err := chain.ExpectedRows(table, start, end)
			require.NoError(t, err)
			out = append(out, mbExp{Start: start, End: end, Hash: r.Hash, PrevHash: r.PrevHash, Rows: n})
		}
		return out
	}
	exp.Stream = append(exp.Stream, caseExp{
		SQL: "SELECT * FROM eth_rpc.transactions", Table: TableTransactions,
		Headers: map[string]string{"amp-stream": "true"}, Microbatches: mbs(TableTransactions, 0),
	})
	cur, err := chain.Cursor(4)
	require.NoError(t, err)
	hdr, err := cur.Header()
	require.NoError(t, err)
	exp.Stream = append(exp.Stream, caseExp{
		SQL: `SELECT * FROM "edgeandnode/eth_rpc".logs SETTINGS stream = true`, Table: TableLogs,
		Headers: map[string]string{"amp-resume": hdr}, Microbatches: mbs(TableLogs, 5),
	})
	arg, err := json.Marshal(exp)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "testdata/pyarrow_check.py", s.Addr(), string(arg)).CombinedOutput()
	require.NoError(t, err, "pyarrow_check.py:\n%s", out)
	t.Logf("%s", out)
	require.Contains(t, string(out), "OK pyarrow")
}

// TestIntegrationPyArrowReaderDetectsMismatch proves the independent reader
// can fail: a wrong row count and a malformed app_metadata (scripted) are
// both reported.
func TestIntegrationPyArrowReaderDetectsMismatch(t *testing.T) {
	python := testenv.Python(t)
	s := startServer(t, smallConfig(3))
	full, err := s.Primary().Range(0, 2)
	require.NoError(t, err)
	n, err := s.Primary().ExpectedRows(TableBlocks, 0, 2)
	require.NoError(t, err)
	run := func(rows int) (string, error) {
		arg, err := json.Marshal(map[string]any{"batch": []map[string]any{{
			"sql": "SELECT * FROM eth_rpc.blocks", "table": "blocks", "rows": rows, "ranges": []reorg.BlockRange{full},
		}}})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, python, "testdata/pyarrow_check.py", s.Addr(), string(arg)).CombinedOutput()
		return string(out), err
	}
	out, err := run(n + 1)
	require.Error(t, err, "a wrong row count fails: %s", out)
	require.Contains(t, out, "FAIL")
	require.Contains(t, out, "rows, want")

	s.EnqueueScript(Script{Batches: []ScriptedBatch{{AppMetadata: []byte(`{"ranges":[]}`)}}})
	out, err = run(n)
	require.Error(t, err, "a batch without ranges_complete fails: %s", out)
	require.Contains(t, out, "app_metadata keys")
}
