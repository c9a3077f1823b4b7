package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// newStartHarness is a harness over a chain of blocks blocks whose stream
// starts at start.
func newStartHarness(t *testing.T, svc services, blocks int, start config.StartPosition) *harness {
	t.Helper()
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks}, MaxMicrobatchBlocks: 16}, 64)
	h.cfg.Streams[0].Start = start
	require.NoError(t, h.cfg.Validate())
	return h
}

// status returns bridge status's text for the harness's stream.
func (h *harness) status() string {
	h.t.Helper()
	b, err := newBridge(h.t.Context(), h.cfg, testLogger())
	require.NoError(h.t, err)
	defer b.close()
	st, err := ops.Status(h.t.Context(), b.store, nil, h.cfg.Streams[0], time.Now())
	require.NoError(h.t, err)
	var out strings.Builder
	st.WriteText(&out, "redis")
	return out.String()
}

func TestRunStartLatest(t *testing.T) {
	t.Parallel()
	scenarioStartLatest(t, fakeServices(t))
}

// scenarioStartLatest: a new stream with start latest publishes only the
// blocks after Amp's synced head at its first start (head 29: from 30 on).
// The start is fixed by the first start's checkpoint: a restart with
// another start goes on from the checkpoint, and status says the setting is
// ignored.
func scenarioStartLatest(t *testing.T, svc services) {
	h := newStartHarness(t, svc, 30, config.StartLatest)
	assert.Contains(t, h.status(), "start latest: applies at the stream's first start")
	stop := h.run()
	require.Eventually(t, func() bool { return h.count("start") == 1 }, 30*time.Second, 5*time.Millisecond)
	h.sim.Mine(5)
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	counts, maxBlock, minBlock := h.topicOps()
	assert.Equal(t, uint64(30), minBlock["c"], "the first block after the synced head 29")
	assert.Equal(t, uint64(34), maxBlock["c"])
	assert.Zero(t, counts["r"])

	// Restarted with another start: ignored, also without the checkpoint
	// store (rebuilt from the control topic).
	h.cfg.Streams[0].Start = "3"
	assert.Contains(t, h.status(), "started at mainnet block 30 (its start position at the first start); streams[].start (now 3) is ignored")
	h.flush()
	h.sim.Mine(2)
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	assert.Equal(t, 1, h.count("start"), "no second start checkpoint")
	_, _, minBlock = h.topicOps()
	assert.Equal(t, uint64(30), minBlock["c"])
	requireClean(t, h.verify())
	assert.Contains(t, h.status(), "started at mainnet block 30", "the checkpoint rebuilt from the control topic remembers the start")
}

func TestRunStartBlockReorged(t *testing.T) {
	t.Parallel()
	scenarioStartBlockReorged(t, fakeServices(t))
}

// scenarioStartBlockReorged: a stream that starts at block 25, ahead of
// the chain (head 19): Amp waits for it, the stream publishes from it, and
// then a reorg replaces the start block (fork point 24), and another one
// reaches below it (fork point 22, below a start block that was never
// published): both are retracted, the stream goes on from block 25 of the
// new chain, and the topic equals a fresh query of blocks 25 on.
func scenarioStartBlockReorged(t *testing.T, svc services) {
	h := newStartHarness(t, svc, 20, "25")
	stop := h.run()
	require.Eventually(t, func() bool { return h.count("start") == 1 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, stop())
	// Restarted before anything was published, without the checkpoint
	// store and with another start: the start checkpoint in the control
	// topic still fixes block 25 (latest would be 20).
	h.flush()
	h.cfg.Streams[0].Start = config.StartLatest
	stop = h.run()
	h.sim.Mine(9) // head 28
	h.waitHead()
	require.NoError(t, h.sim.Reorg(4, 5)) // replaces 25..=28: head 29
	h.waitHead()
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted, "the replaced start block was retracted")
	require.NoError(t, h.sim.Reorg(8, 9)) // replaces 22..=29: head 30
	h.waitHead()
	require.NoError(t, stop())
	rep = h.verify()
	requireClean(t, rep)
	assert.Equal(t, 1, h.count("start"), "no second start checkpoint")
	_, _, minBlock := h.topicOps()
	assert.Equal(t, uint64(25), minBlock["c"], "nothing below the start block")
}

// flush empties the checkpoint store of the harness's stream.
func (h *harness) flush() {
	h.t.Helper()
	if h.svc.flush != nil {
		h.svc.flush(h.t)
		return
	}
	h.flushPrefix(h.t.(*testing.T), h.svc.redis)
}

