package sink

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// reorgHeaders is the five headers the bridge gives a record of batch id.
func reorgHeaders(id string) []Header {
	return []Header{{Key: "amp-batch-id", Value: []byte(id)}, {Key: "amp-op", Value: []byte("c")},
		{Key: "amp-network", Value: []byte("mainnet")}, {Key: "amp-range", Value: []byte("20000100-20000100")},
		{Key: "amp-stream", Value: []byte("lat")}}
}

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
		hs := reorgHeaders(id)
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

// BenchmarkReadSpans reads back a depth-128 reorg (128 one-block batches
// of 170 records of ~700 B with the bridge's five headers, lz4 as
// configured by default, one partition) with ReadSpans, fetch and decode,
// for several sizes of fetch_max_bytes (the cap of one fetch response):
// what a smaller cap costs a read-back in round trips. It runs against
// kfake and, when BRIDGE_TEST_KAFKA_SEEDS is set, the real broker.
func BenchmarkReadSpans(b *testing.B) {
	for _, be := range testenv.KafkaBackends(b) {
		b.Run(be.Name, func(b *testing.B) {
			cfg := testConfig(be.Addr)
			cfg.TransactionalIDPrefix = testenv.UniqueName(b, "readspans")
			cfg.ReadTimeout = 30 * time.Second
			topic := testenv.NewTopic(b, be, "data", 1, nil)
			p := newProducer(b, cfg, "s", Deps{})
			ctx := testCtx(b)
			val := make([]byte, 690)
			rng := rand.New(rand.NewPCG(1, 2))
			blocks, rows := 128, 170
			if testenv.BenchSmoke() {
				blocks = 4
			}
			spans := make([]Span, 0, blocks)
			for blk := range blocks {
				require.NoError(b, p.Begin())
				id := fmt.Sprintf("batch-%d", blk)
				hs := reorgHeaders(id)
				for i := range rows {
					// Half random bytes, half repeated: about as compressible as Avro rows of hashes and numbers.
					for j := range len(val) / 2 {
						val[j] = byte(rng.Uint32())
					}
					require.NoError(b, p.Produce(ctx, Record{Topic: topic, Key: fmt.Appendf(nil, "0x%062x", blk*rows+i),
						Value: slices.Clone(val), Group: id, Headers: hs}))
				}
				res, err := p.Commit(ctx)
				require.NoError(b, err)
				g, ok := res.Group(id)
				require.True(b, ok)
				spans = append(spans, g.Spans...)
			}
			for _, maxBytes := range []int32{256 << 10, 1 << 20, 4 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("fetch_max_bytes=%dKiB", maxBytes>>10), func(b *testing.B) {
					rcfg := cfg
					rcfg.FetchMaxBytes = maxBytes
					r := newReader(b, rcfg)
					var got int
					for b.Loop() {
						read, err := r.ReadSpans(ctx, spans)
						if err != nil {
							b.Fatal(err)
						}
						got = 0
						for _, recs := range read {
							got += len(recs)
						}
					}
					require.Equal(b, blocks*rows, got)
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/read")
				})
			}
		})
	}
}
