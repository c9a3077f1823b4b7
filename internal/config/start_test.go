package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartAndModeKeys(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(nil))
	require.NoError(t, err)
	assert.Equal(t, StartEarliest, c.Streams[0].Start)
	assert.Equal(t, ModeLive, c.Streams[0].Mode)
	assert.False(t, c.Streams[0].Backfill.Enabled)

	c, err = LoadConfig(writeConfig(t, minimalYAML), envMap(map[string]string{"BRIDGE_STREAMS_0_START": "24000000"}))
	require.NoError(t, err)
	n, ok, err := c.Streams[0].Start.Block()
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, uint64(24000000), n)

	// mode once runs on the backfill's machinery: it turns it on.
	c, err = LoadConfig(writeConfig(t, minimalYAML+"    mode: once\n    backfill: {from: 100, to: 200}\n"), envMap(nil))
	require.NoError(t, err)
	assert.True(t, c.Streams[0].Backfill.Enabled)
	assert.Equal(t, ModeOnce, c.Streams[0].Mode)
	// ... and a query that must not be split is fine there: it runs whole.
	c, err = LoadConfig(writeConfig(t, minimalYAML+"    mode: once\n    backfill: {from: 100, to: 200}\n"),
		envMap(map[string]string{"BRIDGE_STREAMS_0_SQL": "SELECT * FROM eth.transactions LIMIT 10"}))
	require.NoError(t, err)
	assert.Equal(t, "SELECT * FROM eth.transactions LIMIT 10", c.Streams[0].SQL)
}

func TestStartAndModeErrors(t *testing.T) {
	const head = "kafka: {brokers: [a:1]}\nstreams:\n  - id: a\n    sql: SELECT * FROM eth.transactions\n"
	tests := []struct {
		name        string
		yaml        string
		errContains []string
	}{
		{"bad start", head + "    start: soon\n", []string{"streams[0] (a).start", `"soon": want earliest, latest or a block number`}},
		{"negative start", head + "    start: -5\n", []string{"streams[0] (a).start", "want earliest, latest or a block number"}},
		{"bad mode", head + "    mode: twice\n", []string{"streams[0] (a).mode", `"twice": want live or once`}},
		{"start with a backfill", head + "    start: latest\n    backfill: {enabled: true}\n",
			[]string{"streams[0] (a).start", "latest contradicts backfill.enabled", "backfill.from"}},
		{"start block with a backfill", head + "    start: 500\n    backfill: {enabled: true, from: 100}\n",
			[]string{"streams[0] (a).start", "500 contradicts backfill.enabled"}},
		{"start in mode once", head + "    start: 500\n    mode: once\n    backfill: {to: 900}\n",
			[]string{"streams[0] (a).start", "does not apply to mode once", "backfill.from"}},
		{"once without to", head + "    mode: once\n    backfill: {from: 100}\n",
			[]string{"streams[0] (a).backfill.to", "mode once publishes [backfill.from, backfill.to)"}},
		{"once to before from", head + "    mode: once\n    backfill: {from: 100, to: 50}\n",
			[]string{"streams[0] (a).backfill.to", "50 is not after backfill.from 100"}},
		{"once at least once", "kafka: {brokers: [a:1], delivery: at-least-once}\n" + head[len("kafka: {brokers: [a:1]}\n"):] +
			"    mode: once\n    backfill: {to: 50}\n", []string{"backfill", "exactly-once"}},
		{"live backfill of a count", "kafka: {brokers: [a:1]}\nstreams:\n  - id: a\n    sql: SELECT COUNT(*) AS n FROM eth.transactions\n    backfill: {enabled: true}\n",
			[]string{"streams[0] (a).sql", "has COUNT(…)", "mode: once"}},
		{"live backfill grouped by another column", "kafka: {brokers: [a:1]}\nstreams:\n  - id: a\n    sql: SELECT \"to\", MAX(_block_num) AS _block_num FROM eth.transactions GROUP BY \"to\"\n    backfill: {enabled: true}\n",
			[]string{"streams[0] (a).sql", `has GROUP BY "to"`, "GROUP BY _block_num"}},
		{"live backfill with distinct and limit", "kafka: {brokers: [a:1]}\nstreams:\n  - id: a\n    sql: SELECT DISTINCT _block_num, \"to\" FROM eth.transactions LIMIT 5\n    backfill: {enabled: true}\n",
			[]string{"streams[0] (a).sql", "has DISTINCT, LIMIT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(writeConfig(t, tt.yaml), envMap(nil))
			require.Error(t, err)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
	// A live backfill grouped by the block column is fine.
	_, err := LoadConfig(writeConfig(t, "kafka: {brokers: [a:1]}\nstreams:\n  - id: a\n    sql: SELECT _block_num, COUNT(*) AS n FROM eth.transactions GROUP BY _block_num\n    backfill: {enabled: true}\n"), envMap(nil))
	require.NoError(t, err)
}
