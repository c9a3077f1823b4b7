package source

import (
	"context"

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
	res    *reservation // nil: no byte bound
	// meta is the newest message's app_metadata, until the next Message.
	meta []byte
}

var _ ipc.MessageReader = (*messageReader)(nil)

// Message receives the next FlightData that carries an IPC message.
func (m *messageReader) Message() (*ipc.Message, error) {
	m.meta = nil
	for {
		fd, n, err := receive(m.ctx, m.res, m.stream.Recv, flightDataBytes)
		if err != nil {
			return nil, err
		}
		if len(fd.GetDataHeader()) == 0 {
			m.res.giveBack(n)
			continue
		}
		msg := ipc.NewMessage(memory.NewBufferBytes(fd.DataHeader), memory.NewBufferBytes(fd.DataBody))
		if msg.Type() == ipc.MessageRecordBatch {
			m.res.hold(n)
		} else {
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

// flightDataBytes is what a received FlightData holds in memory: the one
// buffer that flightDataCodec decoded it into, of which its fields are
// parts.
func flightDataBytes(fd *flightpb.FlightData) int64 {
	return int64(len(fd.GetDataHeader()) + len(fd.GetAppMetadata()) + len(fd.GetDataBody()))
}
