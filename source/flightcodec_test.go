package source

import (
	"math/rand/v2"
	"testing"

	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// TestFlightDataCodec: the DoGet codec decodes every FlightData as
// proto.Unmarshal does, whatever frames the message arrives in, and
// aliases the message's bytes for the three fields Amp sends.
func TestFlightDataCodec(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	bytesOf := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	msgs := []*flightpb.FlightData{
		{},
		{DataHeader: bytesOf(200)},
		{DataHeader: bytesOf(300), AppMetadata: []byte(`{"ranges":[],"ranges_complete":true}`)},
		{DataHeader: bytesOf(1200), AppMetadata: bytesOf(90), DataBody: bytesOf(3 << 20)},
		{DataHeader: bytesOf(1), DataBody: bytesOf(1)},
		{FlightDescriptor: &flightpb.FlightDescriptor{Type: flightpb.FlightDescriptor_CMD, Cmd: []byte("x")}, DataHeader: bytesOf(8), DataBody: bytesOf(64)},
	}
	var wires [][]byte
	for _, m := range msgs {
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		wires = append(wires, b)
	}
	// A field this version does not know, before and after the others.
	unknown := protowire.AppendTag(nil, 77, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 5)
	wires = append(wires, append(append([]byte(nil), unknown...), wires[3]...), append(append([]byte(nil), wires[2]...), unknown...))
	// A field repeated: the last one wins.
	wires = append(wires, append(append([]byte(nil), wires[1]...), wires[2]...))
	c := &flightDataCodec{}
	for i, w := range wires {
		var want flightpb.FlightData
		require.NoError(t, proto.Unmarshal(w, &want), "message %d", i)
		for _, frame := range []int{len(w) + 1, 16 << 10, 7} {
			var bs mem.BufferSlice
			for off := 0; off < len(w); off += frame {
				bs = append(bs, mem.SliceBuffer(w[off:min(off+frame, len(w))]))
			}
			got := &flightpb.FlightData{DataBody: []byte("stale")}
			require.NoError(t, c.Unmarshal(bs, got), "message %d, frames of %d", i, frame)
			assert.True(t, proto.Equal(&want, got), "message %d, frames of %d: got %v", i, frame, got)
		}
	}
	// Aliased: one buffer holds the fields, and none can grow into another.
	var got flightpb.FlightData
	aliased, err := unmarshalFlightData(wires[3], &got)
	require.NoError(t, err)
	assert.True(t, aliased)
	assert.Same(t, &wires[3][len(wires[3])-1], &got.DataBody[len(got.DataBody)-1], "data_body points into the message")
	assert.Equal(t, len(got.DataHeader), cap(got.DataHeader))
	// Truncated messages are errors, not panics.
	for _, n := range []int{1, 5, len(wires[3]) - 1} {
		_, err := unmarshalFlightData(wires[3][:n], &got)
		assert.Error(t, err, "truncated to %d bytes", n)
	}
	// Other messages go through the proto codec.
	tk := &flightpb.Ticket{Ticket: []byte("t")}
	bs, err := c.Marshal(tk)
	require.NoError(t, err)
	var back flightpb.Ticket
	require.NoError(t, c.Unmarshal(bs, &back))
	assert.Equal(t, "t", string(back.GetTicket()))
}

// BenchmarkFlightDataCodec decodes a ~2 MiB FlightData that arrived in
// 16 KiB HTTP/2 frames: gRPC's proto codec against the DoGet codec.
func BenchmarkFlightDataCodec(b *testing.B) {
	m := &flightpb.FlightData{DataHeader: make([]byte, 1200), AppMetadata: make([]byte, 200), DataBody: make([]byte, 2<<20)}
	w, err := proto.Marshal(m)
	require.NoError(b, err)
	var bs mem.BufferSlice
	for off := 0; off < len(w); off += 16 << 10 {
		bs = append(bs, mem.SliceBuffer(w[off:min(off+16<<10, len(w))]))
	}
	for _, c := range []struct {
		name  string
		codec interface {
			Unmarshal(mem.BufferSlice, any) error
		}
	}{{"grpc-proto", encodingProto()}, {"doget", &flightDataCodec{}}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for b.Loop() {
				var fd flightpb.FlightData
				if err := c.codec.Unmarshal(bs, &fd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func encodingProto() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }
