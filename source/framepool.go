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

// maxIdleMessages is how many bytes of message buffers (flightDataCodec)
// a Client keeps for reuse once the envelopes made of them are released:
// four 2 MiB messages, what a few busy streams release between two of
// their receives.
const maxIdleMessages = 8 << 20

// framePool is a pool of byte buffers with a bound on what it keeps idle.
// A Client has two: the buffer pool of its gRPC connection, into which
// gRPC reads the HTTP/2 frames of the messages it receives, and the pool
// of the buffers that flightDataCodec gathers each received message into
// (given back when the envelope made of it is released). gRPC's default
// pool keeps every buffer given back in a sync.Pool until two collections
// have passed, so the frames of many streams receiving at once stay
// allocated long after; this one keeps at most maxIdle bytes of them and
// lets the collector have the rest. Safe for concurrent use.
type framePool struct {
	mu      sync.Mutex
	maxIdle int
	idle    int
	free    [numClasses][]*[]byte // by size class of the capacity
}

var _ grpcmem.BufferPool = (*framePool)(nil)

func newFramePool(maxIdle int) *framePool { return &framePool{maxIdle: maxIdle} }

// numClasses is the number of size classes (class).
const numClasses = 4 + 4*(bits.UintSize-3)

// class returns the smallest size class that holds n bytes: its index and
// its size. The classes are 1, 2, 4 and 8 bytes, then four per doubling
// (5/8, 6/8, 7/8 and 8/8 of each power of two), so a buffer is at most
// a quarter larger than what was asked for: a 2.1 MiB message takes
// 2.5 MiB, not 4.
func class(n int) (idx, size int) {
	n = max(n, 1)
	e := bits.Len(uint(n - 1)) // 1<<e is the smallest power of two >= n
	if e <= 3 {
		return e, 1 << e
	}
	step := 1 << (e - 3)
	k := (n + step - 1) / step // 5..8 eighths of 1<<e
	return 4 + 4*(e-4) + k - 5, k * step
}

// Get returns a buffer of length bytes (its contents are not zeroed).
func (p *framePool) Get(length int) *[]byte {
	c, size := class(length)
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
	b := make([]byte, length, size)
	return &b
}

// Put keeps buf for reuse, unless the pool holds maxIdle bytes already
// or buf did not come from Get (its capacity is no class size). The
// caller must not use buf afterwards. A nil pool or buf is ignored.
func (p *framePool) Put(buf *[]byte) {
	if p == nil || buf == nil {
		return
	}
	n := cap(*buf)
	c, size := class(n)
	if n == 0 || size != n {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle+n > p.maxIdle {
		return
	}
	p.idle += n
	p.free[c] = append(p.free[c], buf)
}
