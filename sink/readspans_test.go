package sink

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReadSpansWaitsOncePerPartition checks that reading back many spans of
// one partition (a deep reorg's one-block batches) costs one round of
// offset requests, not one per span: the log start, the high watermark and
// one last stable offset that covers every span.
func TestReadSpansWaitsOncePerPartition(t *testing.T) {
	c, cfg := newCluster(t)
	var listOffsets atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		listOffsets.Add(1)
		return nil, nil, false
	})
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "s", Deps{})
	const batches = 20
	var spans []Span
	for i := range batches {
		com := produceBatches(t, p, "data", 3, fmt.Sprintf("b%d", i))
		spans = append(spans, com.Groups[0].Spans...)
	}
	require.Len(t, spans, batches)
	r := newReader(t, cfg)
	before := listOffsets.Load()
	got, err := r.ReadSpans(testCtx(t), spans)
	require.NoError(t, err)
	require.Len(t, got, batches)
	for i, recs := range got {
		require.Len(t, recs, 3, "span %d", i)
		assert.Equal(t, spans[i].First, recs[0].Offset)
	}
	// The log start, the high watermark, and the last stable offset (one
	// more if the commit markers were not all written at the first try).
	assert.LessOrEqual(t, listOffsets.Load()-before, int32(4), "ListOffsets requests for %d spans of one partition", batches)
}
