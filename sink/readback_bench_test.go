package sink

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// BenchmarkReadBack decodes the fetch response of a depth-128 reorg's
// read-back (128 one-block batches of 170 records of ~700 B with the
// bridge's five headers, uncompressed, one partition) into the records
// ReadSpans returns ("reader"), beside franz-go decoding the same response
// into its own records and nothing more ("franz-go-decode", the floor).
// The response is fetched once from kfake; the loop decodes it again.
func BenchmarkReadBack(b *testing.B) {
	_, cfg := newCluster(b)
	cfg.Compression = CompressionNone
	cfg.FetchMaxBytes = 64 << 20 // the whole read back in one response
	createTopic(b, cfg, "data", 1)
	p := newProducer(b, cfg, "s", Deps{})
	ctx := testCtx(b)
	val := make([]byte, 690)
	blocks, rows := 128, 170
	if testenv.BenchSmoke() {
		blocks = 4
	}
	for blk := range blocks {
		require.NoError(b, p.Begin())
		id := fmt.Sprintf("batch-%d", blk)
		hs := []Header{{Key: "amp-batch-id", Value: []byte(id)}, {Key: "amp-op", Value: []byte("c")},
			{Key: "amp-network", Value: []byte("mainnet")}, {Key: "amp-range", Value: []byte("20000100-20000100")},
			{Key: "amp-stream", Value: []byte("lat")}}
		for i := range rows {
			require.NoError(b, p.Produce(ctx, Record{Topic: "data", Key: fmt.Appendf(nil, "0x%062x", blk*rows+i), Value: val, Group: id, Headers: hs}))
		}
		_, err := p.Commit(ctx)
		require.NoError(b, err)
	}
	r := newReader(b, cfg)
	until := int64(blocks * (rows + 1)) // each transaction's commit marker
	m, err := freshMetadata(ctx, r.cl, "data")
	require.NoError(b, err)
	var rp *kmsg.FetchResponseTopicPartition
	require.Eventually(b, func() bool {
		rp, err = r.fetchOnce(ctx, m.leaders[0], "data", m.id, 0, 0, until, r.cfg.FetchMaxBytes)
		return err == nil && rp.LastStableOffset >= until
	}, 10*time.Second, 5*time.Millisecond)
	raw := rp.RecordBatches
	want := blocks * rows
	b.Run("reader", func(b *testing.B) {
		var got int
		for b.Loop() {
			rp.RecordBatches = raw
			recs, _, err := r.appendDecoded(nil, rp, "data", 0, 0, until) // as readStable does
			if err != nil {
				b.Fatal(err)
			}
			got = len(recs)
		}
		require.Equal(b, want, got)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*want), "ns/record")
	})
	b.Run("franz-go-decode", func(b *testing.B) {
		var got int
		for b.Loop() {
			rp.RecordBatches = raw
			fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{Offset: 0, IsolationLevel: kgo.ReadCommitted(),
				Topic: "data", Partition: 0}, rp, r.dec, nil)
			if fp.Err != nil {
				b.Fatal(fp.Err)
			}
			got = len(fp.Records)
		}
		require.Equal(b, want, got)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*want), "ns/record")
	})
}
