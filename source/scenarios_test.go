package source_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// The B scenarios of amp-protocol.md §8.2 run end to end: the simulator
// (source/ampsim) in scripted mode sends exact batches, the client decodes
// them into envelopes, and protocolStream applies the ProtocolStream rules of
// §5.1 with reorg.Validate and reorg.Detect, producing the events the Rust
// client produces (Data, Reorg, Watermark) or the named validation error.

// simBatch is one scripted batch: ranges, complete, rows.
func simBatch(rows int, complete bool, ranges ...reorg.BlockRange) ampsim.ScriptedBatch {
	return ampsim.ScriptedBatch{Ranges: ranges, Complete: complete, Rows: rows}
}

func simD(ranges ...reorg.BlockRange) ampsim.ScriptedBatch { return simBatch(1, false, ranges...) }
func simW(ranges ...reorg.BlockRange) ampsim.ScriptedBatch { return simBatch(0, true, ranges...) }
func simK(ranges ...reorg.BlockRange) ampsim.ScriptedBatch { return simBatch(0, false, ranges...) }

// startSim starts a simulator with one scripted streaming DoGet and returns a
// stream of the client on it.
func startSim(t *testing.T, batches ...ampsim.ScriptedBatch) *source.Stream {
	t.Helper()
	sim, err := ampsim.New(ampsim.Config{})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	sim.EnqueueScript(ampsim.Script{Batches: batches, Hang: true})
	c := newClient(t, sim.Addr(), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT * FROM eth_rpc.blocks SETTINGS stream = true", fixedCursor(nil))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// protocolStream reads n envelopes and applies amp-protocol.md §5.1: for
// each batch, Validate(previous, incoming), then a Reorg event per Detect,
// then Data or Watermark; previous = incoming. It returns the events as text
// and the first validation error.
func protocolStream(t *testing.T, s *source.Stream, n int) ([]string, error) {
	t.Helper()
	var (
		events   []string
		previous []reorg.BlockRange
	)
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		env, err := s.Next(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, source.KindBatch, env.Kind)
		rows := env.Batch.NumRows()
		env.Release()
		if err := reorg.Validate(previous, env.Ranges); err != nil {
			return events, err
		}
		for _, inv := range reorg.Detect(previous, env.Ranges) {
			events = append(events, "Reorg "+inv.String())
		}
		kind := "Data"
		if env.Complete {
			kind = "Watermark"
		}
		events = append(events, fmt.Sprintf("%s %s rows=%d", kind, rangesText(env.Ranges), rows))
		previous = env.Ranges
	}
	return events, nil
}

func rangesText(rs []reorg.BlockRange) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s %d..=%d", r.Network, r.Start, r.End)
	}
	return out
}

func requireKind(t *testing.T, err error, kind reorg.ValidationKind) {
	t.Helper()
	var ve *reorg.ValidationError
	require.ErrorAs(t, err, &ve, "want %v, got %v", kind, err)
	assert.Equal(t, kind, ve.Kind, "%v", err)
	assert.ErrorIs(t, err, reorg.ErrInvalidRanges)
}

func TestB01_ConsecutiveRanges(t *testing.T) {
	s := startSim(t, simD(R(0, 10, 0)), simD(R(11, 20, 0)))
	events, err := protocolStream(t, s, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"Data eth 0..=10 rows=1", "Data eth 11..=20 rows=1"}, events)
}

func TestB02_Gap(t *testing.T) {
	s := startSim(t, simD(R(0, 10, 0)), simD(R(12, 20, 0)))
	events, err := protocolStream(t, s, 2)
	requireKind(t, err, reorg.Gap)
	var ve *reorg.ValidationError
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, uint64(12), ve.Incoming.Start)
	assert.Equal(t, uint64(10), ve.Previous.End)
	assert.Equal(t, []string{"Data eth 0..=10 rows=1"}, events)
}

func TestB03_HashMismatchOnConsecutiveBlocks(t *testing.T) {
	s := startSim(t, simD(R(0, 10, 0)), simD(withPrev(R(11, 20, 0), H("eth", 7, 10))))
	_, err := protocolStream(t, s, 2)
	requireKind(t, err, reorg.HashMismatch)
}

