package sink

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReadSpansWaitsOncePerPartition checks that reading back many spans of
// one partition (a deep reorg's one-block batches) costs one metadata
// request and one fetch, not a round per span, and no offset requests: the
// fetch response says the range is retained and stable.
func TestReadSpansWaitsOncePerPartition(t *testing.T) {
	c, cfg := newCluster(t)
	var listOffsets, fetches atomic.Int32
	c.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		listOffsets.Add(1)
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		fetches.Add(1)
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
	// Every transaction has ended: wait until its markers are written, so
	// that the read below finds the range stable.
	require.Eventually(t, func() bool {
		lso, err := r.EndOffsets(testCtx(t), "data")
		return err == nil && lso[0] > spans[len(spans)-1].Last
	}, 5*time.Second, 5*time.Millisecond)
	before, fetchesBefore := listOffsets.Load(), fetches.Load()
	got, err := r.ReadSpans(testCtx(t), spans)
	require.NoError(t, err)
	require.Len(t, got, batches)
	for i, recs := range got {
		require.Len(t, recs, 3, "span %d", i)
		assert.Equal(t, spans[i].First, recs[0].Offset)
	}
	assert.Zero(t, listOffsets.Load()-before, "ListOffsets requests for %d stable spans of one partition", batches)
	assert.Equal(t, int32(1), fetches.Load()-fetchesBefore, "fetches for %d spans of one partition", batches)
}

// TestReadSpansDecodesOnlyTheRange checks that a read back of spans
// followed by much more data decodes only the record batches that reach
// into the spans: the fetch returns up to fetch_max_bytes past them.
func TestReadSpansDecodesOnlyTheRange(t *testing.T) {
	_, cfg := newCluster(t)
	cfg.Compression = CompressionLZ4
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "s", Deps{})
	var spans []Span
	for i := range 12 {
		// Compressible values make every data batch compressed, so the
		// decompressor counts them. A transaction's records may go out in
		// more than one batch (the first is sent while the rest are
		// produced), so the batches are listed from the log below.
		com := produceBatches(t, p, "data", 50, fmt.Sprintf("b%d", i))
		spans = append(spans, com.Groups[0].Spans...)
	}
	r := newReader(t, cfg)
	require.Eventually(t, func() bool {
		lso, err := r.EndOffsets(testCtx(t), "data")
		return err == nil && lso[0] > spans[len(spans)-1].Last
	}, 5*time.Second, 5*time.Millisecond)
	log := logBatches(t, r, "data", spans[len(spans)-1].Last+1)
	dec := &countingDecompressor{Decompressor: r.dec}
	r.dec = dec
	for _, pick := range [][]Span{spans[:1], spans[3:5], spans[11:]} {
		var want int32
		for _, b := range log {
			for _, s := range pick {
				if b.compressed && b.first <= s.Last && b.last >= s.First {
					want++
					break
				}
			}
		}
		require.NotZero(t, want)
		dec.n.Store(0)
		got, err := r.ReadSpans(testCtx(t), pick)
		require.NoError(t, err)
		for i, recs := range got {
			require.Len(t, recs, 50)
			assert.Equal(t, pick[i].First, recs[0].Offset)
			assert.Equal(t, pick[i].Last, recs[len(recs)-1].Offset)
		}
		assert.Equal(t, want, dec.n.Load(), "batches decompressed to read back %v (the log's batches: %v)", pick, log)
	}
}

// logBatch is the extent of one record batch of a partition's log.
type logBatch struct {
	first, last int64
	compressed  bool
}

// logBatches lists the record batches of partition 0 of topic below
// offset until, from the raw fetch responses.
func logBatches(t *testing.T, r *Reader, topic string, until int64) []logBatch {
	t.Helper()
	m, err := freshMetadata(testCtx(t), r.cl, topic)
	require.NoError(t, err)
	var out []logBatch
	for next := int64(0); next < until; {
		rp, err := r.fetchOnce(testCtx(t), m.leaders[0], topic, m.id, 0, next, until, r.cfg.FetchMaxBytes)
		require.NoError(t, err)
		require.Zero(t, rp.ErrorCode)
		b := rp.RecordBatches
		require.NotEmpty(t, b, "no batches at offset %d", next)
		for len(b) > 0 {
			var rb kmsg.RecordBatch
			n := 12 + int(int32(binary.BigEndian.Uint32(b[8:])))
			if n > len(b) {
				break // a partial batch: fetched again from its start
			}
			require.NoError(t, rb.ReadFrom(b[:n]))
			out = append(out, logBatch{first: rb.FirstOffset, last: rb.FirstOffset + int64(rb.LastOffsetDelta), compressed: rb.Attributes&7 != 0})
			next = rb.FirstOffset + int64(rb.LastOffsetDelta) + 1
			b = b[n:]
		}
	}
	return out
}

// countingDecompressor counts the compressed batches it decompresses.
type countingDecompressor struct {
	kgo.Decompressor
	n atomic.Int32
}

func (d *countingDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	if codec != kgo.CodecNone {
		d.n.Add(1)
	}
	return d.Decompressor.Decompress(src, codec)
}

// TestBatchesBefore checks the trimming of a fetch response's record
// batches at an offset, on batches of the v2 format and of an older one.
func TestBatchesBefore(t *testing.T) {
	batch := func(base int64, magic byte, body int) []byte {
		b := make([]byte, 12+body)
		binary.BigEndian.PutUint64(b, uint64(base))
		binary.BigEndian.PutUint32(b[8:], uint32(body))
		b[16] = magic
		return b
	}
	v2 := slices.Concat(batch(0, 2, 60), batch(10, 2, 60), batch(20, 2, 60))
	assert.Len(t, batchesBefore(v2, 5), 72, "the batch holding offset 4")
	assert.Len(t, batchesBefore(v2, 10), 72, "a batch starting at until is cut")
	assert.Len(t, batchesBefore(v2, 11), 144)
	assert.Len(t, batchesBefore(v2, 100), 216)
	assert.Empty(t, batchesBefore(v2, 0))
	partial := v2[:150]
	assert.Len(t, batchesBefore(partial, 100), 150, "a partial last batch is left to the decoder")
	old := slices.Concat(batch(0, 1, 60), batch(10, 2, 60))
	assert.Len(t, batchesBefore(old, 5), len(old), "a v1 message set is not trimmed")
}
