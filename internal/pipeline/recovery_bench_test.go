package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// benchStreams is the number of streams whose events the benchmark's
// control topic interleaves; benchRetained their retained batch logs.
const (
	benchStreams  = 4
	benchRetained = 128
)

// BenchmarkRecoverRedisLess measures the Redis-less start of a stream: the
// reconciliation read (offsets.Control.NewestState from NoOffset, what
// offsets.Recover does with an empty checkpoint store) over a control
// topic of 1,000, 10,000 and 100,000 watermark events of four interleaved
// streams, each with 128 retained batches and a full checkpoint copy every
// 64th event, as the run loop writes them. It reports ns/op, B/op, the
// control records read per op and the growth of the process's peak RSS
// during one recovery (peak_rss_delta_bytes, Linux). Sub-benchmark
// full-read is the old way for comparison: the whole topic read into
// memory. Against kfake (in process) and, when BRIDGE_TEST_KAFKA_HOME is
// set, a private Apache Kafka broker (testenv.StartKafkaBroker).
func BenchmarkRecoverRedisLess(b *testing.B) {
	b.Run("kfake", func(b *testing.B) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		benchRecover(b, strings.Join(c.ListenAddrs(), ","))
	})
	b.Run("kafka", func(b *testing.B) {
		k := testenv.StartKafkaBroker(b)
		benchRecover(b, k.Addr())
	})
}

