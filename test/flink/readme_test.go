package flink

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// TestREADMEShowsTheTestedDDL checks that README.md quotes transactions.sql,
// the definition TestIntegrationFlinkChangelog runs, byte for byte in a sql
// code block, so the README shows what is tested.
func TestREADMEShowsTheTestedDDL(t *testing.T) {
	root := bridgetest.ModuleRoot(t)
	ddl, err := os.ReadFile(filepath.Join(root, "test", "flink", "transactions.sql"))
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	block := "```sql\n" + strings.TrimRight(string(ddl), "\n") + "\n```"
	require.Contains(t, string(readme), block,
		"README.md must show test/flink/transactions.sql verbatim in a ```sql block:\n%s", block)
	require.NotContains(t, string(readme), readmeDDLBefore,
		"README.md still shows the BYTES definition that Flink cannot read")
}
