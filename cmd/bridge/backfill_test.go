package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// newBackfillHarness is a harness whose stream backfills [from, head−margin)
// in partitions of size blocks, steps of step blocks and workers at a time.
func newBackfillHarness(t *testing.T, svc services, blocks int, bf config.BackfillConfig) *harness {
	t.Helper()
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks}, MaxMicrobatchBlocks: 16}, 64)
	bf.Enabled = true
	h.cfg.Streams[0].Backfill = bf
	h.cfg.Defaults()
	require.NoError(t, h.cfg.Validate())
	return h
}

// topicOps reads the stream's data topic read_committed and returns the
// count of records per amp-op header and, per op, the highest block of the
// amp-range headers.
func (h *harness) topicOps() (counts map[string]int, maxBlock map[string]uint64, minBlock map[string]uint64) {
	h.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.svc.brokers...), kgo.ConsumeTopics(h.cfg.Streams[0].Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(h.t, err)
	defer cl.Close()
	counts, maxBlock, minBlock = map[string]int{}, map[string]uint64{}, map[string]uint64{}
	quiet := 0
	for quiet < 3 {
		ctx, cancel := context.WithTimeout(h.t.Context(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			var op, rng string
			for _, hd := range r.Headers {
				switch hd.Key {
				case encode.HeaderOp:
					op = string(hd.Value)
				case encode.HeaderRange:
					rng = string(hd.Value)
				}
			}
			counts[op]++
			a, b, _ := strings.Cut(rng, "-")
			lo, _ := strconv.ParseUint(a, 10, 64)
			hi, _ := strconv.ParseUint(b, 10, 64)
			maxBlock[op] = max(maxBlock[op], hi)
			if v, ok := minBlock[op]; !ok || lo < v {
				minBlock[op] = lo
			}
		})
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return counts, maxBlock, minBlock
}

func TestRunBackfill(t *testing.T) {
	t.Parallel()
	scenarioBackfill(t, fakeServices(t))
}

// scenarioBackfill: 200 blocks of history, backfilled in 3 partitions of
// steps of 25 blocks by 2 workers up to 30 blocks below the head, then the
// live stream from there, with a reorg in the live part. The topic then
// holds each row once: op r below the hand-over block, op c from it.
func scenarioBackfill(t *testing.T, svc services) {
	h := newBackfillHarness(t, svc, 200, config.BackfillConfig{Workers: 2, PartitionSize: 70, StepBlocks: 25, HandoverMargin: 30})
	stop := h.run()
	h.waitHead()
	h.sim.Mine(3)
	h.waitHead()
	require.NoError(t, h.sim.Reorg(2, 3))
	h.waitHead()
	require.NoError(t, stop())

	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted, "the reorg in the live part retracted rows")
	assert.Equal(t, 1, h.count("handover"))
	// [0, 170): 70+70+30 blocks in steps of 25 → 3+3+2 steps.
	assert.Equal(t, 8, h.count("backfill"))
	counts, maxBlock, minBlock := h.topicOps()
	assert.Positive(t, counts["r"], "backfilled rows")
	assert.Positive(t, counts["c"], "live rows")
	assert.Equal(t, uint64(169), maxBlock["r"], "the backfill ends 30 blocks below head 199")
	assert.Equal(t, uint64(170), minBlock["c"], "the live stream starts at the hand-over block")
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	st, err := ops.Status(t.Context(), b.store, nil, h.cfg.Streams[0], time.Now())
	b.close()
	require.NoError(t, err)
	require.NoError(t, st.BackfillErr)
	require.Len(t, st.Backfill, 3, "partition records")
	for _, p := range st.Backfill {
		assert.True(t, p.Done, "partition [%d, %d) done", p.From, p.To)
	}
	assert.Equal(t, [2]uint64{140, 170}, [2]uint64{st.Backfill[2].From, st.Backfill[2].To})
	// status's progress figures, from the records: all 170 blocks done,
	// and this run's rows.
	prog := st.BackfillProgress
	assert.Equal(t, [2]uint64{170, 170}, [2]uint64{prog.BlocksDone, prog.BlocksTotal})
	assert.Equal(t, uint64(counts["r"]), prog.Rows, "the records count the rows published")
	var out strings.Builder
	st.WriteText(&out, "redis")
	assert.Contains(t, out.String(), "backfill: 3 partition(s) recorded, 3 done; 170/170 blocks (100.0%)")

	// A rewind does not reach into the backfilled blocks.
	b, err = newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	_, err = b.rewind(t.Context(), h.cfg.Streams[0].ID, 150)
	b.close()
	require.Error(t, err)
	assert.ErrorContains(t, err, "block 150 is inside the stream's backfill (published up to block 169)")

	// A restart goes on live: no second backfill, no hand-over.
	h.sim.Mine(2)
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	assert.Equal(t, 8, h.count("backfill"))
	assert.Equal(t, 1, h.count("handover"))
	requireClean(t, h.verify())
}

func TestRunBackfillResumes(t *testing.T) {
	t.Parallel()
	scenarioBackfillResumes(t, fakeServices(t))
}

