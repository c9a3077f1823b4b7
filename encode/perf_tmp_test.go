package encode

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func BenchmarkTmpCol(b *testing.B) {
	full := transactionsBatch(memory.DefaultAllocator, 10000, 1)
	for _, idx := range []int{2, 4, 7, 17, 22} {
		s := arrow.NewSchema([]arrow.Field{full.Schema().Field(idx)}, nil)
		rec := array.NewRecordBatch(s, []arrow.Array{full.Column(idx)}, 10000)
		enc, _ := NewEncoder(Config{Stream: "s"}, s)
		w := enc.cs.cols[0]
		_ = w.bind(rec.Column(0))
		buf := make([]byte, 0, 20<<20)
		b.Run(s.Field(0).Name, func(b *testing.B) {
			c0 := cpuTime()
			for b.Loop() {
				buf = buf[:0]
				for i := range 10000 {
					buf = w.write(buf, i)
				}
			}
			b.ReportMetric(float64((cpuTime()-c0).Nanoseconds())/float64(b.N*10000), "cpu-ns/val")
		})
	}
}
