package main

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// BenchmarkPipeline measures end-to-end rows/s from the Amp simulator to
// Kafka (kfake, exactly-once, registry, Redis checkpoints) for the
// transactions table, next to its peer in the same run: reading the same
// rows from the simulator through the Flight client alone. The ratio
// bridge/source-only is the cost of encoding, producing, transactions and
// checkpoints. The producer does not compress (performance.md's run
// conditions; the default zstd costs about a third of the bridge's CPU on
// these rows, most of which are random hashes). Run it with make bench-go or
// go test -run '^$' -bench Pipeline -benchtime 3x ./cmd/bridge/.
func BenchmarkPipeline(b *testing.B) {
	blocks := 300
	if testenv.BenchSmoke() {
		blocks = 10
	}
	simCfg := ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks, TxPerBlock: 171, LogsPerTx: -1}, MaxMicrobatchBlocks: 50}

	b.Run("source-only", func(b *testing.B) {
		sim, err := ampsim.New(simCfg)
		require.NoError(b, err)
		require.NoError(b, sim.Start(b.Context()))
		defer sim.Close()
		cfg := source.DefaultConfig()
		cfg.Addr = sim.Addr()
		cl, err := source.New(cfg, source.Deps{})
		require.NoError(b, err)
		defer cl.Close()
		var rows int64
		b.ResetTimer()
		for range b.N {
			st, err := cl.Query(b.Context(), "SELECT * FROM eth_rpc.transactions")
			require.NoError(b, err)
			for {
				env, err := st.Next(b.Context())
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(b, err)
				if env.Batch != nil {
					rows += env.Batch.NumRows()
				}
				env.Release()
			}
			_ = st.Close()
		}
		b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	})

	b.Run("bridge", func(b *testing.B) {
		var rows int64
		var busy time.Duration
		for range b.N {
			b.StopTimer()
			h := newHarness(b, fakeServices(b), simCfg, 128)
			h.cfg.Kafka.Compression = "none"
			b.StartTimer()
			start := time.Now()
			stop := h.run()
			h.waitHead()
			busy += time.Since(start)
			b.StopTimer()
			require.NoError(b, stop())
			h.mu.Lock()
			rows += h.rows
			h.mu.Unlock()
			b.StartTimer()
		}
		b.ReportMetric(float64(rows)/busy.Seconds(), "rows/s")
	})

	// The same history published by a backfill of 2 workers in steps of 25
	// blocks (op r), up to the hand-over 10 blocks below the head, then the
	// last 10 blocks live; rows/s counts every row the topic ends with.
	b.Run("bridge-backfill", func(b *testing.B) {
		var rows int64
		var busy time.Duration
		for range b.N {
			b.StopTimer()
			h := newHarness(b, fakeServices(b), simCfg, 128)
			h.cfg.Streams[0].Backfill = config.BackfillConfig{Enabled: true, Workers: 2, StepBlocks: 25, HandoverMargin: 10}
			h.cfg.Kafka.Compression = "none"
			h.cfg.Defaults()
			b.StartTimer()
			start := time.Now()
			stop := h.run()
			h.waitHead()
			busy += time.Since(start)
			b.StopTimer()
			require.NoError(b, stop())
			counts, _, _ := h.topicOps()
			rows += int64(counts["r"] + counts["c"])
			b.StartTimer()
		}
		b.ReportMetric(float64(rows)/busy.Seconds(), "rows/s")
	})
}