func benchRecover(b *testing.B, addr string) {
	codec, err := offsets.NewControlCodec()
	if err != nil {
		b.Fatal(err)
	}
	cfg := sink.DefaultConfig()
	cfg.Brokers = testenv.Seeds(addr)
	sizes := []int{1000, 10000, 100000}
	if testenv.BenchSmoke() {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		topic := fmt.Sprintf("control-bench-%d", n)
		var reader *sink.Reader
		setup := func(b *testing.B) {
			if reader != nil {
				return
			}
			fillControl(b, addr, codec, topic, n)
			var err error
			if reader, err = sink.NewReader(b.Context(), cfg, sink.Deps{}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			setup(b)
			log := &countingLog{ControlLog: controlLog{reader: reader, topic: topic}}
			ctl := offsets.NewControl(log, codec, topic)
			recover := func() {
				st, err := ctl.NewestState(context.Background(), "s0", offsets.NoOffset)
				if err != nil {
					b.Fatal(err)
				}
				if st == nil || len(st.Batches) != benchRetained {
					b.Fatalf("recovered %+v", st)
				}
			}
			recover() // warm the connection
			log.records = 0
			b.ReportAllocs()
			ops := 0
			for b.Loop() {
				recover()
				ops++
			}
			b.ReportMetric(float64(log.records)/float64(ops), "records_read/op")
			b.ReportMetric(float64(peakRSSDelta(recover)), "peak_rss_delta_bytes")
		})
		b.Run(fmt.Sprintf("events=%d/full-read", n), func(b *testing.B) {
			setup(b)
			read := func() {
				cr, err := reader.ReadControl(context.Background(), topic, -1)
				if err != nil {
					b.Fatal(err)
				}
				if len(cr.Records) != n {
					b.Fatalf("read %d records, want %d", len(cr.Records), n)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				read()
			}
			b.ReportMetric(float64(n), "records_read/op")
			b.ReportMetric(float64(peakRSSDelta(read)), "peak_rss_delta_bytes")
		})
		if reader != nil {
			reader.Close()
		}
	}
}

// countingLog counts the records read through a ControlLog.
type countingLog struct {
	offsets.ControlLog
	records int
}

func (c *countingLog) Scan(ctx context.Context, from, until int64, fn func([]offsets.ControlRecord) error) error {
	return c.ControlLog.Scan(ctx, from, until, func(recs []offsets.ControlRecord) error {
		c.records += len(recs)
		return fn(recs)
	})
}

// fillControl writes n watermark events into a new one-partition topic, of
// benchStreams streams in turn, the way Stream.commit writes them: a full
// checkpoint copy in every fullEvery-th of a stream's events, the state
// with the copy's offset in the others. The records are produced without
// transactions, so the offsets are 0..n-1 (a transactional writer also
// leaves a commit marker per transaction).
func fillControl(b *testing.B, addr string, codec *offsets.ControlCodec, topic string, n int) {
	b.Helper()
	ctx := b.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(testenv.Seeds(addr)...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(900<<10), kgo.MaxBufferedRecords(20000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		b.Fatal(err)
	}
	type state struct {
		next      uint64
		batches   []offsets.Batch
		lastFull  int64
		sinceFull int
	}
	streams := make([]*state, benchStreams)
	for i := range streams {
		streams[i] = &state{next: 1, lastFull: -1}
	}
	var recs []*kgo.Record
	flush := func() {
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		for _, r := range recs {
			if r.Offset != int64(r.Context.Value(offsetKey{}).(int)) {
				b.Fatalf("record produced at offset %d, want %d", r.Offset, r.Context.Value(offsetKey{}))
			}
		}
		recs = recs[:0]
	}
	for off := range n {
		si := off % benchStreams
		s, id := streams[si], fmt.Sprintf("s%d", si)
		block := 1000 + s.next
		rs := []reorg.BlockRange{{Network: "mainnet", Start: block, End: block, Hash: benchHash(block), PrevHash: benchHash(block - 1), HasPrevHash: true}}
		batch := offsets.Batch{Seq: s.next, ID: reorg.BatchID(rs), Ranges: rs,
			Spans: []offsets.Span{{Topic: "amp." + id, Partition: 0, First: int64(s.next) * 100, Last: int64(s.next)*100 + 99}}}
		s.next++
		s.batches = append(s.batches, batch)
		if len(s.batches) > benchRetained {
			s.batches = s.batches[1:]
		}
		snap := reorg.Snapshot{Next: s.next, Watermarks: make([]reorg.Watermark, len(s.batches))}
		state := &offsets.StreamState{Next: s.next, BaseOffset: s.lastFull, Retained: make([]uint64, len(s.batches))}
		for i, rb := range s.batches {
			snap.Watermarks[i] = reorg.Watermark{Seq: rb.Seq, Ranges: rb.Ranges}
			state.Retained[i] = rb.Seq
		}
		wm := offsets.Watermark{Stream: id, Sequence: batch.Seq, TsMs: int64(off), Cursor: snap.Cursor(), State: state, Rows: 100,
			Batches: []offsets.CommittedBatch{{BatchID: batch.ID, Sequence: batch.Seq, Ranges: rs, Rows: 100, Spans: batch.Spans}}}
		full := s.lastFull < 0 || s.sinceFull+1 >= fullEvery
		if full {
			cp := offsets.Checkpoint{Stream: id, Version: batch.Seq, Fingerprint: "fp", CommittedAt: time.Unix(0, 0).UTC(),
				ControlOffset: int64(off), Snapshot: snap, Batches: append([]offsets.Batch(nil), s.batches...)}
			if wm.Checkpoint, err = offsets.Marshal(cp); err != nil {
				b.Fatal(err)
			}
			state.BaseOffset = -1
			s.lastFull, s.sinceFull = int64(off), 0
		} else {
			s.sinceFull++
		}
		v, err := codec.AppendWatermark(nil, wm)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Key: []byte(id), Value: v, Partition: 0,
			Context: context.WithValue(ctx, offsetKey{}, off)})
		if len(recs) == 5000 {
			flush()
		}
	}
	flush()
}

type offsetKey struct{}

func benchHash(n uint64) reorg.Hash {
	var h reorg.Hash
	for i := range 8 {
		h[i] = byte(n >> (8 * i))
	}
	h[31] = 1
	return h
}

// peakRSSDelta returns how far the process's peak resident set grew above
// its resident set while fn ran (Linux: VmHWM after resetting it through
// /proc/self/clear_refs), or -1 where that cannot be measured.
func peakRSSDelta(fn func()) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return -1
	}
	base := procStatus("VmRSS")
	fn()
	hwm := procStatus("VmHWM")
	if base < 0 || hwm < 0 {
		return -1
	}
	return hwm - base
}

// procStatus returns a /proc/self/status field in bytes, or -1.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return -1
		}
		return kb << 10
	}
	return -1
}
