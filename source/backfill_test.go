package source

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlanPartitions(t *testing.T) {
	tests := []struct {
		name     string
		from, to uint64
		workers  int
		size     uint64
		want     []BlockSpan
	}{
		{"by size, last clipped", 0, 100, 4, 30, []BlockSpan{{0, 30}, {30, 60}, {60, 90}, {90, 100}}},
		{"by workers, rounded up", 10, 20, 3, 0, []BlockSpan{{10, 14}, {14, 18}, {18, 20}}},
		{"more workers than blocks", 5, 7, 8, 0, []BlockSpan{{5, 6}, {6, 7}}},
		{"zero workers is one", 0, 5, 0, 0, []BlockSpan{{0, 5}}},
		{"empty", 7, 7, 2, 0, nil},
		{"reversed", 9, 7, 2, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanPartitions(tc.from, tc.to, tc.workers, tc.size)
			assert.Equal(t, tc.want, got)
			var n uint64
			for _, p := range got {
				n += p.Len()
			}
			if tc.to > tc.from {
				assert.Equal(t, tc.to-tc.from, n, "the partitions cover the span once")
			}
		})
	}
	assert.Equal(t, "[3, 9)", BlockSpan{3, 9}.String())
	assert.Zero(t, BlockSpan{9, 3}.Len())
}

func TestPartitionSQL(t *testing.T) {
	got, err := PartitionSQL("SELECT block_num, tx_hash FROM eth.transactions WHERE value > 0 SETTINGS stream = true", "block_num", 10, 20)
	require.NoError(t, err)
	assert.Equal(t, "SELECT * FROM (\nSELECT block_num, tx_hash FROM eth.transactions WHERE value > 0\n) AS amp_partition "+
		"WHERE amp_partition.block_num >= 10 AND amp_partition.block_num < 20", got)

	_, err = PartitionSQL("SELECT 1", "block num", 0, 1)
	require.ErrorIs(t, err, ErrNotPartitionable)
	assert.ErrorContains(t, err, `block column "block num" is not a plain identifier`)
}

func TestStripStreamSetting(t *testing.T) {
	ok := []struct{ in, want string }{
		{"SELECT a FROM t", "SELECT a FROM t"},
		{"SELECT a FROM t;", "SELECT a FROM t"},
		{"SELECT a FROM t SETTINGS stream = true", "SELECT a FROM t"},
		{"select a from t settings STREAM=TRUE ;", "select a from t"},
		{"SELECT a FROM t\nSETTINGS stream = 'true' -- live\n", "SELECT a FROM t"},
		{"SELECT 'SETTINGS stream = true' AS s FROM t", "SELECT 'SETTINGS stream = true' AS s FROM t"},
		{"SELECT a FROM (SELECT a FROM t SETTINGS x = 1) AS q", "SELECT a FROM (SELECT a FROM t SETTINGS x = 1) AS q"},
		{"SELECT \"settings\" FROM t /* SETTINGS stream = true */", "SELECT \"settings\" FROM t"},
		{"SELECT 'it''s' FROM t SETTINGS stream = true", "SELECT 'it''s' FROM t"},
		{"SELECT a FROM t -- trailing\n", "SELECT a FROM t"},
	}
	for _, tc := range ok {
		got, err := StripStreamSetting(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	bad := []struct{ in, want string }{
		{"SELECT a FROM t SETTINGS stream = true, max_threads = 4", "only SETTINGS stream = true can be dropped"},
		{"SELECT a FROM t SETTINGS max_threads = 4", "SETTINGS max_threads = 4"},
		{"SELECT a FROM t SETTINGS stream = true LIMIT 3", "SETTINGS stream = true LIMIT 3"},
		{"SELECT 'a FROM t", "unterminated ' quote"},
		{"SELECT (a FROM t", "1 unclosed '('"},
		{"SELECT a) FROM t", "unbalanced ')'"},
		{"SELECT a /* FROM t", "unterminated /* comment"},
		{"  ;", "the query is empty"},
	}
	for _, tc := range bad {
		_, err := StripStreamSetting(tc.in)
		require.ErrorIs(t, err, ErrNotPartitionable, tc.in)
		assert.ErrorContains(t, err, tc.want, tc.in)
	}
}