// scenarioBackfillResumes stops the bridge in the middle of the backfill,
// then loses the checkpoint store: the restarted backfill reads its progress
// from the control topic and publishes only the blocks not yet published.
func scenarioBackfillResumes(t *testing.T, svc services) {
	h := newBackfillHarness(t, svc, 240, config.BackfillConfig{Workers: 1, PartitionSize: 60, StepBlocks: 10, HandoverMargin: 20})
	stop, b := h.runBridge()
	require.Eventually(t, func() bool { return h.count("backfill") >= 5 }, 30*time.Second, 5*time.Millisecond)
	left := gaugeValue(t, b.reg, "amp_bridge_backfill_blocks_remaining", h.cfg.Streams[0].ID)
	ready := b.health.Report().Streams[h.cfg.Streams[0].ID].Ready
	require.NoError(t, stop())
	assert.True(t, ready, "/readyz counts a stream in its backfill as ready")
	assert.Less(t, left, 220.0, "amp_bridge_backfill_blocks_remaining went down")
	assert.Positive(t, left)
	first := h.count("backfill")
	require.Less(t, first, 22, "stopped before the end of the backfill")
	assert.Zero(t, h.count("handover"))
	if h.svc.flush != nil {
		h.svc.flush(t)
	} else {
		h.flushPrefix(t, h.svc.redis)
	}
	stop, b = h.runBridge()
	h.waitHead()
	assert.Zero(t, gaugeValue(t, b.reg, "amp_bridge_backfill_blocks_remaining", h.cfg.Streams[0].ID))
	require.NoError(t, stop())
	// [0, 220) in steps of 10: 22 steps, none run twice.
	assert.Equal(t, 22, h.count("backfill"))
	assert.Equal(t, 1, h.count("handover"))
	requireClean(t, h.verify())
}

// TestRunBackfillRefusesSQLWithoutBlockColumn: the partitions filter on the
// block column, so a query without it is refused before anything is
// published, with the fix in the message.
func TestRunBackfillRefusesSQLWithoutBlockColumn(t *testing.T) {
	h := newBackfillHarness(t, fakeServices(t), 20, config.BackfillConfig{HandoverMargin: 5})
	h.cfg.Streams[0].SQL = "SELECT tx_hash, block_num FROM eth_rpc.transactions"
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = b.run(ctx) // a permanent error ends the run by itself
	b.close()
	require.NoError(t, ctx.Err(), "the stream did not stop")
	require.Error(t, err)
	assert.ErrorContains(t, err, `columns named "_block_num"`)
	assert.ErrorContains(t, err, "backfill.column")
	assert.ErrorIs(t, err, config.ErrInvalid)
	assert.Zero(t, h.count("backfill"))

	// Naming the column that is there works.
	h.cfg.Streams[0].Backfill.Column = "block_num"
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	assert.Positive(t, h.count("backfill"))
}

func TestRunBackfillHandoverRestart(t *testing.T) {
	t.Parallel()
	scenarioBackfillHandoverRestart(t, fakeServices(t))
}

// scenarioBackfillHandoverRestart backfills up to the head (margin 0), so
// the live stream has nothing to publish yet, and restarts: once with the
// checkpoint store, once without it (rebuilt from the hand-over watermark
// event). Both resume at the hand-over block.
func scenarioBackfillHandoverRestart(t *testing.T, svc services) {
	h := newBackfillHarness(t, svc, 50, config.BackfillConfig{Workers: 2, StepBlocks: 20, HandoverMargin: 0})
	h.cfg.Streams[0].Backfill.HandoverMargin = 0 // defaults() set it to retention_blocks
	stop := h.run()
	require.Eventually(t, func() bool { return h.count("handover") == 1 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, stop())
	assert.Zero(t, h.count("commit"), "nothing live yet")
	stop, b := h.runBridge()
	// Ready: the restart reconciled the hand-over checkpoint and opened the
	// live stream.
	require.Eventually(t, func() bool { return len(b.notReady()) == 0 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, stop())
	if h.svc.flush != nil {
		h.svc.flush(t)
	} else {
		h.flushPrefix(t, h.svc.redis)
	}
	h.sim.Mine(4)
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	assert.Equal(t, 1, h.count("handover"))
	assert.Equal(t, 4, h.count("backfill"), "partitions [0, 25) and [25, 50) in steps of 20")
	requireClean(t, h.verify())
	_, maxBlock, minBlock := h.topicOps()
	assert.Equal(t, uint64(49), maxBlock["r"])
	assert.Equal(t, uint64(50), minBlock["c"])

	// A reorg inside the first live microbatch (50..=53): no watermark ends
	// before the fork, so the bridge retracts back to the hand-over and
	// resumes there.
	stop = h.run()
	h.waitHead()
	require.NoError(t, h.sim.Reorg(2, 3))
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted)
}

// gaugeValue gathers reg and returns the value of the gauge or counter
// name with the label stream (the test fails when it is not there).
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name, stream string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stream" && l.GetValue() == stream {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	require.Failf(t, "metric not gathered", "%s{stream=%q}", name, stream)
	return 0
}

// TestRewindFreshBackfillStreamPublishesNothing: `bridge rewind` on a
// backfill-enabled stream that has committed nothing neither runs the
// backfill nor commits a hand-over or a checkpoint: it refuses, and no
// record reaches the data or the control topic.
func TestRewindFreshBackfillStreamPublishesNothing(t *testing.T) {
	svc := fakeServices(t)
	h := newBackfillHarness(t, svc, 60, config.BackfillConfig{Workers: 2, StepBlocks: 10, HandoverMargin: 5})
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	_, err = b.rewind(t.Context(), h.cfg.Streams[0].ID, 10)
	b.close()
	require.ErrorIs(t, err, ops.ErrNothingCommitted)

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), h.cfg.Streams[0].Topic, h.cfg.Kafka.ControlTopic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			assert.Zero(t, o.Offset, "records in %s/%d", o.Topic, o.Partition)
		}
	})
	b, err = connect(t.Context(), h.cfg, testLogger(), needStore)
	require.NoError(t, err)
	defer b.close()
	_, err = b.store.Load(t.Context(), h.cfg.Streams[0].ID)
	require.ErrorIs(t, err, offsets.ErrNotFound, "rewind stored a checkpoint")
}
