package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestImportGraph enforces the package dependency table of style.md §4:
// which project packages each stage may import (production code, not tests).
func TestImportGraph(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	const mod = "github.com/amp-kafka-bridge/amp-kafka-bridge/"
	allowed := map[string][]string{
		"reorg":         {},
		"schemas":       {},
		"source":        {"reorg", "internal/tlsconfig"},
		"encode":        {"reorg", "schemas", "internal/tlsconfig"}, // registry.tls
		"sink":          {"internal/tlsconfig"},
		"offsets":       {"reorg", "schemas", "internal/tlsconfig"},
		"source/ampsim": {"reorg", "source", "internal/tlsconfig"},
		// The run loop and the operator commands are built on the stages.
		"internal/tlsconfig": {},
		"internal/config":    {"reorg", "schemas", "encode", "sink", "source", "offsets", "internal/tlsconfig", "internal/labels"},
		"internal/pipeline":  {"reorg", "schemas", "encode", "sink", "source", "offsets", "internal/config", "internal/tlsconfig", "internal/labels"},
		"internal/ops":       {"reorg", "schemas", "encode", "sink", "source", "offsets", "internal/config", "internal/pipeline", "internal/tlsconfig", "internal/health", "internal/labels"},
		// The label join is Arrow in, Arrow out: it knows no stage.
		"internal/labels": {},
		"internal/health": {},
		"internal/liblog": {},
	}
	forbiddenThirdParty := map[string][]string{
		"reorg":   {"github.com/", "google.golang.org/"},
		"sink":    {"github.com/apache/arrow-go"},
		"encode":  {"github.com/twmb/franz-go/pkg/kgo"},
		"offsets": {"github.com/apache/arrow-go", "github.com/twmb/franz-go"},
	}
	for pkg, ok := range allowed {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", mod+pkg).CombinedOutput()
		require.NoError(t, err, "go list %s: %s", pkg, out)
		for dep := range strings.FieldsSeq(string(out)) {
			if rest, ours := strings.CutPrefix(dep, mod); ours {
				if rest == pkg {
					continue
				}
				assert.Contains(t, ok, rest, "%s must not import %s (style.md §4)", pkg, rest)
			}
			for _, bad := range forbiddenThirdParty[pkg] {
				assert.False(t, strings.HasPrefix(dep, bad), "%s must not import %s (style.md §4)", pkg, dep)
			}
		}
	}
}
