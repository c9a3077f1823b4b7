//go:build !race

// The race detector's instrumentation allocates on its own and disables some
// escape-analysis optimisations, so allocation counts are only meaningful in
// a normal build.

package encode

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestNoAllocationPerRow checks that at steady state Encode allocates the
// same (small, per-batch) amount whatever the number of rows, for every
// supported type, both envelopes, row keys, and hex and bytes fixed.
func TestNoAllocationPerRow(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	s := allTypesSchema()
	big := newGen(8, mem).batch(s, 1000)
	defer big.Release()
	small := big.NewSlice(0, 100)
	defer small.Release()
	for _, cfg := range []Config{
		{Stream: "s"},
		{Stream: "s", Envelope: EnvelopeFlat, FixedAs: FixedAsHex, KeyColumns: []string{"utf8", "fsb20"}},
		{Stream: "s", FixedAs: FixedAsBytes},
	} {
		enc := newTestEncoder(t, cfg, s)
		meta := BatchMeta{Op: OpCreate, Ranges: []reorg.BlockRange{testRange(1, 2)}}
		var out Batch
		allocs := func(rec arrow.RecordBatch) float64 {
			require.NoError(t, enc.Encode(big, meta, &out)) // grow the arena
			return testing.AllocsPerRun(5, func() {
				out.Reset()
				if err := enc.Encode(rec, meta, &out); err != nil {
					t.Fatal(err)
				}
			})
		}
		// AllocsPerRun returns a whole number (an integer mean), so the
		// conversion is exact and the comparison stays exact.
		a100, a1000 := allocs(small), allocs(big)
		assert.Equal(t, int(a100), int(a1000), "allocations grow with rows (%s)", cfg.Envelope)
		assert.LessOrEqual(t, a1000, 10.0)
	}
}
