package ampsim

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// countingPool is a growPool that counts the buffers given back to it.
type countingPool struct {
	growPool
	puts int
}

func (c *countingPool) Put(b *[]byte) { c.puts++; c.growPool.Put(b) }

// TestServerCodecMatchesProto checks that serverCodec frames a flightOut
// as proto.Marshal frames the same FlightData, and that the body buffer
// goes back to its pool once gRPC frees the message.
func TestServerCodecMatchesProto(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB: pooled
	for _, tc := range []struct {
		name               string
		header, meta, body []byte
	}{
		{"record batch", []byte("ipc-header"), []byte(`{"ranges":[],"ranges_complete":true}`), body},
		{"no metadata", []byte("ipc-header"), nil, body},
		{"no body", []byte("schema"), nil, nil},
		{"small body", []byte("h"), []byte("m"), []byte("tiny")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &countingPool{}
			b := pool.Get(0)
			*b = append(*b, tc.body...)
			out := &flightOut{header: tc.header, appMetadata: tc.meta, body: b, pool: pool}
			got, err := serverCodec{}.Marshal(out)
			require.NoError(t, err)
			want, err := proto.Marshal(&flight.FlightData{DataHeader: tc.header, AppMetadata: tc.meta, DataBody: tc.body})
			require.NoError(t, err)
			require.Equal(t, want, got.Materialize())
			var back flight.FlightData
			require.NoError(t, serverCodec{}.Unmarshal(got, &back))
			require.Equal(t, tc.body, back.GetDataBody())
			got.Free()
			if len(tc.body) >= 1024 {
				require.Equal(t, 1, pool.puts, "the body buffer goes back to the pool when gRPC frees it")
			}
		})
	}
}
