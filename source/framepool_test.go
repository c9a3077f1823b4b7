package source

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFramePool(t *testing.T) {
	p := newFramePool(64 << 10)
	b := p.Get(16384)
	require.Len(t, *b, 16384)
	assert.Equal(t, 16384, cap(*b))
	(*b)[0] = 7
	p.Put(b)
	again := p.Get(15000) // the same class: reused
	assert.Same(t, b, again)
	assert.Len(t, *again, 15000)
	p.Put(again)

	// At most maxIdle bytes are kept: the fifth 16 KiB frame is dropped.
	var bufs []*[]byte
	for range 6 {
		bufs = append(bufs, p.Get(16384))
	}
	for _, b := range bufs {
		p.Put(b)
	}
	assert.Equal(t, 64<<10, p.idle)
	kept := 0
	for range 6 {
		b := p.Get(16384)
		for _, k := range bufs {
			if k == b {
				kept++
			}
		}
	}
	assert.Equal(t, 4, kept, "buffers beyond maxIdle were kept")
	assert.Equal(t, 0, p.idle)

	// A buffer that did not come from Get (its capacity is no class) is
	// not kept.
	odd := make([]byte, 1000)
	p.Put(&odd)
	assert.Equal(t, 0, p.idle)
}

func TestFramePoolClasses(t *testing.T) {
	for _, c := range []struct{ n, idx, size int }{
		{0, 0, 1}, {1, 0, 1}, {2, 1, 2}, {3, 2, 4}, {8, 3, 8},
		{9, 4, 10}, {10, 4, 10}, {11, 5, 12}, {16, 7, 16}, {17, 8, 20},
		{16384, 4 + 4*10 + 3, 16384}, {16385, 4 + 4*11, 20480},
		{2<<20 + 1, 4 + 4*18, 5 << 19}, {5<<19 + 1, 4 + 4*18 + 1, 6 << 19},
	} {
		idx, size := class(c.n)
		assert.Equal(t, c.idx, idx, "class(%d)", c.n)
		assert.Equal(t, c.size, size, "class(%d)", c.n)
	}
	// Every size is the smallest class that holds it, at most a quarter
	// larger, and the classes grow with their index.
	prevIdx, prevSize := 0, 1
	for n := 1; n < 1<<22; n += 1 + n/7 {
		idx, size := class(n)
		require.GreaterOrEqual(t, size, n)
		require.LessOrEqual(t, size, max(8, n+n/4), "class(%d)", n)
		require.Less(t, idx, numClasses)
		if idx == prevIdx {
			require.Equal(t, prevSize, size)
		} else {
			require.Greater(t, idx, prevIdx)
			require.Greater(t, size, prevSize)
		}
		prevIdx, prevSize = idx, size
	}
}
