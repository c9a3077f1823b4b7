package ampsim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHiddenColumns: a hidden column is not in its table (SELECT * leaves
// it out, naming it fails), and showing it while the server runs changes
// the schema of the next query, SELECT * included, with its values for
// every block, in batches built by the fast and the row path alike.
func TestHiddenColumns(t *testing.T) {
	cfg := smallConfig(4)
	cfg.HiddenColumns = []string{"blocks.blob_gas_used", "eth_rpc.transactions.chain_id"}
	s := startServer(t, cfg)
	c := dial(t, s)

	rows, _, sc := batchQuery(t, c, `SELECT * FROM eth_rpc.blocks`)
	assert.Equal(t, 4, rows)
	assert.Equal(t, blocksSchema().NumFields()-1, sc.NumFields())
	assert.Empty(t, sc.FieldIndices("blob_gas_used"))
	_, _, sc = batchQuery(t, c, `SELECT * FROM eth_rpc.transactions WHERE block_num >= 1`)
	assert.Empty(t, sc.FieldIndices("chain_id"), "the row path leaves it out too")
	_, err := c.info(testCtx(t), `SELECT _block_num, blob_gas_used FROM eth_rpc.blocks`)
	require.ErrorContains(t, err, "blob_gas_used")

	require.NoError(t, s.SetHiddenColumns(nil))
	_, recs, sc := batchQuery(t, c, `SELECT * FROM eth_rpc.blocks`)
	assert.True(t, sc.Equal(blocksSchema()), "every column again")
	for _, r := range recs {
		assert.True(t, r.Schema().Equal(blocksSchema()))
	}
	_, _, sc = batchQuery(t, c, `SELECT * FROM eth_rpc.transactions WHERE block_num >= 1`)
	assert.NotEmpty(t, sc.FieldIndices("chain_id"))

	for _, bad := range [][]string{{"blocks.nope"}, {"receipts.x"}, {"other.blocks.hash"}, {"blocks._block_num"}, {"hash"}} {
		assert.Error(t, s.SetHiddenColumns(bad), "%v", bad)
	}
}
