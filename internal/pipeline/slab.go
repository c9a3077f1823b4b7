package pipeline

import (
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
)

// slabRows is the most rows of one slab: a slab is reused only when all
// its records are acknowledged, so a slab of a whole Arrow batch (8,192
// rows of SELECT * are ~8 MB) would keep several times the producer's
// buffer alive.
const slabRows = 1024

// maxFreeBytes is the least a stream's pool keeps for reuse
// (slabPool.maxFree).
const maxFreeBytes = 8 << 20

// slabPool recycles the encoded records of Arrow batches: a slab holds the
// records of one batch and returns to the pool when the producer has
// acknowledged, failed or dropped every one of them. Memory then follows
// what the producer holds (kafka.max_buffered_bytes), not the size of the
// open transaction. It is safe for concurrent use: slabs come back on
// franz-go's goroutines.
type slabPool struct {
	// maxFree bounds the encoded bytes kept for reuse (0: maxFreeBytes).
	// The stream sets it to kafka.max_buffered_bytes: at a
	// commit every record in flight is acknowledged and its slab comes
	// back at once, and the next transaction takes as many again, so a
	// pool that kept less would allocate (and the collector free) most of
	// them at every commit. A slab is either in flight or free, so this
	// does not raise the peak: what is in flight is already bounded by
	// the same setting.
	maxFree   int
	mu        sync.Mutex
	free      []*slab
	freeBytes int
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
	// size is what out held when the slab came back (its memory).
	size int
}

// get returns an empty slab held by the caller, who calls hand for the
// records it produces from it and then done.
func (p *slabPool) get() *slab {
	p.live.Add(1)
	p.mu.Lock()
	var s *slab
	if n := len(p.free); n > 0 {
		s, p.free = p.free[n-1], p.free[:n-1]
		p.freeBytes -= s.size
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

// handN counts n records about to be produced with s as their Owner, at
// once: the producing goroutine then does not write the counter that
// franz-go's goroutines decrement for every record. The caller gives back
// (unhand) the records it ends up not producing.
func (s *slab) handN(n int) { s.refs.Add(int64(n)) }

// unhand gives back n records counted by handN that were not produced.
func (s *slab) unhand(n int) {
	if n > 0 {
		s.unref(int64(n))
	}
}

// Release implements sink.Releaser: the producer has done with one record.
func (s *slab) Release() { s.unref(1) }

// done drops the caller's hold: s returns to its pool once every record
// handed out is released.
func (s *slab) done() { s.unref(1) }

func (s *slab) unref(k int64) {
	n := s.refs.Add(-k)
	switch {
	case n > 0:
		return
	case n < 0:
		panic("pipeline: a slab was released more often than its records were handed out")
	}
	p := s.pool
	s.size = s.out.Size()
	s.out.Reset()
	p.live.Add(-1)
	p.mu.Lock()
	limit := p.maxFree
	if limit <= 0 {
		limit = maxFreeBytes
	}
	if p.freeBytes+s.size <= limit {
		p.free = append(p.free, s)
		p.freeBytes += s.size
	}
	p.mu.Unlock()
}

// encodeSlabs encodes rec (meta.RowOffset is its first row's index in the
// microbatch) in slices of at most slabRows rows, each into a slab of p,
// and calls fn with each slab (held by the caller: fn must call its done,
// also on an error) and the index in the microbatch of its first row.
// rec stays the caller's. An error of the encoder is returned with
// encoding set, fn's as it is.
func (p *slabPool) encodeSlabs(enc *encode.Encoder, rec arrow.RecordBatch, meta encode.BatchMeta,
	fn func(s *slab, rowOffset int64) error) (encoding bool, err error) {
	n, base := rec.NumRows(), meta.RowOffset
	for off := int64(0); off < n; off += slabRows {
		part := rec
		if end := min(n, off+slabRows); off > 0 || end < n {
			part = rec.NewSlice(off, end)
		}
		s := p.get()
		meta.RowOffset = base + off
		err := enc.Encode(part, meta, &s.out)
		if part != rec {
			part.Release()
		}
		if err != nil {
			s.done()
			return true, err
		}
		if err := fn(s, meta.RowOffset); err != nil {
			return false, err
		}
	}
	return false, nil
}