func TestB04_InvalidReorg(t *testing.T) {
	s := startSim(t, simD(R(0, 10, 0)), simD(withPrev(R(10, 20, 0), H("eth", 0, 10))))
	_, err := protocolStream(t, s, 2)
	requireKind(t, err, reorg.InvalidReorg)
}

func TestB05_BackwardJumpIsReorg(t *testing.T) {
	s := startSim(t, simD(R(11, 15, 0)), simD(R(11, 12, 1)))
	events, err := protocolStream(t, s, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"Data eth 11..=15 rows=1", "Reorg eth 11..=15", "Data eth 11..=12 rows=1"}, events)
}

func TestB06_ReorgBeyondPreviousEnd(t *testing.T) {
	s := startSim(t, simD(R(11, 20, 0)), simD(R(15, 25, 1)))
	events, err := protocolStream(t, s, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"Data eth 11..=20 rows=1", "Reorg eth 15..=25", "Data eth 15..=25 rows=1"}, events)
}

func TestB07_RepeatedRangeIsNotReorg(t *testing.T) {
	r := R(0, 10, 0)
	s := startSim(t, simD(r), simK(r), simW(r))
	events, err := protocolStream(t, s, 3)
	require.NoError(t, err)
	assert.Equal(t, []string{"Data eth 0..=10 rows=1", "Data eth 0..=10 rows=0", "Watermark eth 0..=10 rows=0"}, events)
}

func TestB08_DuplicateNetwork(t *testing.T) {
	s := startSim(t, simD(R(0, 10, 0), R(0, 10, 0)))
	_, err := protocolStream(t, s, 1)
	requireKind(t, err, reorg.DuplicateNetwork)
}

func TestB09_NetworkSetChanges(t *testing.T) {
	t.Run("count", func(t *testing.T) {
		s := startSim(t, simD(R(0, 10, 0)), simD(R(11, 20, 0), RN("polygon", 0, 5, 0)))
		_, err := protocolStream(t, s, 2)
		requireKind(t, err, reorg.NetworkCountChanged)
	})
	t.Run("unexpected", func(t *testing.T) {
		s := startSim(t, simD(R(0, 10, 0)), simD(RN("polygon", 0, 5, 0)))
		_, err := protocolStream(t, s, 2)
		requireKind(t, err, reorg.UnexpectedNetwork)
	})
}

func TestB10_Genesis(t *testing.T) {
	var zero reorg.Hash
	tests := []struct {
		name string
		r    reorg.BlockRange
		kind reorg.ValidationKind // 0: valid
	}{
		{"null prev at genesis", R(0, 10, 0), 0},
		{"zero prev at genesis", withPrev(R(0, 10, 0), zero), 0},
		{"non-zero prev at genesis", withPrev(R(0, 10, 0), H("eth", 0, 99)), reorg.InvalidPrevHash},
		{"null prev after genesis", func() reorg.BlockRange { r := R(5, 10, 0); r.HasPrevHash = false; return r }(), reorg.MissingPrevHash},
		{"zero prev after genesis", withPrev(R(5, 10, 0), zero), reorg.MissingPrevHash},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startSim(t, simD(tt.r))
			events, err := protocolStream(t, s, 1)
			if tt.kind == 0 {
				require.NoError(t, err)
				assert.Len(t, events, 1)
				return
			}
			requireKind(t, err, tt.kind)
		})
	}
}

// TestB11_NoReorgForRepeatedRanges is the negative test for the Python SDK
// bug (amp-python@xr reports a reorg at the second message).
func TestB11_NoReorgForRepeatedRanges(t *testing.T) {
	r := R(100, 110, 0)
	s := startSim(t, simD(r), simD(r), simW(r), simD(R(111, 120, 0)))
	events, err := protocolStream(t, s, 4)
	require.NoError(t, err)
	assert.Equal(t, []string{"Data eth 100..=110 rows=1", "Data eth 100..=110 rows=1",
		"Watermark eth 100..=110 rows=0", "Data eth 111..=120 rows=1"}, events)
	for _, e := range events {
		assert.NotContains(t, e, "Reorg")
	}
}

