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

// maxFreeBytes bounds the encoded bytes a SlabCache keeps for reuse: the
// slabs of the records in flight come back as they are acknowledged and
// are taken again at once, so a few batches' worth is enough to recycle
// without allocating, and a burst does not keep its memory for ever.
const maxFreeBytes = 8 << 20

// SlabCache keeps the slabs (encoded records) that streams have finished
// with, for reuse, within one bound (8 MiB) shared by every stream given
// it (Deps.Slabs): what a process keeps between batches does not grow
// with its number of streams (with a cache each, 100 idle streams could
// keep 800 MiB). Safe for concurrent use.
type SlabCache struct {
	mu        sync.Mutex
	free      []*slab
	freeBytes int
}

// NewSlabCache returns an empty cache, for the streams of one process.
func NewSlabCache() *SlabCache { return &SlabCache{} }

// slabPool hands out the slabs of one stream (its workers included): a
// slab holds the records of one batch and returns to the pool's cache
// when the producer has acknowledged, failed or dropped every one of
// them. Memory then follows what the producer holds
// (kafka.max_buffered_bytes), not the size of the open transaction. It is
// safe for concurrent use: slabs come back on franz-go's goroutines. The
// zero value has a cache of its own.
type slabPool struct {
	shared atomic.Pointer[SlabCache]
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
	p.shared.CompareAndSwap(nil, NewSlabCache())
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
	s.size = s.out.Size()
	s.out.Reset()
	p.live.Add(-1)
	c := p.cache()
	c.mu.Lock()
	if c.freeBytes+s.size <= maxFreeBytes {
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
