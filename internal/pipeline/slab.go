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

// maxFreeBytes is the least a SlabCache keeps for reuse (NewSlabCache).
const maxFreeBytes = 8 << 20

// SlabCache keeps the slabs (encoded records) that streams have finished
// with, for reuse, within one bound shared by every stream given it
// (Deps.Slabs): what a process keeps between batches does not grow with
// its number of streams (with a cache each, 100 idle streams could keep
// 100 × the bound). Safe for concurrent use.
type SlabCache struct {
	// maxFree bounds the encoded bytes kept for reuse. cmd/bridge sets it
	// to kafka.max_buffered_bytes: at a commit every record in flight is
	// acknowledged and its slab comes back at once, and the next
	// transaction takes as many again, so a cache that kept less would
	// allocate (and the collector free) most of them at every commit. A
	// slab is either in flight or free, so this does not raise a stream's
	// peak: what is in flight is already bounded by the same setting.
	maxFree   int
	mu        sync.Mutex
	free      []*slab
	freeBytes int
}

// NewSlabCache returns an empty cache, for the streams of one process,
// that keeps up to maxFree bytes of slabs for reuse (at least 8 MiB; pass
// kafka.max_buffered_bytes).
func NewSlabCache(maxFree int) *SlabCache { return &SlabCache{maxFree: max(maxFree, maxFreeBytes)} }

// slabPool hands out the slabs of one stream (its workers included): a
// slab holds the records of one batch and returns to the pool's cache
// when the producer has acknowledged, failed or dropped every one of
// them. Memory then follows what the producer holds
// (kafka.max_buffered_bytes), not the size of the open transaction. It is
// safe for concurrent use: slabs come back on franz-go's goroutines. The
// zero value has a cache of its own.
type slabPool struct {
	shared atomic.Pointer[SlabCache]
	// maxFree bounds the cache of its own (when no shared one is set).
	maxFree int
	// live counts the slabs taken and not yet back (tests, leak checks).
	live atomic.Int64
}

// slab is the encoded records of one Arrow batch (out), shared by the
// records produced from it. Its memory is reused only once every record's
// Release and the producing caller's done have been called.
type slab struct {
	out encode.Batch
	// pool is the pool that handed the slab out last.
	pool *slabPool
	// refs is the records not yet released plus one for the caller while
	// it produces.
	refs atomic.Int64
	// size is what out held when the slab came back (its memory).
	size int
}

// cache is p's SlabCache: the one set (Stream's Deps.Slabs), else one of
// its own.
func (p *slabPool) cache() *SlabCache {
	if c := p.shared.Load(); c != nil {
		return c
	}
	p.shared.CompareAndSwap(nil, NewSlabCache(p.maxFree))
	return p.shared.Load()
}

// get returns an empty slab held by the caller, who calls hand for the
// records it produces from it and then done.
func (p *slabPool) get() *slab {
	p.live.Add(1)
	c := p.cache()
	c.mu.Lock()
	var s *slab
	if n := len(c.free); n > 0 {
		s, c.free = c.free[n-1], c.free[:n-1]
		c.freeBytes -= s.size
	}
	c.mu.Unlock()
	if s == nil {
		s = &slab{}
	}
	s.pool = p
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
	c := p.cache()
	c.mu.Lock()
	if c.freeBytes+s.size <= c.maxFree {
		c.free = append(c.free, s)
		c.freeBytes += s.size
	}
	c.mu.Unlock()
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