// TestReconnect_SimulatorFaultResumesFromCommittedCursor: the simulator
// fails a live stream mid-microbatch (A21/F7) with INTERNAL, UNAVAILABLE or a
// TCP reset; the client yields the marker, reads the caller's committed
// cursor and the resumed stream continues right after it (prev_hash = the
// cursor's hash), on the same Client.
func TestReconnect_SimulatorFaultResumesFromCommittedCursor(t *testing.T) {
	tests := []struct {
		name  string
		fault ampsim.Fault
		code  codes.Code // of the marker's cause
	}{
		{"internal", ampsim.Fault{AfterBatches: 3, Status: status.Error(codes.Internal, "streaming query execution error")}, codes.Internal},
		{"unavailable", ampsim.Fault{AfterBatches: 3, Status: status.Error(codes.Unavailable, "shutting down")}, codes.Unavailable},
		{"tcp reset", ampsim.Fault{AfterBatches: 3, Disconnect: true}, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3, TxPerBlock: 4},
				MaxMicrobatchBlocks: 1, KeepAlive: ampsim.KeepAliveOff})
			require.NoError(t, err)
			require.NoError(t, sim.Start(t.Context()))
			t.Cleanup(func() { require.NoError(t, sim.Close()) })
			// Block 0: data + completion (2 batches); block 1: data, then the fault.
			sim.InjectFault(tt.fault)
			c := newClient(t, sim.Addr(), nil, source.Deps{})
			// The consumer commits every watermark at once; on a marker it
			// rolls back to the committed ranges, as the reorg machine does.
			var (
				committed, previous []reorg.BlockRange
				resumedWith         = "unset"
				markers             int
			)
			s, err := c.Stream(t.Context(), "SELECT block_num, tx_hash FROM eth_rpc.transactions SETTINGS stream = true",
				func() reorg.Cursor { return reorg.CursorFromRanges(committed) })
			require.NoError(t, err)
			defer s.Close()
			for {
				g := next(t, s)
				if g.kind == source.KindReconnect {
					markers++
					assert.Equal(t, tt.code, status.Code(g.cause), "%v", g.cause)
					previous = committed
					resumedWith = ""
					if committed != nil {
						resumedWith, err = reorg.CursorFromRanges(committed).Header()
						require.NoError(t, err)
					}
					continue
				}
				require.NoError(t, reorg.Validate(previous, g.ranges), "the resumed stream continues the committed one")
				require.Empty(t, reorg.Detect(previous, g.ranges), "no reorg: nothing changed on the chain")
				previous = g.ranges
				if g.complete {
					committed = g.ranges
					if g.ranges[0].End == 2 {
						break
					}
				}
			}
			var resumes []string
			for _, r := range sim.Requests() {
				if r.Method == "GetFlightInfo" {
					resumes = append(resumes, r.Cursor)
				}
			}
			require.Len(t, resumes, 2, "exactly one reconnect")
			assert.Empty(t, resumes[0])
			if markers == 0 {
				// A TCP reset can destroy every batch before the client read
				// one: nothing was delivered, so there is no marker and the
				// stream restarts from the same (empty) cursor.
				require.True(t, tt.fault.Disconnect, "a status fault after 3 batches always delivers data first")
				assert.Empty(t, resumes[1])
				return
			}
			assert.Equal(t, 1, markers)
			assert.Equal(t, resumedWith, resumes[1], "resumed from the cursor committed when the marker was consumed")
		})
	}
}

// TestInvalidArgumentFailsFast_Simulator: a non-incremental streaming query
// (A18) fails at DoGet with INVALID_ARGUMENT; the client fails fast with the
// server's message and does not reconnect.
func TestInvalidArgumentFailsFast_Simulator(t *testing.T) {
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2}})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	c := newClient(t, sim.Addr(), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT COUNT(*) FROM eth_rpc.blocks SETTINGS stream = true", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	err = nextErr(t, s)
	var se *source.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, codes.InvalidArgument, se.Code)
	assert.Contains(t, se.Message, "non-incremental")
	assert.ErrorIs(t, err, source.ErrPermanent)
	assert.Len(t, sim.Requests(), 2, "GetFlightInfo + DoGet, no retry")
}

