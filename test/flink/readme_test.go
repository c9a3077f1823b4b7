package flink

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
)

// TestREADMEShowsTheTestedDDL checks that README.md quotes transactions.sql
// and transactions_bytes.sql, the definitions TestIntegrationFlinkChangelog
// runs, byte for byte in sql code blocks, so the README shows what is
// tested.
func TestREADMEShowsTheTestedDDL(t *testing.T) {
	readme := bridgetest.README(t)
	for _, f := range []string{"transactions.sql", "transactions_bytes.sql"} {
		ddl, err := os.ReadFile(filepath.Join(bridgetest.ModuleRoot(t), "test", "flink", f))
		require.NoError(t, err)
		bridgetest.RequireREADMEBlock(t, readme, "sql", string(ddl), "test/flink/"+f)
	}
	require.NotContains(t, readme, readmeDDLBefore,
		"README.md still shows the BYTES definition that Flink cannot read")
}
