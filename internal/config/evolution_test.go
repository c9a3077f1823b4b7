package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSchemaEvolutionConfig(t *testing.T) {
	c, err := LoadConfig(writeConfig(t, minimalYAML), envMap(nil))
	require.NoError(t, err)
	assert.Equal(t, EvolutionBackward, c.Streams[0].SchemaEvolution, "the default")
	assert.True(t, c.Streams[0].SchemaEvolution.Accepts())

	for _, mode := range []SchemaEvolution{EvolutionNone, EvolutionFull, EvolutionBackward} {
		c, err := LoadConfig(writeConfig(t, minimalYAML+"    schema_evolution: "+string(mode)+"\n"), envMap(nil))
		require.NoError(t, err, mode)
		assert.Equal(t, mode, c.Streams[0].SchemaEvolution)
		assert.Equal(t, mode != EvolutionNone, mode.Accepts())
	}
	c, err = LoadConfig(writeConfig(t, minimalYAML), envMap(map[string]string{"BRIDGE_STREAMS_0_SCHEMA_EVOLUTION": "none"}))
	require.NoError(t, err)
	assert.Equal(t, EvolutionNone, c.Streams[0].SchemaEvolution)

	_, err = LoadConfig(writeConfig(t, minimalYAML+"    schema_evolution: forward\n"), envMap(nil))
	require.Error(t, err)
	assert.ErrorContains(t, err, `streams[0] (txs).schema_evolution: "forward": want backward, none or full`)
}
