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
	again := p.Get(10000) // the same class: reused
	assert.Same(t, b, again)
	assert.Len(t, *again, 10000)
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
	assert.Equal(t, 0, class(1))
	assert.Equal(t, 14, class(16384))
	assert.Equal(t, 15, class(16385))
}
