package reorg

import (
	"testing"
)

// BenchmarkMachine measures events/s through the state machine on a live
// stream shape: microbatches of 1..4 blocks, each two data batches of 100
// rows and a completion, a commit at every watermark, and every 100
// microbatches a reorg replacing the last microbatch, with retention 128.
func BenchmarkMachine(b *testing.B) {
	m, err := New(DefaultConfig(), Snapshot{})
	if err != nil {
		b.Fatal(err)
	}
	var (
		events int
		epoch  byte
		batch  int
		last   BlockRange
		ranges = make([]BlockRange, 1)
	)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step := i % 3
		if step == 0 {
			batch++
			r := BlockRange{Network: "eth", Start: last.End + 1, PrevHash: last.Hash, HasPrevHash: true}
			if batch == 1 {
				r = BlockRange{Network: "eth"}
			} else if batch%100 == 0 {
				epoch++ // reorg: replace the last microbatch
				r.Start, r.PrevHash = last.Start, last.PrevHash
			}
			r.End = r.Start + uint64(batch%4)
			r.Hash = H("eth", epoch, r.End)
			ranges[0], last = r, r
		}
		evs, err := m.Apply(ranges, step == 2, (1-step/2)*100)
		if err != nil {
			b.Fatal(err)
		}
		events += len(evs)
		if n := len(evs); n > 0 && evs[n-1].Kind == KindWatermark {
			if err := m.Commit(evs[n-1].Seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
