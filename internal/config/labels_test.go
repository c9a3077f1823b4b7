package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/labels"
)

func labelsYAML(file, extra string) string {
	return minimalYAML + `    labels:
      - file: ` + file + `
        key: address
` + extra
}

func TestLoadConfigLabels(t *testing.T) {
	csv := filepath.Join(t.TempDir(), "tokens.csv")
	require.NoError(t, os.WriteFile(csv, []byte("address,symbol,decimals\n0x01,A,1\n"), 0o600))
	c, err := LoadConfig(writeConfig(t, labelsYAML(csv, "        types: {decimals: int64}\n")), envMap(nil))
	require.NoError(t, err)
	require.Len(t, c.Streams[0].Labels, 1)
	assert.Equal(t, labels.Inner, c.Streams[0].Labels[0].Join, "inner is the default")
	set, err := c.Streams[0].LoadLabels()
	require.NoError(t, err)
	require.NotNil(t, set)
	assert.Equal(t, []labels.Config{{File: csv, Key: "address", Join: labels.Inner, Types: map[string]labels.Type{"decimals": labels.Int64}}},
		c.Streams[0].LabelConfigs())
}

func TestLoadConfigLabelsErrors(t *testing.T) {
	dir := t.TempDir()
	dup := filepath.Join(dir, "dup.csv")
	require.NoError(t, os.WriteFile(dup, []byte("address,symbol\n0x01,A\n0x01,B\n"), 0o600))
	tests := []struct {
		name        string
		yaml        string
		env         map[string]string
		errContains []string
	}{
		{"missing file", labelsYAML(filepath.Join(dir, "none.csv"), ""), nil,
			[]string{"config streams (txs).labels[0]", "none.csv", "no such file"}},
		{"duplicate key", labelsYAML(dup, ""), nil, []string{"config streams (txs).labels[0]", "dup.csv line 3", "also on line 2"}},
		{"unknown key in a label entry", labelsYAML(dup, "        jion: left\n"), nil, []string{"streams[0].labels[0].jion", "join"}},
		{"bad join", labelsYAML(dup, "        join: outer\n"), nil, []string{`join "outer"`}},
		{"labels from the environment", minimalYAML, map[string]string{"BRIDGE_STREAMS_0_LABELS": "x"},
			[]string{"BRIDGE_STREAMS_0_LABELS", "set it in the YAML file"}},
		{"a label key from the environment", minimalYAML, map[string]string{"BRIDGE_STREAMS_0_LABELS_0_FILE": "x"},
			[]string{"BRIDGE_STREAMS_0_LABELS_0_FILE", "no configuration key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var names []string
			for k := range tt.env {
				names = append(names, k)
			}
			_, err := load(writeConfig(t, tt.yaml), envMap(tt.env), names)
			require.Error(t, err)
			for _, s := range tt.errContains {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestSetFlagRefusesLabelKeys(t *testing.T) {
	err := SetFlags{}.Set("streams.0.labels.0.file=x.csv")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "unknown key")
}
