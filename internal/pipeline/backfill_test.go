package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
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
