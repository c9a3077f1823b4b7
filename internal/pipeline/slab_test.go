package pipeline

import (
	"testing"

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
