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
// This one gathers the frames into a buffer of its own and points
// data_header, app_metadata and data_body into it, so the Arrow arrays the
// IPC reader builds on data_body keep that buffer alive, as they kept the
// copy before. A message with any other field (a flight_descriptor, an
// unknown field) goes through proto.Unmarshal.
type flightDataCodec struct{}

// doGetCodec is the call option that makes a DoGet use flightDataCodec.
func doGetCodec() grpc.CallOption { return grpc.ForceCodecV2(flightDataCodec{}) }

func (flightDataCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
}

func (flightDataCodec) Unmarshal(data mem.BufferSlice, v any) error {
	fd, ok := v.(*flightpb.FlightData)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
	}
	// bytes.Join allocates without zeroing (BufferSlice.Materialize
	// zeroes, then copies: slower than the default codec's two copies).
	frames := make([][]byte, len(data))
	for i, b := range data {
		frames[i] = b.ReadOnlyData()
	}
	return unmarshalFlightData(bytes.Join(frames, nil), fd)
}

// Name is empty so that the call's content-type stays application/grpc,
// as with the default codec (a name would add a +subtype).
func (flightDataCodec) Name() string { return "" }

// unmarshalFlightData decodes b into fd, aliasing b.
func unmarshalFlightData(b []byte, fd *flightpb.FlightData) error {
	fd.Reset()
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return fmt.Errorf("decoding FlightData: %w", protowire.ParseError(n))
		}
		if typ != protowire.BytesType || (num != fdDataHeader && num != fdAppMetadata && num != fdDataBody) {
			if err := proto.Unmarshal(b, fd); err != nil {
				return fmt.Errorf("decoding FlightData: %w", err)
			}
			return nil
		}
		v, m := protowire.ConsumeBytes(rest[n:])
		if m < 0 {
			return fmt.Errorf("decoding FlightData field %d: %w", num, protowire.ParseError(m))
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
	return nil
}
