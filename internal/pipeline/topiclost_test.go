package pipeline

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// TestCheckSpans: a transaction's data records below the end their
// partition had already reached mean the topic started over under the
// running stream (ErrDataTopicLost); records after it move the end on.
func TestCheckSpans(t *testing.T) {
	r := &Stream{topic: "t", topicID: "id1", topicEnd: map[int32]int64{0: 10}}
	committed := func(spans ...sink.Span) sink.Committed {
		return sink.Committed{Groups: []sink.GroupSpans{{Group: "b", Spans: spans}}}
	}
	next, err := r.checkSpans(committed(sink.Span{Topic: "t", Partition: 0, First: 10, Last: 14}, sink.Span{Topic: "t", Partition: 1, First: 0, Last: 2},
		sink.Span{Topic: "other", Partition: 0, First: 0, Last: 0}))
	require.NoError(t, err)
	r.noteSpans(next)
	assert.Equal(t, map[int32]int64{0: 15, 1: 3}, r.topicEnd)

	_, err = r.checkSpans(committed(sink.Span{Topic: "t", Partition: 0, First: 0, Last: 3}))
	require.ErrorIs(t, err, sink.ErrDataTopicLost)
	assert.True(t, Permanent(err))
	assert.Contains(t, err.Error(), "partition 0: end offset 0 below committed offset 15")
}
