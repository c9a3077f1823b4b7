package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlabReusedOnlyAfterEveryRelease checks that a slab's memory goes back
// to the pool only when the caller is done with it and every record handed
// out has been released, and that the next get reuses it then.
func TestSlabReusedOnlyAfterEveryRelease(t *testing.T) {
	var p slabPool
	s := p.get()
	for range 3 {
		s.hand()
	}
	s.done()
	s.Release()
	s.Release()
	require.Equal(t, int64(1), p.live.Load(), "a record is still in flight")
	other := p.get()
	assert.NotSame(t, s, other, "a slab with a record in flight must not be handed out again")
	other.done()
	s.Release()
	assert.Equal(t, int64(0), p.live.Load())
	again := p.get()
	again2 := p.get()
	assert.True(t, again == s || again2 == s, "a released slab is reused")
	again.done()
	again2.done()
}

// TestSlabCallerHold checks that records released before the caller is
// done (acknowledged while it still produces) do not return the slab.
func TestSlabCallerHold(t *testing.T) {
	var p slabPool
	s := p.get()
	s.hand()
	s.Release() // acknowledged at once
	require.Equal(t, int64(1), p.live.Load(), "the caller still produces from the slab")
	assert.NotSame(t, s, p.get())
	s.done()
	assert.Equal(t, int64(1), p.live.Load(), "only the second get's slab is out")
}

// TestSlabOverRelease checks that a release without a record handed out is
// caught instead of reusing memory still in use.
func TestSlabOverRelease(t *testing.T) {
	var p slabPool
	s := p.get()
	s.done()
	assert.Panics(t, s.Release)
}

// TestSlabCacheShared checks that streams given one SlabCache reuse each
// other's slabs (what a process keeps, at most its maxFree, does not grow
// with its number of streams), and that streams without one do not.
func TestSlabCacheShared(t *testing.T) {
	c := NewSlabCache(0)
	a, b := New(config.StreamConfig{ID: "a"}, Deps{Slabs: c}), New(config.StreamConfig{ID: "b"}, Deps{Slabs: c})
	s := a.slabs.get()
	s.done()
	assert.Zero(t, a.slabs.live.Load())
	got := b.slabs.get()
	assert.Same(t, s, got, "stream b reuses the slab stream a finished with")
	assert.Equal(t, int64(1), b.slabs.live.Load(), "the slab is counted on the pool that handed it out last")
	got.done()
	assert.Zero(t, b.slabs.live.Load())
	assert.Zero(t, a.slabs.live.Load())

	own := New(config.StreamConfig{ID: "own"}, Deps{})
	other := own.slabs.get()
	assert.NotSame(t, s, other, "a stream without Deps.Slabs has a cache of its own")
	other.done()
	assert.NotSame(t, c, own.slabs.cache())
}

// TestSlabCacheBoundsSlabsOut checks the process-wide bound on slabs out:
// a take waits while the slabs out of every pool of the cache are at the
// limit (1.5 × maxBuffered), calls its flush once before it waits, is
// admitted in the order the takes came when slabs come back, and gives up
// on its context without leaking its charge.
func TestSlabCacheBoundsSlabsOut(t *testing.T) {
	c := NewSlabCache(8 << 20) // limit 12 MiB
	a, b := &slabPool{}, &slabPool{}
	a.shared.Store(c)
	b.shared.Store(c)
	a.last.Store(4 << 20) // each slab is charged 4 MiB
	b.last.Store(4 << 20)
	ctx := t.Context()
	var held []*slab
	for range 3 {
		s, err := a.take(ctx, nil)
		require.NoError(t, err)
		held = append(held, s)
	}
	assert.Equal(t, int64(12<<20), c.out)

	type got struct {
		who string
		s   *slab
	}
	admitted := make(chan got, 2)
	flushed := 0
	go func() {
		s, err := b.take(ctx, func(context.Context) error { flushed++; return nil })
		assert.NoError(t, err)
		admitted <- got{"first", s}
	}()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiters) == 1 }, 5*time.Second, time.Millisecond)
	go func() {
		s, err := a.take(ctx, nil)
		assert.NoError(t, err)
		admitted <- got{"second", s}
	}()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiters) == 2 }, 5*time.Second, time.Millisecond)
	select {
	case g := <-admitted:
		t.Fatalf("%s take admitted with the slabs out at the limit", g.who)
	case <-time.After(50 * time.Millisecond):
	}
	assert.Equal(t, 1, flushed, "the flush runs once, before the wait")

	held[0].done()
	g := <-admitted
	assert.Equal(t, "first", g.who, "the takes are admitted in order")
	select {
	case g := <-admitted:
		t.Fatalf("%s take admitted beyond the limit", g.who)
	case <-time.After(50 * time.Millisecond):
	}
	held[1].done()
	assert.Equal(t, "second", (<-admitted).who)

	// A take that gives up leaves nothing charged.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := b.take(cctx, nil)
		errc <- err
	}()
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.waiters) == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	held[2].done()
	g.s.done()
	c.mu.Lock()
	out, waiting := c.out, len(c.waiters)
	c.mu.Unlock()
	assert.Equal(t, int64(4<<20), out, "only the second take's slab is out")
	assert.Zero(t, waiting)
}
