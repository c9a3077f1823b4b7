package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestREADMEMinimalConfigIsValid loads the README's "A minimal bridge.yaml"
// with the real loader (unknown keys are errors), so the README cannot
// show keys or values the bridge refuses.
func TestREADMEMinimalConfigIsValid(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	const marker = "A minimal `bridge.yaml`:"
	_, rest, ok := strings.Cut(string(readme), marker)
	require.True(t, ok, "README has no %q", marker)
	rest, ok = strings.CutPrefix(strings.TrimLeft(rest, "\n"), "```yaml\n")
	require.True(t, ok, "no yaml block right after %q", marker)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok, "unterminated yaml block after %q", marker)

	path := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(block), 0o600))
	cfg, err := LoadConfig(path, func(string) (string, bool) { return "", false })
	require.NoError(t, err, "the README's minimal bridge.yaml:\n%s", block)
	require.Len(t, cfg.Streams, 1)
	require.Equal(t, KeyMode("row"), cfg.Streams[0].Key)
	require.Equal(t, []string{"tx_hash"}, cfg.Streams[0].KeyColumns)
}
