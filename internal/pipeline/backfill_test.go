package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

func TestSubtractAndMergeSpans(t *testing.T) {
	sp := func(a, b uint64) source.BlockSpan { return source.BlockSpan{From: a, To: b} }
	done := mergeSpans([]source.BlockSpan{sp(20, 30), sp(0, 5), sp(5, 10), sp(25, 40), sp(7, 7)})
	assert.Equal(t, []source.BlockSpan{sp(0, 10), sp(20, 40)}, done)
	assert.Equal(t, []source.BlockSpan{sp(10, 20), sp(40, 50)}, subtractSpans(sp(0, 50), done))
	assert.Empty(t, subtractSpans(sp(22, 38), done))
	assert.Equal(t, []source.BlockSpan{sp(45, 60)}, subtractSpans(sp(45, 60), done))
	assert.Equal(t, []source.BlockSpan{sp(10, 12)}, subtractSpans(sp(8, 12), done))
}

func TestIsFresh(t *testing.T) {
	assert.True(t, isFresh(offsets.Checkpoint{}))
	assert.False(t, isFresh(offsets.Checkpoint{Version: 1}))
}

// TestSpanSetStaysMerged: the spans of many backfill watermarks are merged
// as they come, so what backfillDone holds while it streams through the
// control topic is bounded by the disjoint spans, not by the events.
func TestSpanSetStaysMerged(t *testing.T) {
	var s spanSet
	for i := range uint64(10000) {
		b := 2 * i
		if i >= 5000 {
			b = 2*(i-5000) + 1 // the odd blocks close the gaps
		}
		s.addBackfill(&offsets.Watermark{Backfill: &offsets.BackfillPartition{From: 0, To: 20000},
			Batches: []offsets.CommittedBatch{{Ranges: []reorg.BlockRange{{Network: "n", Start: b, End: b}}}}})
		assert.LessOrEqual(t, len(s.spans), 2*5000+64+1)
		if i < 5000 {
			assert.LessOrEqual(t, len(s.spans), 2*int(i+1)+64)
		}
	}
	s.addBackfill(&offsets.Watermark{Batches: []offsets.CommittedBatch{{Ranges: []reorg.BlockRange{{Network: "n", Start: 50000, End: 50000}}}}})
	assert.Equal(t, []source.BlockSpan{{From: 0, To: 10000}}, s.merged(), "a live watermark adds nothing")
	assert.Len(t, s.spans, 1)
}
