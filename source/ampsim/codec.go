package ampsim

import (
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// FlightData field numbers (Flight.proto).
const (
	fdDataHeader  protowire.Number = 2
	fdAppMetadata protowire.Number = 3
	fdDataBody    protowire.Number = 1000
)

// flightOut is a FlightData message as the stream writer sends it: the
// IPC header and app_metadata, and the body in a buffer of pool, which
// gRPC hands back once it has written the message.
type flightOut struct {
	header, appMetadata []byte
	body                *[]byte // nil: no body
	pool                mem.BufferPool
}

// serverCodec is gRPC's proto codec, except that it frames a flightOut
// without copying it: the message goes out as its encoded field headers
// followed by the body buffer itself, where proto.Marshal would copy the
// body into one buffer (from a pool that zeroes it first) and gRPC would
// then copy that into its HTTP/2 frames. On SELECT * that was a fifth of
// the simulator's CPU, which in the benchmarks shares the machine with the
// bridge (Amp's server runs elsewhere). The bytes are proto.Marshal's
// (fields in number order), as TestServerCodecMatchesProto checks.
type serverCodec struct{}

// serverCodecOption makes the server use serverCodec.
func serverCodecOption() grpc.ServerOption { return grpc.ForceServerCodecV2(serverCodec{}) }

func (serverCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*flightOut)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
	}
	return m.marshal(), nil
}

func (serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}

func (serverCodec) Name() string { return grpcproto.Name }

// marshal returns m encoded; the body buffer goes back to m.pool when
// gRPC frees the slice.
func (m *flightOut) marshal() mem.BufferSlice {
	n := len(m.header) + len(m.appMetadata) + 24
	hdr := make([]byte, 0, n)
	if len(m.header) > 0 {
		hdr = protowire.AppendTag(hdr, fdDataHeader, protowire.BytesType)
		hdr = protowire.AppendBytes(hdr, m.header)
	}
	if len(m.appMetadata) > 0 {
		hdr = protowire.AppendTag(hdr, fdAppMetadata, protowire.BytesType)
		hdr = protowire.AppendBytes(hdr, m.appMetadata)
	}
	if m.body == nil || len(*m.body) == 0 {
		if m.body != nil {
			m.pool.Put(m.body)
		}
		return mem.BufferSlice{mem.SliceBuffer(hdr)}
	}
	hdr = protowire.AppendTag(hdr, fdDataBody, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(len(*m.body)))
	return mem.BufferSlice{mem.SliceBuffer(hdr), mem.NewBuffer(m.body, m.pool)}
}

// growPool is a pool of byte slices of any size: Get returns one with
// capacity for n bytes (a kept one when it is large enough), without
// zeroing it; the stream writer overwrites what it uses.
type growPool struct{ p sync.Pool }

func (g *growPool) Get(n int) *[]byte {
	if b, ok := g.p.Get().(*[]byte); ok && cap(*b) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n)
	return &b
}

func (g *growPool) Put(b *[]byte) { g.p.Put(b) }

// bodyWriter is the io.Writer the IPC payload's body is serialized into:
// it appends to buf.
type bodyWriter struct{ buf *[]byte }

func (w *bodyWriter) Write(p []byte) (int, error) {
	*w.buf = append(*w.buf, p...)
	return len(p), nil
}
