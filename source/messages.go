package source

import (
	"context"
	"sync/atomic"

	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// messageReader is the ipc.MessageReader of one DoGet stream. It receives
// every FlightData through the stream's reservation of the Client's read
// budget and keeps a record batch's message counted for the envelope that
// the record goes into (the schema, a dictionary and a FlightData without
// an IPC message, which it skips as Amp's own decoder does, are given back
// at once, so that a stream waiting for room holds nothing). It keeps no
// reference to a message once the IPC reader asks for the next one:
// flight.NewRecordReader's reader keeps the last message (and its
// app_metadata, which shares the message's buffer) until the next one has
// arrived, which would keep a stream's last message alive, outside the
// budget, for as long as the stream waits.
type messageReader struct {
	// ctx is the DoGet call's, for the waits for the read budget:
	// ipc.MessageReader.Message takes none, and the reader lives exactly
	// as long as the call.
	ctx    context.Context //nolint:containedctx // see above
	stream flightpb.FlightService_DoGetClient
	codec  *flightDataCodec // the DoGet call's
	res    *reservation     // nil: no byte bound
	sizes  *callSizes       // the call's
	// meta is the newest message's app_metadata, until the next Message.
	meta []byte
	// body is the newest message's pooled buffer if it is a record
	// batch's, until the next Message: the envelope of the record takes
	// it (nil: not pooled).
	body *pooledBody
}

var _ ipc.MessageReader = (*messageReader)(nil)

// Message receives the next FlightData that carries an IPC message.
func (m *messageReader) Message() (*ipc.Message, error) {
	m.meta, m.body = nil, nil
	for {
		fd, n, err := receive(m.ctx, m.res, m.sizes, m.stream.Recv, m.size)
		buf := m.codec.take()
		if err != nil {
			return nil, err
		}
		if len(fd.GetDataHeader()) == 0 {
			m.res.giveBack(n)
			m.codec.pool.Put(buf) // fd, dropped, is all that refers to it
			continue
		}
		msg := ipc.NewMessage(memory.NewBufferBytes(fd.DataHeader), memory.NewBufferBytes(fd.DataBody))
		if msg.Type() == ipc.MessageRecordBatch {
			m.res.hold(n)
			if buf != nil {
				m.body = &pooledBody{pool: m.codec.pool, buf: buf}
			}
		} else {
			// A schema or dictionary: the reader keeps dictionaries,
			// which alias buf, for the stream's life; buf is left to
			// the collector.
			m.res.giveBack(n)
		}
		m.meta = fd.GetAppMetadata()
		return msg, nil
	}
}

// Retain and Release do nothing: the messages are Go memory, which the
// records built on them keep alive.
func (m *messageReader) Retain()  {}
func (m *messageReader) Release() {}

// size is what a received FlightData holds in memory: the one buffer that
// flightDataCodec decoded it into, of which its fields are parts (all of
// the pooled buffer, when it has one).
func (m *messageReader) size(fd *flightpb.FlightData) int64 {
	if b := m.codec.last; b != nil {
		return int64(cap(*b))
	}
	return int64(len(fd.GetDataHeader()) + len(fd.GetAppMetadata()) + len(fd.GetDataBody()))
}

// pooledBody is the pooled buffer of a record batch's message: it goes
// back to its pool when the envelope of the record is released, once,
// however many copies of the envelope are released. The consumer must not
// touch the batch after Release (Envelope.Release says so).
type pooledBody struct {
	pool *framePool
	buf  *[]byte
	done atomic.Bool
}

// release gives the buffer back, the first time (b may be nil).
func (b *pooledBody) release() {
	if b != nil && b.done.CompareAndSwap(false, true) {
		b.pool.Put(b.buf)
	}
}