// TestF05_KeepAliveDuringLongMicrobatch_Simulator: the simulator's faithful
// per-microbatch keep-alive (interval scaled from 30 s to 40 ms, microbatch
// execution from 90 s to 300 ms) yields 0-row complete=false envelopes with
// the microbatch's range; they neither end the stream nor look like a reorg.
func TestF05_KeepAliveDuringLongMicrobatch_Simulator(t *testing.T) {
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2, TxPerBlock: 2},
		KeepAlive: ampsim.KeepAlivePerMicrobatch, KeepAliveInterval: 40 * time.Millisecond, MicrobatchDelay: 300 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	c := newClient(t, sim.Addr(), nil, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT block_num, tx_hash FROM eth_rpc.transactions SETTINGS stream = true", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	var previous []reorg.BlockRange
	keepAlives, data := 0, 0
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		env, err := s.Next(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, source.KindBatch, env.Kind)
		require.NoError(t, reorg.Validate(previous, env.Ranges))
		assert.Empty(t, reorg.Detect(previous, env.Ranges), "a keep-alive is never a reorg")
		previous = env.Ranges
		switch {
		case env.KeepAlive():
			keepAlives++
		case env.Complete:
		default:
			data++
		}
		complete := env.Complete
		env.Release()
		if complete {
			break
		}
	}
	assert.GreaterOrEqual(t, keepAlives, 3, "300 ms microbatch with a 40 ms keep-alive")
	assert.Positive(t, data)
	assert.Len(t, sim.Requests(), 2, "keep-alives caused no reconnect")
}

// TestF06_LongSilence_Simulator: after the stream caught up, the simulator
// (faithful keep-alive policy) sends nothing while no block is mined; the
// client stays on the same DoGet, with no watchdog, and receives the next
// microbatch when a block arrives.
func TestF06_LongSilence_Simulator(t *testing.T) {
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 1, TxPerBlock: 1},
		KeepAliveInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	c := newClient(t, sim.Addr(), func(c *source.Config) { c.RequestTimeout = 100 * time.Millisecond }, source.Deps{})
	s, err := c.Stream(t.Context(), "SELECT * FROM eth_rpc.blocks SETTINGS stream = true", fixedCursor(nil))
	require.NoError(t, err)
	defer s.Close()
	for done := false; !done; {
		done = next(t, s).complete
	}
	// Silence: 10× RequestTimeout with nothing on the wire.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err = s.Next(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing arrives while the chain is idle")
	sim.Mine(1)
	var g got
	for g = next(t, s); !g.complete; g = next(t, s) {
		assert.Equal(t, source.KindBatch, g.kind)
	}
	assert.Equal(t, uint64(1), g.ranges[0].Start)
	assert.Len(t, sim.Requests(), 2, "the client stayed on the same stream")
}

// TestDictionaryBatches_Simulator: with dictionary-encoded strings the
// simulator sends DictionaryBatch messages before the record batches; the
// client decodes them, and no Arrow memory is left after Close.
func TestDictionaryBatches_Simulator(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sim, err := ampsim.New(ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3, TxPerBlock: 5}, DictionaryStrings: true})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	want, err := sim.Primary().ExpectedRows("transactions", 0, 2)
	require.NoError(t, err)
	c := newClient(t, sim.Addr(), nil, source.Deps{Allocator: mem})
	s, err := c.Query(t.Context(), "SELECT block_num, value FROM eth_rpc.transactions")
	require.NoError(t, err)
	rows := 0
	for {
		env, err := s.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if env.Batch.NumRows() > 0 {
			_, ok := env.Batch.Column(1).(*array.Dictionary)
			assert.True(t, ok, "value is %T", env.Batch.Column(1))
		}
		rows += int(env.Batch.NumRows())
		env.Release()
	}
	assert.Equal(t, want, rows)
	require.NoError(t, s.Close())
}
