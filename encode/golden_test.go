package encode

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/linkedin/goavro/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGoldenSchemas pins the Avro schemas generated for the three EVM tables
// of amp-protocol.md §4.3 (run with -update to rewrite them after an
// intended change, and review the diff: it is a schema evolution).
func TestGoldenSchemas(t *testing.T) {
	tests := []struct {
		file   string
		schema *arrow.Schema
		cfg    Config
	}{
		{"blocks.avsc", blocksSchema(), Config{Stream: "eth_blocks", Topic: "mainnet.blocks"}},
		{"transactions.avsc", transactionsSchema(), Config{Stream: "eth_txs", Topic: "mainnet.transactions"}},
		{"logs.avsc", logsSchema(), Config{Stream: "eth_logs", Topic: "mainnet.logs"}},
		{"transactions_flat.avsc", transactionsSchema(), Config{Stream: "eth_txs", Topic: "mainnet.transactions", Envelope: EnvelopeFlat}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			s, err := BuildSchemas(tc.cfg, tc.schema)
			require.NoError(t, err)
			_, err = goavro.NewCodec(s.Value)
			require.NoError(t, err)
			var pretty bytes.Buffer
			require.NoError(t, json.Indent(&pretty, []byte(s.Value), "", "  "))
			pretty.WriteByte('\n')
			path := filepath.Join("testdata", tc.file)
			if *updateGolden {
				require.NoError(t, os.WriteFile(path, pretty.Bytes(), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "run go test -run TestGoldenSchemas -update ./encode/ to create it")
			assert.Equal(t, string(want), pretty.String())
			// The golden text itself parses to the same canonical form.
			cw, err := goavro.NewCodec(string(want))
			require.NoError(t, err)
			cg, err := goavro.NewCodec(s.Value)
			require.NoError(t, err)
			assert.Equal(t, cw.CanonicalSchema(), cg.CanonicalSchema())
		})
	}
}
