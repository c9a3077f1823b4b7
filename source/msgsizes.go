package source

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/credentials"
)

// headerCall is the metadata key that tags a DoGet call for sizeWatch: its
// HEADERS carry it, which binds the call to its HTTP/2 stream.
const headerCall = "amp-bridge-call"

// bindWait is how long a call waits to see its HEADERS bound to an HTTP/2
// stream before it receives without knowing its messages' sizes. gRPC
// writes a stream's HEADERS as soon as it opens the stream, and Amp cannot
// answer before they are written, so only a connection that sizeWatch
// cannot read (sizedConn.broken) ever makes a call wait that long.
const bindWait = 5 * time.Second

// sizeWatch learns the size of each message that Amp sends on a DoGet
// stream before gRPC receives it, so that the stream reserves room in the
// read budget for exactly that message before it asks gRPC for it.
//
// gRPC has no hook between reading a message's 5-byte prefix, which
// carries its length, and receiving its body: once a stream asks for a
// message, gRPC widens the stream's HTTP/2 window to the message's length
// and receives all of it. So the Client reads the HTTP/2 frames of its
// connections beside gRPC (sizedConn): on the way out, the HEADERS of each
// DoGet, whose metadata carries the call's tag (headerCall), bind its
// HTTP/2 stream to the call; on the way in, the DATA of a bound stream is
// followed message by message, and each prefix that arrives queues its
// message's length for the call. Until the prefix of its next message
// arrives a stream holds no room; Amp can send it at most the stream's
// HTTP/2 window meanwhile (amp.receive_window_bytes).
type sizeWatch struct {
	mu    sync.Mutex
	last  uint64
	calls map[string]*callSizes // by tag
}

func newSizeWatch() *sizeWatch { return &sizeWatch{calls: map[string]*callSizes{}} }

// track makes a tag for a new DoGet call; the call's metadata must carry
// it under headerCall. close the callSizes when the call ends.
func (w *sizeWatch) track() *callSizes {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last++
	c := &callSizes{w: w, tag: strconv.FormatUint(w.last, 10), changed: make(chan struct{})}
	w.calls[c.tag] = c
	return c
}

// lookUp returns the call tagged tag, nil if it has ended or stopped
// waiting for its stream.
func (w *sizeWatch) lookUp(tag string) *callSizes {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.calls[tag]
}

// callSizes is what sizeWatch knows of one DoGet call: the lengths of the
// messages whose prefix has arrived and that the call has not yet
// received, in order.
type callSizes struct {
	w   *sizeWatch
	tag string

	mu    sync.Mutex
	sizes []int64
	gen   uint64 // how many times it was bound: a stream of an earlier binding no longer reports
	bound bool   // its HEADERS were seen
	ended bool   // no further message will be seen: next returns unknown
	// changed is closed, and replaced, when any of the above changes.
	changed chan struct{}
}

// next returns the length of the call's next message, waiting until its
// prefix has arrived. known is false when sizeWatch cannot tell: the
// stream ended (the message gRPC returns next is an error, or one that
// arrived before a connection failed), or the call was not bound to a
// stream within bindWait (it is then never bound). It returns ctx's error
// when ctx ends first.
func (c *callSizes) next(ctx context.Context) (n int64, known bool, err error) {
	if c == nil {
		return 0, false, nil
	}
	var timeout <-chan time.Time
	for {
		c.mu.Lock()
		if len(c.sizes) > 0 {
			n = c.sizes[0]
			c.sizes = c.sizes[1:]
			c.mu.Unlock()
			return n, true, nil
		}
		if c.ended {
			c.mu.Unlock()
			return 0, false, nil
		}
		ch, bound := c.changed, c.bound
		c.mu.Unlock()
		if !bound && timeout == nil {
			t := time.NewTimer(bindWait)
			defer t.Stop()
			timeout = t.C
		}
		if bound {
			timeout = nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-timeout:
			// Never to be bound: forget the call, so that a late bind
			// cannot queue sizes out of step with what it receives.
			c.close()
			c.end(0)
		}
	}
}

// change runs f under c.mu and wakes next.
func (c *callSizes) change(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f()
	close(c.changed)
	c.changed = make(chan struct{})
}

// bind starts the call over on a new HTTP/2 stream (gRPC may open the
// call's stream again on another connection before Amp has answered).
// It returns the binding's generation, which push and end take.
func (c *callSizes) bind() (gen uint64) {
	c.change(func() {
		c.gen++
		gen = c.gen
		c.bound, c.ended, c.sizes = true, false, nil
	})
	return gen
}

// push queues the length of a message whose prefix arrived on the
// binding gen.
func (c *callSizes) push(gen uint64, n int64) {
	c.change(func() {
		if gen == c.gen {
			c.sizes = append(c.sizes, n)
		}
	})
}

