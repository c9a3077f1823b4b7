package pipeline

import (
	"sync"
	"sync/atomic"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
)

// maxFreeSlabs bounds the slabs a pool keeps for reuse: enough for the
// records in flight at franz-go's default buffer (64 MiB of ~2 MiB Arrow
// batches' records) to be recycled without allocating, not so many that a
// burst keeps its memory for ever.
const maxFreeSlabs = 48

// slabPool recycles the encoded records of Arrow batches: a slab holds the
// records of one batch and returns to the pool when the producer has
// acknowledged, failed or dropped every one of them. Memory then follows
// what the producer holds (kafka.max_buffered_bytes), not the size of the
// open transaction. It is safe for concurrent use: slabs come back on
// franz-go's goroutines.
type slabPool struct {
	mu   sync.Mutex
	free []*slab
	// live counts the slabs taken and not yet back (tests, leak checks).
	live atomic.Int64
}

// slab is the encoded records of one Arrow batch (out), shared by the
// records produced from it. Its memory is reused only once every record's
// Release and the producing caller's done have been called.
type slab struct {
	out  encode.Batch
	pool *slabPool
	// refs is the records not yet released plus one for the caller while
	// it produces.
	refs atomic.Int64
}

// get returns an empty slab held by the caller, who calls hand for the
// records it produces from it and then done.
func (p *slabPool) get() *slab {
	p.live.Add(1)
	p.mu.Lock()
	var s *slab
	if n := len(p.free); n > 0 {
		s, p.free = p.free[n-1], p.free[:n-1]
	}
	p.mu.Unlock()
	if s == nil {
		s = &slab{pool: p}
	}
	s.refs.Store(1)
	return s
}

// hand counts a record about to be produced with s as its Owner.
func (s *slab) hand() { s.refs.Add(1) }

// Release implements sink.Releaser: the producer has done with one record.
func (s *slab) Release() { s.unref() }

// done drops the caller's hold: s returns to its pool once every record
// handed out is released.
func (s *slab) done() { s.unref() }

func (s *slab) unref() {
	n := s.refs.Add(-1)
	switch {
	case n > 0:
		return
	case n < 0:
		panic("pipeline: a slab was released more often than its records were handed out")
	}
	p := s.pool
	s.out.Reset()
	p.live.Add(-1)
	p.mu.Lock()
	if len(p.free) < maxFreeSlabs {
		p.free = append(p.free, s)
	}
	p.mu.Unlock()
}
