package kstreams

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// TestREADMEShowsTheTestedTopology checks that README.md quotes the
// topology TestIntegrationKafkaStreamsChangelog runs (the lines between
// "// README: begin" and "// README: end" in TransactionsTable.java, with
// their common indentation removed) in a java code block, so the README
// shows what is tested.
func TestREADMEShowsTheTestedTopology(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(bridgetest.ModuleRoot(t), "test", "kstreams", "src", "main", "java", "local", "kstreams", "TransactionsTable.java"))
	require.NoError(t, err)
	bridgetest.RequireREADMEBlock(t, bridgetest.README(t), "java", readmeSnippet(t, string(src)),
		"the topology of TransactionsTable.java")
}

// readmeSnippet returns the lines between the README markers, dedented, each
// ended by a newline.
func readmeSnippet(t testing.TB, src string) string {
	t.Helper()
	_, rest, ok := strings.Cut(src, "// README: begin\n")
	require.True(t, ok, "no // README: begin marker")
	body, _, ok := strings.Cut(rest, "// README: end")
	require.True(t, ok, "no // README: end marker")
	lines := strings.Split(strings.TrimRight(body, " \n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if len(l) >= indent {
			l = l[indent:]
		}
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
	return b.String()
}
