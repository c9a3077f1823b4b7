package offsets

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzUnmarshal feeds arbitrary bytes to Unmarshal. Invariants: it never
// panics; whatever it accepts is valid, and re-encoding it and decoding
// again gives the same checkpoint (the encoding is a fixed point).
func FuzzUnmarshal(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "checkpoint_v1.golden.json"))
	require.NoError(f, err)
	f.Add(golden)
	small, err := Marshal(testCheckpoint("s", 1, 1))
	require.NoError(f, err)
	f.Add(small)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := Unmarshal(b)
		if err != nil {
			return
		}
		require.NoError(t, cp.Validate())
		enc, err := Marshal(cp)
		require.NoError(t, err)
		again, err := Unmarshal(enc)
		require.NoError(t, err)
		assert.Equal(t, cp.CommittedAt.UTC(), again.CommittedAt)
		cp.CommittedAt = again.CommittedAt
		assert.Equal(t, cp, again)
	})
}
