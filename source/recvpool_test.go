package source

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRecvPoolSizes checks that recvPool hands out buffers of the asked
// length, frame-sized ones with the frame capacity (so that Put keeps
// them), and takes back what it handed out.
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
	// A kept buffer comes back at the asked length, whatever it held.
	b := p.Get(10)
	require.Len(t, *b, 10)
}
