package flink

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// TestREADMEShowsTheTestedDDL checks that README.md quotes transactions.sql
// and transactions_bytes.sql, the definitions TestIntegrationFlinkChangelog
// runs, byte for byte in sql code blocks, so the README shows what is
// tested.
func TestREADMEShowsTheTestedDDL(t *testing.T) {
	root := bridgetest.ModuleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	for _, f := range []string{"transactions.sql", "transactions_bytes.sql"} {
		ddl, err := os.ReadFile(filepath.Join(root, "test", "flink", f))
		require.NoError(t, err)
		block := "```sql\n" + strings.TrimRight(string(ddl), "\n") + "\n```"
		require.Contains(t, string(readme), block,
			"README.md must show test/flink/%s verbatim in a ```sql block:\n%s", f, block)
	}
	require.NotContains(t, string(readme), readmeDDLBefore,
		"README.md still shows the BYTES definition that Flink cannot read")
}
