package source

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// scannedFrame is what frameScanner reported of one frame.
type scannedFrame struct {
	typ, flags byte
	stream     uint32
	content    []byte
}

// scanAll feeds b to a frameScanner in pieces of the sizes pieces returns
// and returns the frames it reported.
func scanAll(b []byte, pieces func() int) []scannedFrame {
	var f frameScanner
	var out []scannedFrame
	var content []byte
	for len(b) > 0 {
		k := min(max(pieces(), 1), len(b))
		f.feed(b[:k], func(_ *frameScanner, c []byte) { content = append(content, c...) },
			func(f *frameScanner) {
				out = append(out, scannedFrame{typ: f.typ, flags: f.flags, stream: f.stream, content: content})
				content = nil
			})
		b = b[k:]
	}
	return out
}

// TestFrameScanner: the content of every frame (without padding and
// priority), whatever pieces the bytes come in.
func TestFrameScanner(t *testing.T) {
	var buf bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	body := bytes.Repeat([]byte("0123456789"), 300)
	require.NoError(t, fr.WriteData(1, false, body))
	require.NoError(t, fr.WriteDataPadded(3, true, []byte("padded"), make([]byte, 17)))
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: []byte("block-1"),
		PadLength: 4, Priority: http2.PriorityParam{StreamDep: 1, Weight: 7}}))
	require.NoError(t, fr.WriteContinuation(5, true, []byte("block-2")))
	require.NoError(t, fr.WriteData(7, true, nil))
	require.NoError(t, fr.WriteRSTStream(9, http2.ErrCodeCancel))
	require.NoError(t, fr.WriteGoAway(7, http2.ErrCodeNo, []byte("bye")))
	want := []scannedFrame{
		{frameData, 0, 1, body},
		{frameData, flagEndStream | flagPadded, 3, []byte("padded")},
		{frameHeaders, flagPadded | flagPriority, 5, []byte("block-1")},
		{frameContinuation, flagEndHeaders, 5, []byte("block-2")},
		{frameData, flagEndStream, 7, nil},
		{frameRSTStream, 0, 9, binary.BigEndian.AppendUint32(nil, uint32(http2.ErrCodeCancel))},
		{frameGoAway, 0, 0, append(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 7), 0), "bye"...)},
	}
	for _, n := range []int{1, 2, 5, 9, 10, 4096, buf.Len()} {
		assert.Equal(t, want, scanAll(buf.Bytes(), func() int { return n }), "pieces of %d bytes", n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		assert.Equal(t, want, scanAll(buf.Bytes(), func() int { return rng.IntN(40) }), "random pieces")
	}
}

// fakeConn is a net.Conn whose reads come from r and whose writes go to w.
type fakeConn struct {
	net.Conn
	r io.Reader
	w bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *fakeConn) Close() error                { return nil }

// h2Client writes what a gRPC client writes: the preface, then HEADERS
// (HPACK-encoded with one encoder, so that later blocks refer to earlier
// ones) split into CONTINUATION frames.
type h2Client struct {
	t   *testing.T
	c   *sizedConn
	enc *hpack.Encoder
	blk bytes.Buffer
}

func newH2Client(t *testing.T, c *sizedConn) *h2Client {
	h := &h2Client{t: t, c: c}
	h.enc = hpack.NewEncoder(&h.blk)
	_, err := io.WriteString(c, clientPreface)
	require.NoError(t, err)
	return h
}

// open writes the HEADERS of stream id with the tag (none if empty),
// two bytes at a time.
func (h *h2Client) open(id uint32, tag string) {
	h.blk.Reset()
	for _, f := range []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":path", Value: "/arrow.flight.protocol.FlightService/DoGet"},
		{Name: "content-type", Value: "application/grpc"}} {
		require.NoError(h.t, h.enc.WriteField(f))
	}
	if tag != "" {
		require.NoError(h.t, h.enc.WriteField(hpack.HeaderField{Name: headerCall, Value: tag}))
	}
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	blk := h.blk.Bytes()
	half := len(blk) / 2
	require.NoError(h.t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: blk[:half], PadLength: 3}))
	require.NoError(h.t, fr.WriteContinuation(id, true, blk[half:]))
	for b := out.Bytes(); len(b) > 0; b = b[min(2, len(b)):] {
		_, err := h.c.Write(b[:min(2, len(b))])
		require.NoError(h.t, err)
	}
}