// newOnceHarness is a harness whose stream is a one-shot load of [from, to)
// over a chain of blocks blocks.
func newOnceHarness(t *testing.T, svc services, blocks int, bf config.BackfillConfig) *harness {
	t.Helper()
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks}, MaxMicrobatchBlocks: 16}, 64)
	h.cfg.Streams[0].Mode = config.ModeOnce
	h.cfg.Streams[0].Backfill = bf
	h.cfg.Defaults()
	require.NoError(t, h.cfg.Validate())
	return h
}

// runToEnd runs the bridge until it returns by itself (a one-shot load
// stops), and returns its error; the test fails if it does not stop.
func (h *harness) runToEnd() error {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 60*time.Second)
	defer cancel()
	b := h.newBridge(ctx)
	defer b.close()
	err := b.run(ctx)
	require.NoError(h.t, ctx.Err(), "the bridge did not stop by itself")
	return err
}

// loadDone returns the details of the load-done events so far.
func (h *harness) loadDone() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.details["load-done"]...)
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	scenarioOnce(t, fakeServices(t))
}

// scenarioOnce: a one-shot load of [10, 80) publishes those blocks with op
// r and the bridge exits by itself without error (exit 0); a load stopped
// in the middle publishes only what is missing when run again; a run after
// a complete one publishes nothing and says so.
func scenarioOnce(t *testing.T, svc services) {
	h := newOnceHarness(t, svc, 120, config.BackfillConfig{From: 10, To: 80, Workers: 2, StepBlocks: 10, HandoverMargin: 5})
	// Stopped in the middle (a crash: the process is cancelled).
	stop := h.run()
	require.Eventually(t, func() bool { return h.count("backfill") >= 2 }, 30*time.Second, 5*time.Millisecond)
	require.NoError(t, stop())
	first := h.count("backfill")
	require.Less(t, first, 8, "stopped before the end of the load")
	assert.Empty(t, h.loadDone())

	require.NoError(t, h.runToEnd())
	// Partitions [10, 45) and [45, 80) in steps of 10: 4 + 4 steps.
	assert.Equal(t, 8, h.count("backfill"), "none published twice")
	require.Len(t, h.loadDone(), 1)
	assert.Contains(t, h.loadDone()[0], "blocks [10, 80) published")
	assert.Zero(t, h.count("commit"), "nothing live")
	assert.Zero(t, h.count("handover"))
	rep := h.verify()
	requireClean(t, rep)
	counts, maxBlock, minBlock := h.topicOps()
	assert.Zero(t, counts["c"])
	assert.Equal(t, [2]uint64{10, 79}, [2]uint64{minBlock["r"], maxBlock["r"]})
	assert.Contains(t, h.status(), "mode once: a one-shot load of blocks [10, 80)")

	// Again, after success: nothing, and it says so.
	h.sim.Mine(3)
	require.NoError(t, h.runToEnd())
	assert.Equal(t, 8, h.count("backfill"))
	require.Len(t, h.loadDone(), 2)
	assert.Contains(t, h.loadDone()[1], "blocks [10, 80) were all published before; nothing to publish")
	counts2, _, _ := h.topicOps()
	assert.Equal(t, counts, counts2, "no record added")
}

// TestRunOnceWholeRangeQuery: a one-shot load of a query whose rows depend
// on the rows of other blocks (LIMIT, DISTINCT) runs as one batch query over
// the whole range, in one step, however many workers and steps are
// configured, and publishes exactly that query's rows: for the LIMIT, its
// rows within [2, 60).
func TestRunOnceWholeRangeQuery(t *testing.T) {
	for name, sql := range map[string]string{
		"limit":    "SELECT _block_num, tx_index, tx_hash FROM eth_rpc.transactions LIMIT 25",
		"distinct": `SELECT DISTINCT _block_num, "from" FROM eth_rpc.transactions`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newOnceHarness(t, fakeServices(t), 80, config.BackfillConfig{From: 2, To: 60, Workers: 2, StepBlocks: 5, HandoverMargin: 5})
			h.cfg.Streams[0].SQL = sql
			require.NoError(t, h.cfg.Validate())
			require.NoError(t, h.runToEnd())
			assert.Equal(t, 1, h.count("backfill"), "one batch query over [2, 60)")
			rep := h.verify()
			requireClean(t, rep)
			if name == "limit" {
				assert.Less(t, rep.Expected, 25, "the LIMIT's rows of blocks 0 and 1 are not in the range")
			}
			queries := 0
			for _, q := range h.sim.Requests() {
				if q.Method == "DoGet" && strings.Contains(q.SQL, "amp_partition") && !strings.Contains(q.SQL, "< 0") {
					queries++
				}
			}
			assert.Equal(t, 1, queries, "data queries at Amp")
		})
	}
}