// end says that no further message will be seen on the binding gen (0:
// on any).
func (c *callSizes) end(gen uint64) {
	c.change(func() {
		if gen == 0 || gen == c.gen {
			c.ended = true
		}
	})
}

// close forgets the call: its DoGet has ended.
func (c *callSizes) close() {
	if c == nil {
		return
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.calls[c.tag] == c {
		delete(c.w.calls, c.tag)
	}
}

// sizedCreds makes every connection of the Client a sizedConn once its
// handshake is done (plaintext or TLS alike).
type sizedCreds struct {
	credentials.TransportCredentials
	w *sizeWatch
}

// ClientHandshake runs the wrapped handshake and wraps the connection.
func (s *sizedCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := s.TransportCredentials.ClientHandshake(ctx, authority, raw)
	if err != nil {
		return conn, info, err
	}
	return newSizedConn(conn, s.w), info, nil
}

// Clone returns a copy that reports to the same sizeWatch.
func (s *sizedCreds) Clone() credentials.TransportCredentials {
	return &sizedCreds{TransportCredentials: s.TransportCredentials.Clone(), w: s.w}
}

// HTTP/2 frame types and flags (RFC 9113 §6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	frameRSTStream    = 0x3
	frameGoAway       = 0x7
	frameContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20
)

// clientPreface is what a client writes before its first frame.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sizedConn is a connection of the Client that reads the HTTP/2 frames
// gRPC writes and reads, for sizeWatch. It copies nothing: it reads the
// 9-byte header of each frame, the header blocks the client writes (to
// find headerCall), and the prefixes of the messages in the DATA of the
// streams bound to a call.
type sizedConn struct {
	net.Conn
	w *sizeWatch

	// in follows the frames read, on gRPC's reader goroutine alone.
	in      frameScanner
	inFrame []byte // the start of a small frame's payload read (RST_STREAM, GOAWAY)

	// out follows the frames written; outMu keeps what is followed in
	// the order it is written.
	outMu   sync.Mutex
	out     frameScanner
	preface int    // bytes of clientPreface still to be written
	block   []byte // the header block being written
	dec     *hpack.Decoder
	tag     string // headerCall's value in the block decoded last
	broken  bool   // a header block could not be decoded: no more binds

	mu      sync.Mutex
	streams map[uint32]*messageTrack // bound HTTP/2 streams, by id
	closed  bool
}

// messageTrack follows the messages of one bound HTTP/2 stream.
type messageTrack struct {
	call *callSizes
	gen  uint64  // the call's binding
	left int64   // bytes of the current message's body still to come; 0 at a prefix
	pfx  [5]byte // the prefix being read
	pfxN int
}

func newSizedConn(c net.Conn, w *sizeWatch) *sizedConn {
	s := &sizedConn{Conn: c, w: w, preface: len(clientPreface), streams: map[uint32]*messageTrack{}}
	// gRPC's encoder keeps HPACK's default 4096-byte table.
	s.dec = hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == headerCall {
			s.tag = f.Value
		}
	})
	return s
}

// Read reads from the connection and follows the frames read.
func (s *sizedConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if n > 0 {
		s.in.feed(p[:n], s.inContent, s.inEnd)
	}
	if err != nil {
		s.endAll()
	}
	return n, err
}

// Write follows the frames written, then writes them: a stream is bound
// before Amp can answer on it.
func (s *sizedConn) Write(p []byte) (int, error) {
	s.outMu.Lock()
	q := p
	if s.preface > 0 {
		k := min(s.preface, len(q))
		s.preface -= k
		q = q[k:]
	}
	s.out.feed(q, s.outContent, s.outEnd)
	defer s.outMu.Unlock() // written in the order followed
	return s.Conn.Write(p)
}

// Close closes the connection: its streams end.
func (s *sizedConn) Close() error {
	s.endAll()
	return s.Conn.Close()
}

// endAll ends every bound stream: the connection has failed or closed.
func (s *sizedConn) endAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	for id, t := range s.streams {
		t.call.end(t.gen)
		delete(s.streams, id)
	}
}

// endStream ends the bound stream id, if any.
func (s *sizedConn) endStream(id uint32) {
	s.mu.Lock()
	t := s.streams[id]
	delete(s.streams, id)
	s.mu.Unlock()
	if t != nil {
		t.call.end(t.gen)
	}
}

// inContent follows what the server sends: the messages in the DATA of
// bound streams; the payloads of RST_STREAM and GOAWAY.
func (s *sizedConn) inContent(f *frameScanner, b []byte) {
	switch f.typ {
	case frameData:
		s.mu.Lock()
		t := s.streams[f.stream]
		s.mu.Unlock()
		if t != nil {
			t.data(b)
		}
	case frameRSTStream, frameGoAway:
		if k := min(len(b), 8-len(s.inFrame)); k > 0 {
			s.inFrame = append(s.inFrame, b[:k]...)
		}
	}
}

