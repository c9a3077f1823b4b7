package source

import (
	"bytes"
	"fmt"

	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// FlightData field numbers (Flight.proto).
const (
	fdDataHeader  protowire.Number = 2
	fdAppMetadata protowire.Number = 3
	fdDataBody    protowire.Number = 1000
)

// flightDataCodec is gRPC's proto codec, except that it decodes the
// FlightData of a DoGet with one copy of the message instead of two: the
// default codec gathers the message's HTTP/2 frames into a pooled buffer
// and proto.Unmarshal then copies every bytes field out of it (the body of
// a ~2 MiB Amp message twice, about 6% of the bridge's CPU on SELECT *).
// This one gathers the frames into one buffer and points data_header,
// app_metadata and data_body into it, so the Arrow arrays the IPC reader
// builds on data_body keep that buffer alive, as they kept the copy
// before. A message with any other field (a flight_descriptor, an unknown
// field) goes through proto.Unmarshal.
//
// With a pool, the buffer comes from it, and the caller of Recv takes it
// (take) to give it back once nothing refers to the message: a stream
// gives a record batch's buffer back when the envelope made of it is
// released (pooledBody), which spares the allocation and first touch of a
// fresh ~2 MiB buffer per message and the scavenger's work of returning
// them (together about 5% of the bridge's CPU on SELECT *). One codec
// serves one DoGet call, whose messages one goroutine receives.
type flightDataCodec struct {
	pool *framePool // nil: every message gets a buffer of its own
	// last is the pooled buffer of the message the latest Unmarshal
	// decoded, until take.
	last *[]byte
}

// doGetCodec is the call option that makes a DoGet use c.
func doGetCodec(c *flightDataCodec) grpc.CallOption { return grpc.ForceCodecV2(c) }

func (*flightDataCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}

func (c *flightDataCodec) Unmarshal(data mem.BufferSlice, v any) error {
	fd, ok := v.(*flightpb.FlightData)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
	}
	if c.pool == nil {
		// bytes.Join allocates without zeroing (BufferSlice.Materialize
		// zeroes, then copies: slower than the default codec's two
		// copies).
		frames := make([][]byte, len(data))
		for i, b := range data {
			frames[i] = b.ReadOnlyData()
		}
		_, err := unmarshalFlightData(bytes.Join(frames, nil), fd)
		return err
	}
	buf := c.pool.Get(data.Len())
	data.CopyTo(*buf)
	aliased, err := unmarshalFlightData(*buf, fd)
	if err != nil || !aliased {
		c.pool.Put(buf) // nothing refers to it
		return err
	}
	c.last = buf
	return nil
}

// take returns the pooled buffer that the message Recv returned last is
// decoded into, and forgets it; nil if the message has none of its own
// (no pool, or proto.Unmarshal copied its fields).
func (c *flightDataCodec) take() *[]byte {
	b := c.last
	c.last = nil
	return b
}

// Name is empty so that the call's content-type stays application/grpc,
// as with the default codec (a name would add a +subtype).
func (*flightDataCodec) Name() string { return "" }

// unmarshalFlightData decodes b into fd, aliasing b, and reports whether
// fd's fields point into b (false when proto.Unmarshal decoded it, which
// copies them).
func unmarshalFlightData(b []byte, fd *flightpb.FlightData) (aliased bool, err error) {
	fd.Reset()
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return false, fmt.Errorf("decoding FlightData: %w", protowire.ParseError(n))
		}
		if typ != protowire.BytesType || (num != fdDataHeader && num != fdAppMetadata && num != fdDataBody) {
			if err := proto.Unmarshal(b, fd); err != nil {
				return false, fmt.Errorf("decoding FlightData: %w", err)
			}
			return false, nil
		}
		v, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return false, fmt.Errorf("decoding FlightData field %d: %w", num, protowire.ParseError(m))
		}
		v = v[:len(v):len(v)]
		dst := &fd.DataBody
		if num == fdDataHeader {
			dst = &fd.DataHeader
		}
		if num == fdAppMetadata {
			dst = &fd.AppMetadata
		}
		*dst = v
		rest = rest[n+m:]
	}
	return true, nil
}