// TestRunOnceRefusesSplitAggregates: a one-shot load of a query whose rows
// are computed over many blocks and carry no block number (COUNT(*),
// DISTINCT of another column) is refused before anything is published,
// with the reason; the stream stops on the permanent error.
func TestRunOnceRefusesSplitAggregates(t *testing.T) {
	for sql, feature := range map[string]string{
		"SELECT COUNT(*) AS n FROM eth_rpc.transactions": "COUNT(…)",
		`SELECT DISTINCT "to" FROM eth_rpc.transactions`: "DISTINCT",
	} {
		t.Run(feature, func(t *testing.T) {
			h := newOnceHarness(t, fakeServices(t), 40, config.BackfillConfig{From: 0, To: 30, Workers: 2, StepBlocks: 5, HandoverMargin: 5})
			h.cfg.Streams[0].SQL = sql
			require.NoError(t, h.cfg.Validate())
			err := h.runToEnd()
			require.Error(t, err)
			assert.ErrorIs(t, err, config.ErrInvalid)
			assert.True(t, pipeline.Permanent(err))
			assert.ErrorContains(t, err, "has ["+feature+"] and its output has no block column \"_block_num\"")
			assert.ErrorContains(t, err, "one wrong answer per partition")
			assert.Zero(t, h.count("backfill"))
			assert.Empty(t, h.loadDone())
		})
	}
}

// TestRunOnceBesideLiveStream: a one-shot load in the same bridge as a
// live stream ends as done: /readyz stays ready (the live stream goes on,
// nothing is wrong) and amp_bridge_stream_up stays 1, so the stopped-stream
// alert does not fire.
func TestRunOnceBesideLiveStream(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 60}, MaxMicrobatchBlocks: 16}, 64)
	load := h.cfg.Streams[0]
	load.ID, load.Topic = load.ID+"-load", load.Topic+"-load"
	load.Mode, load.Backfill = config.ModeOnce, config.BackfillConfig{From: 5, To: 40, StepBlocks: 10, HandoverMargin: 5}
	h.cfg.Streams = append(h.cfg.Streams, load)
	h.cfg.Defaults()
	require.NoError(t, h.cfg.Validate())
	stop, b := h.runBridge()
	require.Eventually(t, func() bool { return len(h.loadDone()) == 1 }, 30*time.Second, 5*time.Millisecond)
	h.waitHead()
	var rep health.Report
	require.Eventually(t, func() bool {
		rep = b.health.Report()
		return rep.Streams[load.ID].State == health.StateDone
	}, 30*time.Second, 5*time.Millisecond)
	assert.True(t, rep.Ready, "/readyz: %+v", rep)
	assert.Contains(t, rep.Streams[load.ID].Reason, "one-shot load done: mainnet blocks [5, 40) published")
	assert.InDelta(t, 1, gaugeValue(t, b.reg, "amp_bridge_stream_up", load.ID), 0, "amp_bridge_stream_up")
	require.NoError(t, stop())
}

// TestRewindBelowStartBlock: bridge rewind of a stream that started at
// block 25 to a block below it retracts everything the stream published
// and resumes at the start block, not at Amp's first block: the blocks
// below the start stay unpublished.
func TestRewindBelowStartBlock(t *testing.T) {
	t.Parallel()
	h := newStartHarness(t, fakeServices(t), 30, "25")
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	res, err := b.rewind(t.Context(), h.cfg.Streams[0].ID, 10)
	b.close()
	require.NoError(t, err)
	assert.Positive(t, res.Rows)
	assert.Equal(t, uint64(25), res.Cursor["mainnet"].Number, "resumes at the start block")
	assert.True(t, res.Cursor["mainnet"].Hash.IsZero())

	h.mu.Lock()
	h.last = 0
	h.mu.Unlock()
	stop = h.run() // publishes 25..=29 again
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Equal(t, res.Rows, rep.Retracted)
	_, _, minBlock := h.topicOps()
	assert.Equal(t, uint64(25), minBlock["c"], "nothing below the start block")
}

// TestRunStartAtLeastOnce: a start position works without transactions
// too (the start checkpoint is committed the way every watermark is).
func TestRunStartAtLeastOnce(t *testing.T) {
	t.Parallel()
	h := newStartHarness(t, fakeServices(t), 12, config.StartLatest)
	h.cfg.Kafka.Delivery = config.AtLeastOnce
	stop := h.run()
	require.Eventually(t, func() bool { return h.count("start") == 1 }, 30*time.Second, 5*time.Millisecond)
	h.sim.Mine(3)
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())
	_, _, minBlock := h.topicOps()
	assert.Equal(t, uint64(12), minBlock["c"])
}
