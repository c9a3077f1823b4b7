package source_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
	flightpb "github.com/apache/arrow-go/v18/arrow/flight/gen/flight"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// replayServer answers every GetFlightInfo with one ticket and every DoGet
// with the same pre-encoded FlightData messages, so that a benchmark measures
// the client's decode path and not the simulator's encoding.
type replayServer struct {
	flight.BaseFlightServer
	schema []byte
	msgs   []*flightpb.FlightData
}

func (r *replayServer) GetFlightInfo(context.Context, *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	return &flight.FlightInfo{Schema: r.schema, Endpoint: []*flight.FlightEndpoint{{Ticket: &flight.Ticket{Ticket: []byte("replay")}}},
		TotalRecords: -1, TotalBytes: -1}, nil
}

func (r *replayServer) DoGet(_ *flight.Ticket, st flight.FlightService_DoGetServer) error {
	for _, m := range r.msgs {
		if err := st.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// captureStream runs a streaming query on the transactions table of a
// simulator with the given number of mainnet-density blocks and returns the
// raw FlightData messages up to the watermark of the last block, and the
// FlightInfo schema. With _block_num selected (SELECT *) the 10k-row
// batches are cut once more at a block, as Amp cuts them (amp-protocol.md
// §2.2), and split into ~2 MiB messages.
func captureStream(b *testing.B, blocks int, sql string) ([]byte, []*flightpb.FlightData) {
	b.Helper()
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks, LogsPerTx: -1}, KeepAlive: ampsim.KeepAliveOff,
		ReplayBlocks: 64, BatchRows: 10000})
	require.NoError(b, err)
	require.NoError(b, sim.Start(b.Context()))
	defer sim.Close()
	head, _ := sim.Head()
	conn, err := grpc.NewClient(sim.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(b, err)
	defer conn.Close()
	svc := flightpb.NewFlightServiceClient(conn)
	cmd, err := anypb.New(&flightpb.CommandStatementQuery{Query: sql})
	require.NoError(b, err)
	raw, err := proto.Marshal(cmd)
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(b.Context(), "amp-stream", "true"))
	defer cancel()
	info, err := svc.GetFlightInfo(ctx, &flightpb.FlightDescriptor{Type: flightpb.FlightDescriptor_CMD, Cmd: raw})
	require.NoError(b, err)
	st, err := svc.DoGet(ctx, info.GetEndpoint()[0].GetTicket())
	require.NoError(b, err)
	var msgs []*flightpb.FlightData
	for {
		m, err := st.Recv()
		require.NoError(b, err)
		msgs = append(msgs, m)
		if len(m.GetDataHeader()) == 0 || len(m.GetAppMetadata()) == 0 {
			continue
		}
		md, err := source.ParseAppMetadata(m.GetAppMetadata())
		require.NoError(b, err)
		if md.Complete && len(md.Ranges) == 1 && md.Ranges[0].End == head {
			return info.GetSchema(), msgs
		}
	}
}

// BenchmarkDecodeStream measures the client's decode path for a streaming
// query, replayed from captured FlightData: SELECT * (27 columns, ~2 MiB
// messages of ~1,400 rows, as Amp splits its 10k-row batches cut at a
// block) and the 15 columns of the throughput harness (10k-row batches in
// ~2 MiB messages). The consumer touches nothing but the row count.
func BenchmarkDecodeStream(b *testing.B) {
	for _, q := range []struct{ name, sql string }{
		{"star", "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"},
		{"cols15", "SELECT block_num, block_hash, \"timestamp\", tx_index, tx_hash, \"from\", \"to\", nonce, value, gas_price, gas_limit, gas_used, input, type, status FROM eth_rpc.transactions SETTINGS stream = true"},
	} {
		b.Run(q.name, func(b *testing.B) {
			schema, msgs := captureStream(b, 300, q.sql)
			addr := serve(b, &replayServer{schema: schema, msgs: msgs})
			c := newClient(b, addr, nil, source.Deps{})
			bodyBytes := int64(0)
			for _, m := range msgs {
				bodyBytes += int64(len(m.GetDataBody()))
			}
			b.SetBytes(bodyBytes)
			b.ReportAllocs()
			var rows, batches int64
			b.ResetTimer()
			for range b.N {
				s, err := c.Query(b.Context(), "SELECT * FROM eth_rpc.transactions")
				require.NoError(b, err)
				for {
					env, err := s.Next(b.Context())
					if errors.Is(err, io.EOF) {
						break
					}
					require.NoError(b, err)
					rows += env.Batch.NumRows()
					batches++
					env.Release()
				}
				require.NoError(b, s.Close())
			}
			b.StopTimer()
			require.Positive(b, rows)
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(rows)/float64(batches), "rows/batch")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(batches), "ns/batch")
		})
	}
}

// captureTransactions runs a batch query on the transactions table of a
// simulator with the given number of mainnet-density blocks and returns the
// raw FlightData messages and the FlightInfo schema.
func captureTransactions(b *testing.B, blocks int) ([]byte, []*flightpb.FlightData) {
	b.Helper()
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks}, KeepAlive: ampsim.KeepAliveOff})
	require.NoError(b, err)
	require.NoError(b, sim.Start(b.Context()))
	defer sim.Close()
	conn, err := grpc.NewClient(sim.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(b, err)
	defer conn.Close()
	svc := flightpb.NewFlightServiceClient(conn)
	cmd, err := anypb.New(&flightpb.CommandStatementQuery{Query: "SELECT * FROM eth_rpc.transactions"})
	require.NoError(b, err)
	raw, err := proto.Marshal(cmd)
	require.NoError(b, err)
	info, err := svc.GetFlightInfo(b.Context(), &flightpb.FlightDescriptor{Type: flightpb.FlightDescriptor_CMD, Cmd: raw})
	require.NoError(b, err)
	st, err := svc.DoGet(b.Context(), info.GetEndpoint()[0].GetTicket())
	require.NoError(b, err)
	var msgs []*flightpb.FlightData
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(b, err)
		msgs = append(msgs, m)
	}
	return info.GetSchema(), msgs
}

// BenchmarkDecode measures the client's decode path for the transactions
// table (all 27 columns, ~171 tx per block): FlightData from a local Flight
// server through DoGet, the IPC reader and app_metadata parsing into
// Envelopes, which the consumer releases. It reports rows/s and allocations
// per row (whole process, so including gRPC's receive path and the replay
// server's send path).
func BenchmarkDecode(b *testing.B) {
	const blocks = 100
	schema, msgs := captureTransactions(b, blocks)
	addr := serve(b, &replayServer{schema: schema, msgs: msgs})
	c := newClient(b, addr, nil, source.Deps{})

	var ms0, ms1 runtime.MemStats
	rows, bodyBytes := int64(0), int64(0)
	for _, m := range msgs {
		bodyBytes += int64(len(m.GetDataBody()))
	}
	b.SetBytes(bodyBytes)
	b.ReportAllocs()
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		s, err := c.Query(b.Context(), "SELECT * FROM eth_rpc.transactions")
		require.NoError(b, err)
		for {
			env, err := s.Next(b.Context())
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(b, err)
			rows += env.Batch.NumRows()
			env.Release()
		}
		require.NoError(b, s.Close())
	}
	b.StopTimer()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&ms1)
	require.Positive(b, rows)
	b.ReportMetric(float64(rows)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(rows), "allocs/row")
	b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
}
