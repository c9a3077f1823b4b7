package source

import (
	"math/bits"
	"sync"

	grpcmem "google.golang.org/grpc/mem"
)

// maxIdleFrames is how many bytes of received HTTP/2 frames a Client keeps
// for reuse: the frames of two 2 MiB messages, what one busy stream
// receives at a time, with room to spare.
const maxIdleFrames = 4 << 20

// framePool is the buffer pool of a Client's gRPC connection, into which
// gRPC reads the HTTP/2 frames of the messages it receives (and which
// flightDataCodec copies into each message's one buffer). gRPC's default
// pool keeps every buffer given back in a sync.Pool until two collections
// have passed, so the frames of many streams receiving at once stay
// allocated long after; this one keeps at most maxIdle bytes of them and
// lets the collector have the rest. Safe for concurrent use.
type framePool struct {
	mu      sync.Mutex
	maxIdle int
	idle    int
	free    [64][]*[]byte // by capacity's power of two
}

var _ grpcmem.BufferPool = (*framePool)(nil)

func newFramePool(maxIdle int) *framePool { return &framePool{maxIdle: maxIdle} }

// class is the index of the smallest power of two that holds n bytes.
func class(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// Get returns a buffer of length bytes (its contents are not zeroed).
func (p *framePool) Get(length int) *[]byte {
	c := class(length)
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c] = p.free[c][:l-1]
		p.idle -= cap(*b)
		p.mu.Unlock()
		*b = (*b)[:length]
		return b
	}
	p.mu.Unlock()
	b := make([]byte, length, 1<<c)
	return &b
}

// Put keeps buf for reuse, unless the pool holds maxIdle bytes already
// or buf did not come from Get.
func (p *framePool) Put(buf *[]byte) {
	n := cap(*buf)
	if n == 0 || n&(n-1) != 0 {
		return
	}
	c := class(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+n > p.maxIdle {
		return
	}
	p.idle += n
	p.free[c] = append(p.free[c], buf)
}
