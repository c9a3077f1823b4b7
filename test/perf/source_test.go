package perf

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// BenchmarkSourceOnly measures how fast the bridge's Flight client (package
// source) reads mainnet-density transactions from the simulator in the same
// process, with rows generated as they are served (generate) or replayed
// from pre-built batches (replay, the throughput harness's mode): the
// ceiling the simulator puts on an end-to-end run. Queries: SELECT * as a
// batch query (27 columns, 10k-row batches) and the 15-column streaming
// query of TestThroughput (10k-row batches). rows/s is reported.
func BenchmarkSourceOnly(b *testing.B) {
	blocks := 2000
	if testenv.BenchSmoke() {
		blocks = 20
	}
	queries := []struct {
		name, sql string
		stream    bool
	}{
		{"star-batch", "SELECT * FROM eth_rpc.transactions", false},
		{"cols15-stream", "SELECT " + txColumns + " FROM eth_rpc.transactions SETTINGS stream = true", true},
	}
	for _, mode := range []struct {
		name   string
		replay int
	}{{"generate", 0}, {"replay", 64}} {
		for _, q := range queries {
			b.Run(fmt.Sprintf("%s/%s", mode.name, q.name), func(b *testing.B) {
				sim, err := ampsim.New(ampsim.Config{
					NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks, LogsPerTx: -1},
					KeepAlive:     ampsim.KeepAliveOff, ReplayBlocks: mode.replay, BatchRows: 10000,
				})
				require.NoError(b, err)
				require.NoError(b, sim.Start(b.Context()))
				defer sim.Close()
				head, _ := sim.Head()
				want, err := sim.Primary().ExpectedRows(ampsim.TableTransactions, 0, head)
				require.NoError(b, err)
				cfg := source.DefaultConfig()
				cfg.Addr = sim.Addr()
				cl, err := source.New(cfg, source.Deps{})
				require.NoError(b, err)
				defer cl.Close()
				var rows int64
				b.ResetTimer()
				for range b.N {
					var st *source.Stream
					if q.stream {
						st, err = cl.Stream(b.Context(), q.sql, func() reorg.Cursor { return nil })
					} else {
						st, err = cl.Query(b.Context(), q.sql)
					}
					require.NoError(b, err)
					n := readUntilHead(b, st, head)
					require.Equal(b, int64(want), n)
					rows += n
					_ = st.Close()
				}
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

// readUntilHead reads a batch stream to its end, or a streaming one until
// the range ending at head is complete, and returns the rows read.
func readUntilHead(b *testing.B, st *source.Stream, head uint64) int64 {
	var rows int64
	for {
		env, err := st.Next(b.Context())
		if errors.Is(err, io.EOF) {
			return rows
		}
		require.NoError(b, err)
		if env.Batch != nil {
			rows += env.Batch.NumRows()
		}
		done := env.Complete && len(env.Ranges) == 1 && env.Ranges[0].End == head
		env.Release()
		if done {
			return rows
		}
	}
}
