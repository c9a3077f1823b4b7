package source

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecvPoolSizes checks that recvPool hands out buffers of the asked
// length, and those up to a frame with the frame capacity, the one Put
// keeps (whether sync.Pool then hands a kept buffer back is its own
// choice, so that reuse is not asserted).
func TestRecvPoolSizes(t *testing.T) {
	var p recvPool
	for _, n := range []int{0, 1, 1024, frameBufferSize, frameBufferSize + 1, 4 << 20} {
		b := p.Get(n)
		require.Len(t, *b, n)
		if n <= frameBufferSize {
			require.Equal(t, frameBufferSize, cap(*b), "a buffer of %d bytes has the frame capacity", n)
		}
		for i := range *b {
			(*b)[i] = 0xff
		}
		p.Put(b)
	}
	// After Puts of buffers that held other bytes, Get still answers the
	// asked length.
	b := p.Get(10)
	require.Len(t, *b, 10)
}