// grpcMessages returns messages of the given lengths, each after its
// 5-byte prefix.
func grpcMessages(lengths ...int) []byte {
	var b []byte
	for _, n := range lengths {
		b = append(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
		b = append(b, bytes.Repeat([]byte{'m'}, n)...)
	}
	return b
}

// nextNow returns what next returns without waiting (known false and n -1
// if it would wait).
func nextNow(t *testing.T, c *callSizes) (int64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	n, known, err := c.next(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return -1, false
	}
	require.NoError(t, err)
	return n, known
}

// TestSizedConn: a DoGet's HEADERS bind its stream to its call, and the
// prefixes of the messages in the stream's DATA (padded, split anywhere)
// queue their lengths before the messages are read; the stream's end
// (END_STREAM, RST_STREAM, GOAWAY, a failed read) ends the call's sizes.
func TestSizedConn(t *testing.T) {
	w := newSizeWatch()
	a, b, c, d := w.track(), w.track(), w.track(), w.track()
	var in bytes.Buffer
	conn := newSizedConn(&fakeConn{r: &in}, w)
	h := newH2Client(t, conn)
	h.open(1, "")    // not a DoGet of ours (GetFlightInfo)
	h.open(3, a.tag) // a
	h.open(5, b.tag)
	h.open(7, c.tag)
	h.open(9, d.tag)
	assert.True(t, bytes.HasPrefix(conn.Conn.(*fakeConn).w.Bytes(), []byte(clientPreface)), "written through")

	fr := http2.NewFramer(&in, nil)
	msgs := grpcMessages(0, 70000, 3, 16384)
	require.NoError(t, fr.WriteData(1, false, grpcMessages(99)))
	for i := 0; i < len(msgs); i += 7000 {
		require.NoError(t, fr.WriteDataPadded(3, false, msgs[i:min(i+7000, len(msgs))], make([]byte, i%5)))
	}
	require.NoError(t, fr.WriteData(5, false, grpcMessages(10)[:3])) // half a prefix
	require.NoError(t, fr.WriteData(7, false, grpcMessages(10)))
	require.NoError(t, fr.WriteData(9, false, grpcMessages(20)))
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: []byte{0x88}, EndStream: true, EndHeaders: true}))
	require.NoError(t, fr.WriteRSTStream(7, http2.ErrCodeCancel))
	require.NoError(t, fr.WriteGoAway(5, http2.ErrCodeNo, nil))
	rest := in.Bytes()
	rng := rand.New(rand.NewPCG(3, 4))
	for len(rest) > 0 { // gRPC's reads, of any size
		p := make([]byte, rng.IntN(9000)+1)
		n, err := conn.Read(p)
		require.NoError(t, err)
		rest = rest[n:]
	}
	for _, want := range []int64{0, 70000, 3, 16384} {
		n, known := nextNow(t, a)
		assert.True(t, known)
		assert.Equal(t, want, n)
	}
	n, known := nextNow(t, a)
	assert.Equal(t, []any{int64(0), false}, []any{n, known}, "a: trailers end the stream")

	n, known = nextNow(t, b)
	assert.Equal(t, []any{int64(-1), false}, []any{n, known}, "b: half a prefix: it waits")
	n, known = nextNow(t, c)
	assert.Equal(t, []any{int64(10), true}, []any{n, known}, "c")
	n, known = nextNow(t, c)
	assert.Equal(t, []any{int64(0), false}, []any{n, known}, "c: RST_STREAM ends the stream")
	n, known = nextNow(t, d)
	assert.Equal(t, []any{int64(20), true}, []any{n, known}, "d")
	n, known = nextNow(t, d)
	assert.Equal(t, []any{int64(0), false}, []any{n, known}, "d: above GOAWAY's last stream")

	// A failed read ends what is left (b).
	_, err := conn.Read(make([]byte, 10))
	require.ErrorIs(t, err, io.EOF)
	n, known = nextNow(t, b)
	assert.Equal(t, []any{int64(0), false}, []any{n, known}, "b: the connection ended")

	// gRPC opening d again on another connection starts it over.
	var in2 bytes.Buffer
	conn2 := newSizedConn(&fakeConn{r: &in2}, w)
	newH2Client(t, conn2).open(1, d.tag)
	require.NoError(t, http2.NewFramer(&in2, nil).WriteData(1, false, grpcMessages(5)))
	_, err = conn2.Read(make([]byte, 100))
	require.NoError(t, err)
	n, known = nextNow(t, d)
	assert.Equal(t, []any{int64(5), true}, []any{n, known}, "d on its new stream")
}

// TestSizedConnUnreadableHeaders: once a header block cannot be decoded,
// no later call is bound, and a call that is never bound stops waiting
// after bindWait, never to be bound.
func TestSizedConnUnreadableHeaders(t *testing.T) {
	w := newSizeWatch()
	a := w.track()
	conn := newSizedConn(&fakeConn{r: &bytes.Buffer{}}, w)
	_, err := io.WriteString(conn, clientPreface)
	require.NoError(t, err)
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EndHeaders: true}))
	_, err = conn.Write(out.Bytes())
	require.NoError(t, err)
	assert.True(t, conn.broken)

	start := time.Now()
	n, known, err := a.next(t.Context())
	require.NoError(t, err)
	assert.False(t, known)
	assert.Zero(t, n)
	assert.GreaterOrEqual(t, time.Since(start), bindWait)
	assert.Nil(t, w.lookUp(a.tag), "forgotten: a late bind cannot put its sizes out of step")
}
