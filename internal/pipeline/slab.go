package pipeline

import (
	"context"
	"slices"
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

// firstSlabBytes is what a pool's first slab is charged before it is
// encoded (later ones: the pool's last slab).
const firstSlabBytes = 64 << 10

// SlabCache keeps the slabs (encoded records) that streams have finished
// with, for reuse, within one bound shared by every stream given it
// (Deps.Slabs): what a process keeps between batches does not grow with
// its number of streams (with a cache each, 100 idle streams could keep
// 100 × the bound). It also bounds the slabs out, encoded and not yet
// acknowledged by Kafka, of all those streams together: a stream waits for
// room before it encodes (slabPool.take), in the order the streams asked,
// so 100 busy streams hold what one would and take turns. Safe for
// concurrent use.
type SlabCache struct {
	// maxFree bounds the encoded bytes kept for reuse. cmd/bridge sets it
	// to kafka.max_buffered_bytes: at a commit every record in flight is
	// acknowledged and its slab comes back at once, and the next
	// transaction takes as many again, so a cache that kept less would
	// allocate (and the collector free) most of them at every commit. A
	// slab is either in flight or free, so this does not raise a stream's
	// peak: what is in flight is already bounded by the same setting.
	maxFree int
	// limit bounds out: 1.5 × maxFree, what one stream held before the
	// bound was shared (the producer's buffer plus the next transaction's
	// held batches, half as much).
	limit     int64
	mu        sync.Mutex
	free      []*slab
	freeBytes int
	// out is what the slabs handed out and not yet back are charged: an
	// estimate until encoded (slabPool.take), then their size.
	out     int64
	waiters []*slabWaiter // FIFO
}

// slabWaiter is a take waiting for room in a SlabCache.
type slabWaiter struct {
	charge int64
	ready  chan struct{} // closed once charge is admitted
}

// NewSlabCache returns an empty cache, for the streams of one process,
// that keeps up to maxBuffered bytes of slabs for reuse (at least 8 MiB;
// pass kafka.max_buffered_bytes) and lets them have 1.5 × that out at once.
func NewSlabCache(maxBuffered int) *SlabCache {
	m := max(maxBuffered, maxFreeBytes)
	return &SlabCache{maxFree: m, limit: int64(m) * 3 / 2}
}

// admit charges n bytes to the slabs out, waiting while they are at the
// limit or an earlier take waits. Before its first wait it calls flush (if
// set): the caller then produces what only it can let go of, so that the
// wait never depends on the waiter.
func (c *SlabCache) admit(ctx context.Context, n int64, flush func(context.Context) error) error {
	flushed := flush == nil
	for {
		c.mu.Lock()
		if c.out < c.limit && len(c.waiters) == 0 {
			c.out += n
			c.mu.Unlock()
			return nil
		}
		if !flushed {
			c.mu.Unlock()
			flushed = true
			if err := flush(ctx); err != nil {
				return err
			}
			continue
		}
		w := &slabWaiter{charge: n, ready: make(chan struct{})}
		c.waiters = append(c.waiters, w)
		c.mu.Unlock()
		select {
		case <-w.ready:
			return nil
		case <-ctx.Done():
			c.mu.Lock()
			if i := slices.Index(c.waiters, w); i >= 0 {
				c.waiters = slices.Delete(c.waiters, i, i+1)
				c.wakeLocked() // the next may fit now
				c.mu.Unlock()
			} else {
				c.mu.Unlock()
				c.uncharge(n) // admitted meanwhile
			}
			return ctx.Err()
		}
	}
}

// recharge changes a charge of old bytes to new ones.
func (c *SlabCache) recharge(old, n int64) {
	if old == n {
		return
	}
	c.mu.Lock()
	c.out += n - old
	c.wakeLocked()
	c.mu.Unlock()
}

// uncharge gives back n bytes.
func (c *SlabCache) uncharge(n int64) { c.recharge(n, 0) }

// wakeLocked admits the waiters at the head of the queue while there is
// room. c.mu is held.
func (c *SlabCache) wakeLocked() {
	for len(c.waiters) > 0 && c.out < c.limit {
		w := c.waiters[0]
		c.waiters[0] = nil
		c.waiters = c.waiters[1:]
		c.out += w.charge
		close(w.ready)
	}
}

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
	// last is the memory of the pool's last encoded slab: what the next
	// one is charged until it is encoded.
	last atomic.Int64
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
	// size is the memory out held when the slab came back (Mem).
	size int
	// charged is what the slab is charged in its cache's slabs out.
	charged int64
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

// estimate is what p's next slab is charged before it is encoded.
func (p *slabPool) estimate() int64 {
	if n := p.last.Load(); n > 0 {
		return n
	}
	return firstSlabBytes
}

// take is get after waiting for room among the slabs out of p's cache
// (SlabCache.admit, with flush). It fails only with ctx's error.
func (p *slabPool) take(ctx context.Context, flush func(context.Context) error) (*slab, error) {
	n := p.estimate()
	if err := p.cache().admit(ctx, n, flush); err != nil {
		return nil, err
	}
	return p.getCharged(n), nil
}

// encoded charges s the memory it holds once encoded (its capacity, not
// only the bytes used) instead of its estimate.
func (p *slabPool) encoded(s *slab) {
	n := int64(s.out.Mem())
	p.last.Store(n)
	p.cache().recharge(s.charged, n)
	s.charged = n
}

// get returns an empty slab held by the caller, who calls hand for the
// records it produces from it and then done. It does not wait for room
// (take does): the slab is charged its estimate.
func (p *slabPool) get() *slab {
	n := p.estimate()
	c := p.cache()
	c.mu.Lock()
	c.out += n
	c.mu.Unlock()
	return p.getCharged(n)
}

// getCharged is get for a slab already charged n bytes.
func (p *slabPool) getCharged(n int64) *slab {
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
	s.charged = n
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
	s.size = s.out.Mem()
	s.out.Reset()
	p.live.Add(-1)
	c := p.cache()
	c.mu.Lock()
	c.out -= s.charged
	s.charged = 0
	if c.freeBytes+s.size <= c.maxFree {
		c.free = append(c.free, s)
		c.freeBytes += s.size
	}
	c.wakeLocked()
	c.mu.Unlock()
}

// encodeSlabs encodes rec (meta.RowOffset is its first row's index in the
// microbatch) in slices of at most slabRows rows, each into a slab of p,
// and calls fn with each slab (held by the caller: fn must call its done,
// also on an error) and the index in the microbatch of its first row.
// Each slab waits for room among the process's slabs out (take, with
// flush). rec stays the caller's. An error of the encoder is returned with
// encoding set, fn's and ctx's as they are.
func (p *slabPool) encodeSlabs(ctx context.Context, enc *encode.Encoder, rec arrow.RecordBatch, meta encode.BatchMeta,
	flush func(context.Context) error, fn func(s *slab, rowOffset int64) error) (encoding bool, err error) {
	n, base := rec.NumRows(), meta.RowOffset
	for off := int64(0); off < n; off += slabRows {
		part := rec
		if end := min(n, off+slabRows); off > 0 || end < n {
			part = rec.NewSlice(off, end)
		}
		s, err := p.take(ctx, flush)
		if err != nil {
			if part != rec {
				part.Release()
			}
			return false, err
		}
		meta.RowOffset = base + off
		err = enc.Encode(part, meta, &s.out)
		if part != rec {
			part.Release()
		}
		if err != nil {
			s.done()
			return true, err
		}
		p.encoded(s)
		if err := fn(s, meta.RowOffset); err != nil {
			return false, err
		}
	}
	return false, nil
}