// inEnd acts on a frame the server sent once it is all read.
func (s *sizedConn) inEnd(f *frameScanner) {
	switch {
	case (f.typ == frameData || f.typ == frameHeaders) && f.flags&flagEndStream != 0,
		f.typ == frameRSTStream:
		s.endStream(f.stream)
	case f.typ == frameGoAway && len(s.inFrame) >= 4:
		// Streams above the last one the server processed are not
		// answered (gRPC may open them again: bind starts them over).
		last := binary.BigEndian.Uint32(s.inFrame) & 0x7fffffff
		s.mu.Lock()
		var gone []*messageTrack
		for id, t := range s.streams {
			if id > last {
				gone = append(gone, t)
				delete(s.streams, id)
			}
		}
		s.mu.Unlock()
		for _, t := range gone {
			t.call.end(t.gen)
		}
	}
	s.inFrame = s.inFrame[:0]
}

// data follows a bound stream's DATA: each prefix queues its message's
// length.
func (t *messageTrack) data(b []byte) {
	for len(b) > 0 {
		if t.left > 0 {
			k := min(int64(len(b)), t.left)
			t.left -= k
			b = b[k:]
			continue
		}
		k := copy(t.pfx[t.pfxN:], b)
		t.pfxN += k
		b = b[k:]
		if t.pfxN == len(t.pfx) {
			t.pfxN = 0
			t.left = int64(binary.BigEndian.Uint32(t.pfx[1:]))
			t.call.push(t.gen, t.left)
		}
	}
}

// outContent collects the header blocks the client writes.
func (s *sizedConn) outContent(f *frameScanner, b []byte) {
	if f.typ == frameHeaders || f.typ == frameContinuation {
		s.block = append(s.block, b...)
	}
}

// outEnd acts on a frame the client wrote: a complete header block binds
// its stream if it carries a tag; a RST_STREAM ends the stream.
func (s *sizedConn) outEnd(f *frameScanner) {
	switch f.typ {
	case frameHeaders, frameContinuation:
		if f.flags&flagEndHeaders == 0 {
			return
		}
		block := s.block
		s.block = s.block[:0]
		if s.broken {
			return
		}
		s.tag = ""
		_, err := s.dec.Write(block)
		if err == nil {
			err = s.dec.Close() // a block that ends inside a field
		}
		if err != nil {
			// The table is lost with this block: no later block can
			// be read, and calls fall back after bindWait.
			s.broken = true
			return
		}
		if s.tag == "" {
			return
		}
		c := s.w.lookUp(s.tag)
		if c == nil {
			return
		}
		gen := c.bind()
		s.mu.Lock()
		closed := s.closed
		if !closed {
			s.streams[f.stream] = &messageTrack{call: c, gen: gen}
		}
		s.mu.Unlock()
		if closed {
			c.end(gen)
		}
	case frameRSTStream:
		s.endStream(f.stream)
	}
}

// frameScanner reads HTTP/2 frames from a byte stream delivered in any
// pieces, handing each frame's content (its payload without padding and
// priority fields) to a callback, piece by piece, without copying it.
type frameScanner struct {
	hdr    [9]byte
	hdrN   int
	length int // the payload's length
	pos    int // bytes of the payload read
	typ    byte
	flags  byte
	stream uint32
	head   int // bytes before the content: pad length and priority
	pad    int // padding after the content
}

// feed reads p: content is called with each piece of a frame's content,
// end once a frame is all read.
func (f *frameScanner) feed(p []byte, content func(*frameScanner, []byte), end func(*frameScanner)) {
	for len(p) > 0 {
		if f.hdrN < len(f.hdr) {
			k := copy(f.hdr[f.hdrN:], p)
			f.hdrN += k
			p = p[k:]
			if f.hdrN < len(f.hdr) {
				return
			}
			f.length = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.typ, f.flags = f.hdr[3], f.hdr[4]
			f.stream = binary.BigEndian.Uint32(f.hdr[5:]) & 0x7fffffff
			f.pos, f.head, f.pad = 0, 0, 0
			if (f.typ == frameData || f.typ == frameHeaders) && f.flags&flagPadded != 0 {
				f.head = 1
			}
			if f.typ == frameHeaders && f.flags&flagPriority != 0 {
				f.head += 5
			}
			if f.length == 0 {
				f.hdrN = 0
				end(f)
				continue
			}
			if len(p) == 0 {
				return
			}
		}
		k := min(len(p), f.length-f.pos)
		piece := p[:k]
		if f.pos == 0 && f.head > 0 && f.hdr[4]&flagPadded != 0 {
			f.pad = int(piece[0])
		}
		if lo, hi := max(f.pos, f.head), min(f.pos+k, f.length-f.pad); lo < hi {
			content(f, piece[lo-f.pos:hi-f.pos])
		}
		f.pos += k
		p = p[k:]
		if f.pos == f.length {
			f.hdrN = 0
			end(f)
		}
	}
}
