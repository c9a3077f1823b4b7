package source

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitHazards(t *testing.T) {
	tests := []struct {
		name string
		sql  string
		want []string
	}{
		{"rows of one block each", `SELECT _block_num, tx_hash FROM eth.transactions WHERE "to" IS NOT NULL ORDER BY _block_num`, nil},
		{"count", `SELECT COUNT(*) AS n FROM eth.transactions`, []string{"COUNT(…)"}},
		{"max and count", `SELECT MAX(_block_num) AS _block_num, count(*) FROM eth.transactions`, []string{"MAX(…)", "COUNT(…)"}},
		{"grouped by a non-block column", `SELECT "to", COUNT(*) AS n FROM eth.transactions GROUP BY "to"`, []string{`GROUP BY "to"`}},
		{"grouped by the block column", `SELECT _block_num, "to", COUNT(*) AS n FROM eth.transactions GROUP BY _block_num, "to" ORDER BY n`, nil},
		{"grouped by the qualified block column", "SELECT t._block_num, SUM(gas_used) FROM eth.transactions t\nGROUP BY t._block_num\nHAVING SUM(gas_used) > 0", nil},
		{"grouped by ordinal", `SELECT _block_num, COUNT(*) FROM eth.transactions GROUP BY 1`, []string{"GROUP BY 1"}},
		{"distinct", `SELECT DISTINCT "to" FROM eth.transactions`, []string{"DISTINCT"}},
		{"limit", "SELECT * FROM eth.transactions\nLIMIT 10", []string{"LIMIT"}},
		{"limit in a subquery", `SELECT * FROM (SELECT * FROM eth.transactions LIMIT 10 OFFSET 5) AS x`, []string{"LIMIT", "OFFSET"}},
		{"window", `SELECT _block_num, ROW_NUMBER() OVER (ORDER BY _block_num) AS n FROM eth.transactions`, []string{"window functions (OVER)"}},
		{"keywords in strings, quotes and comments", `SELECT "count", 'LIMIT 1' AS s /* DISTINCT */ FROM eth.t -- GROUP BY x`, nil},
		{"a column named max without a call", `SELECT max_fee, "limit" FROM eth.transactions`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SplitHazards(tt.sql, "_block_num")
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	_, err := SplitHazards("SELECT 'x FROM t", "_block_num")
	require.ErrorIs(t, err, ErrNotPartitionable)
}
