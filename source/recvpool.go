package source

import (
	"sync"

	"google.golang.org/grpc/mem"
)

// frameBufferSize is the size of the buffers recvPool keeps: gRPC's
// largest HTTP/2 DATA frame (it advertises no larger SETTINGS_MAX_FRAME_SIZE),
// so every frame of a Flight message fits in one.
const frameBufferSize = 16 << 10

// recvPool is the gRPC buffer pool of the Flight client. gRPC's default
// pool zeroes each recycled buffer before it hands it out (about 3% of the
// bridge's CPU on SELECT *, all of it on the frames of Amp's ~2 MiB
// messages); gRPC fills every buffer it gets from a pool before it reads
// it (a DATA frame's buffer by reading the frame, a copy's by copying), so
// this pool hands buffers out as they were left. Buffers of frame size are
// kept; larger ones (a message gathered whole, rare) are left to the GC.
//
// The buffers hold only what this process received from its own Amp
// server, so nothing of another connection's can show through.
type recvPool struct {
	frames sync.Pool
}

var _ mem.BufferPool = (*recvPool)(nil)

// Get returns a buffer of length n.
func (p *recvPool) Get(n int) *[]byte {
	if n <= frameBufferSize {
		if b, ok := p.frames.Get().(*[]byte); ok {
			*b = (*b)[:n]
			return b
		}
		b := make([]byte, n, frameBufferSize)
		return &b
	}
	b := make([]byte, n)
	return &b
}

// Put keeps b for a later Get if it has the frame size.
func (p *recvPool) Put(b *[]byte) {
	if cap(*b) == frameBufferSize {
		p.frames.Put(b)
	}
}
