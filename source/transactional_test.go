package source_test

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// The F scenarios of amp-protocol.md §8.6 that need a consumer run the Go
// pair end to end: the simulator in chain mode, the client, and a
// transactional consumer (§5.2) built from reorg.Machine and a model sink.
// The consumer is the Rust client's, not the bridge's: every Data event is
// written to the sink at once (visible), the machine's Next is persisted
// after every event, and the snapshot at every watermark, which it commits.
// Undo deletes the rows of the invalidated events. A crash drops the
// machine and the stream and restarts from what was persisted.

const txSQL = "SELECT block_num, tx_hash FROM eth_rpc.transactions"

// txConsumer is the transactional consumer and its model sink.
type txConsumer struct {
	t   *testing.T
	sim *ampsim.Server
	c   *source.Client

	// Persisted state (survives a crash).
	mu        sync.Mutex
	persisted reorg.Snapshot      // the snapshot at the last commit, Next per event
	sink      map[uint64][]string // event seq → rows ("block:tx_hash")

	// In-memory state of the current run.
	m     *reorg.Machine
	s     *source.Stream
	undos []reorg.Event
}

func newTxConsumer(t *testing.T, cfg ampsim.Config) *txConsumer {
	t.Helper()
	sim, err := ampsim.New(cfg)
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	return &txConsumer{t: t, sim: sim, c: newClient(t, sim.Addr(), nil, source.Deps{}), sink: map[uint64][]string{}}
}

// cursor is the committed resume position (called by the client's goroutine).
func (x *txConsumer) cursor() reorg.Cursor {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.persisted.Cursor()
}

// start (re)starts from the persisted state, as after a process restart,
// and handles the events that precede the stream (an Undo(Rewind)).
func (x *txConsumer) start() {
	x.t.Helper()
	x.mu.Lock()
	snap := x.persisted
	x.mu.Unlock()
	m, err := reorg.New(reorg.DefaultConfig(), snap)
	require.NoError(x.t, err)
	x.m = m
	x.handle(m.Start(), nil)
	if x.s == nil {
		s, err := x.c.Stream(x.t.Context(), txSQL+" SETTINGS stream = true", x.cursor)
		require.NoError(x.t, err)
		x.s = s
	}
}

// crash drops everything that is not persisted.
func (x *txConsumer) crash() {
	require.NoError(x.t, x.s.Close())
	x.s, x.m = nil, nil
}

// handle applies events: Data is written, Undo deletes, Watermark commits.
func (x *txConsumer) handle(evs []reorg.Event, rows []string) {
	x.t.Helper()
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ev := range evs {
		switch ev.Kind {
		case reorg.KindData:
			x.sink[ev.Seq] = rows
		case reorg.KindUndo:
			x.undos = append(x.undos, ev)
			for seq := ev.First; seq <= ev.Last; seq++ {
				delete(x.sink, seq)
			}
		case reorg.KindWatermark:
			require.NoError(x.t, x.m.Commit(ev.Seq))
			x.persisted = x.m.Snapshot()
		}
		x.persisted.Next = x.m.Next()
	}
	x.persisted.Next = x.m.Next()
}

// untilHead consumes the stream until a watermark ends at the chain's head.
// A reconnect marker (the stream failed) restarts the consumer from the
// persisted state, as the bridge restarts a stream (the client reconnects
// with the committed cursor).
func (x *txConsumer) untilHead() (markers int) {
	x.t.Helper()
	head, ok := x.sim.Head()
	require.True(x.t, ok)
	for {
		ctx, cancel := context.WithTimeout(x.t.Context(), 10*time.Second)
		env, err := x.s.Next(ctx)
		cancel()
		require.NoError(x.t, err)
		if env.Kind == source.KindReconnect {
			markers++
			x.start()
			continue
		}
		rows := txRows(x.t, env.Batch)
		complete, ranges := env.Complete, env.Ranges
		env.Release()
		evs, err := x.m.Apply(ranges, complete, len(rows))
		require.NoError(x.t, err, "%v", ranges)
		x.handle(evs, rows)
		if complete && ranges[0].End == head {
			return markers
		}
	}
}

// resumes returns the amp-resume header of every GetFlightInfo the
// simulator received.
func (x *txConsumer) resumes() []string {
	var out []string
	for _, r := range x.sim.Requests() {
		if r.Method == "GetFlightInfo" && r.Streaming {
			out = append(out, r.Cursor)
		}
	}
	return out
}

// rows returns the sink's visible rows.
func (x *txConsumer) rows() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for _, rs := range x.sink {
		out = append(out, rs...)
	}
	return out
}

// requireCanonical checks that the sink holds exactly the canonical chain's
// rows (a batch query of the same SQL), each once.
func (x *txConsumer) requireCanonical() {
	x.t.Helper()
	q, err := x.c.Query(x.t.Context(), txSQL)
	require.NoError(x.t, err)
	defer q.Close()
	var want []string
	for {
		env, err := q.Next(x.t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(x.t, err)
		want = append(want, txRows(x.t, env.Batch)...)
		env.Release()
	}
	require.NotEmpty(x.t, want)
	got := x.rows()
	seen := map[string]int{}
	for _, r := range got {
		seen[r]++
	}
	for r, n := range seen {
		require.Equal(x.t, 1, n, "row %s is in the sink %d times", r, n)
	}
	assert.ElementsMatch(x.t, want, got, "the sink equals the canonical chain")
}

// txRows returns "block:tx_hash" of each row of b.
func txRows(t *testing.T, b arrow.RecordBatch) []string {
	t.Helper()
	if b == nil || b.NumRows() == 0 {
		return nil
	}
	var blocks *array.Uint64
	var hashes *array.FixedSizeBinary
	for i, f := range b.Schema().Fields() {
		switch f.Name {
		case "block_num":
			blocks = b.Column(i).(*array.Uint64)
		case "tx_hash":
			hashes = b.Column(i).(*array.FixedSizeBinary)
		}
	}
	require.NotNil(t, blocks)
	require.NotNil(t, hashes)
	out := make([]string, b.NumRows())
	for i := range out {
		out[i] = blocks.ValueStr(i) + ":" + hex.EncodeToString(hashes.Value(i))
	}
	return out
}

func chainConfig(blocks int) ampsim.Config {
	return ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks, TxPerBlock: 3},
		MaxMicrobatchBlocks: 1, KeepAlive: ampsim.KeepAliveOff}
}

// TestF01_HappyPathKillAndRestart: three microbatches, each watermark
// committed; after a kill and restart the stream resumes at the last
// watermark's cursor, there is no Undo, and the sink holds every row once.
func TestF01_HappyPathKillAndRestart(t *testing.T) {
	x := newTxConsumer(t, chainConfig(3))
	x.start()
	require.Zero(t, x.untilHead())
	last := x.persisted.Watermarks[len(x.persisted.Watermarks)-1]
	require.Equal(t, uint64(2), last.Ranges[0].End, "three microbatches 0, 1, 2")
	x.crash()
	x.sim.Mine(2)
	x.start()
	require.Zero(t, x.untilHead())
	wantCursor, err := reorg.CursorFromRanges(last.Ranges).Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"", wantCursor}, x.resumes(), "the restart resumed at the last watermark")
	assert.Empty(t, x.undos, "no Undo")
	x.requireCanonical()
}

// TestF02_CrashBetweenSinkWriteAndCommit: the rows of a microbatch are in
// the sink but its watermark was never committed when the process dies; the
// restart emits Undo(Rewind) for the written events, the microbatch is sent
// again, and the sink ends with no duplicates.
func TestF02_CrashBetweenSinkWriteAndCommit(t *testing.T) {
	x := newTxConsumer(t, chainConfig(2))
	x.start()
	x.untilHead() // blocks 0 and 1 committed
	x.sim.Mine(1)
	// Block 2's data is written; the process dies before its watermark.
	for {
		env, err := x.s.Next(t.Context())
		require.NoError(t, err)
		require.Equal(t, source.KindBatch, env.Kind)
		rows := txRows(t, env.Batch)
		ranges, complete := env.Ranges, env.Complete
		env.Release()
		require.False(t, complete)
		evs, err := x.m.Apply(ranges, complete, len(rows))
		require.NoError(t, err)
		x.handle(evs, rows)
		if len(rows) > 0 {
			break
		}
	}
	written := x.m.Next() - 1
	x.crash()
	x.start()
	require.Len(t, x.undos, 1)
	u := x.undos[0]
	assert.Equal(t, reorg.CauseRewind, u.Cause)
	assert.LessOrEqual(t, u.First, written)
	assert.Equal(t, written, u.Last, "the rewind covers the written Data")
	x.untilHead()
	x.requireCanonical()
}

// TestF03_ReorgWhileDisconnected: the chain reorganises while the consumer
// is down (A9); the resumed stream starts at the fork point, the machine's
// Undo(Reorg) is computed from its first range and invalidates the replaced
// microbatches, and the sink ends equal to the canonical chain.
func TestF03_ReorgWhileDisconnected(t *testing.T) {
	x := newTxConsumer(t, chainConfig(8))
	x.start()
	x.untilHead() // blocks 0..=7, one microbatch each
	x.crash()
	require.NoError(t, x.sim.Reorg(3, 4)) // blocks 5, 6, 7 replaced; head 8
	x.start()
	x.untilHead()
	require.Len(t, x.undos, 1)
	u := x.undos[0]
	assert.Equal(t, reorg.CauseReorg, u.Cause)
	require.Len(t, u.Invalidations, 1)
	assert.Equal(t, uint64(5), u.Invalidations[0].Start, "from the resumed stream's first range")
	require.Len(t, u.Retract, 3, "the committed microbatches of blocks 5, 6 and 7")
	for i, w := range u.Retract {
		assert.Equal(t, uint64(5+i), w.Ranges[0].Start)
	}
	x.requireCanonical()
}

// TestF07_ServerErrorMidMicrobatch: the server fails the stream after the
// data of a microbatch and before its completion; the client reconnects
// from the last committed watermark, the consumer's restart undoes the
// partial rows by Undo(Rewind), and the sink ends with every row once.
func TestF07_ServerErrorMidMicrobatch(t *testing.T) {
	x := newTxConsumer(t, chainConfig(3))
	// Block 0: data + completion; block 1: data, then the error.
	x.sim.InjectFault(ampsim.Fault{AfterBatches: 3, Status: status.Error(codes.Internal, "streaming query execution error")})
	x.start()
	require.Equal(t, 1, x.untilHead(), "one reconnect")
	require.Len(t, x.undos, 1)
	u := x.undos[0]
	assert.Equal(t, reorg.CauseRewind, u.Cause)
	assert.Equal(t, [2]uint64{2, 2}, [2]uint64{u.First, u.Last}, "the Data of block 1 (after Data#0, Watermark#1)")
	b0, ok := x.sim.BlockHash(0)
	require.True(t, ok)
	want, err := reorg.Cursor{"mainnet": {Number: 0, Hash: b0}}.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{"", want}, x.resumes(), "reconnected from the last committed watermark (block 0)")
	x.requireCanonical()
}

// TestF08_MultiNetworkBatchQuery: a batch query joining two networks
// through the client (the raw layer: Query's envelopes) ends with a
// completion whose metadata has 2 ranges, and ProtocolStream validation
// (reorg.Validate, reorg.Detect) runs per network: every envelope
// validates against the previous one, a stream whose ranges stay
// consecutive on both networks passes, and a gap on one network is reported
// for that network while the other is consecutive.
func TestF08_MultiNetworkBatchQuery(t *testing.T) {
	cfg := ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3, TxPerBlock: 2}}
	cfg.ExtraNetworks = []ampsim.NetworkConfig{{Network: "base", Dataset: "base_rpc", InitialBlocks: 5, FirstBlock: 100, TxPerBlock: 2, BlockTime: 2 * time.Second}}
	sim, err := ampsim.New(cfg)
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	c := newClient(t, sim.Addr(), nil, source.Deps{})
	q, err := c.Query(t.Context(), `SELECT block_num, hash FROM eth_rpc.blocks UNION ALL SELECT block_num, hash FROM "edgeandnode/base_rpc".blocks`)
	require.NoError(t, err)
	defer q.Close()
	var (
		previous, last []reorg.BlockRange
		rows           int64
	)
	for {
		env, err := q.Next(t.Context())
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.Equal(t, source.KindBatch, env.Kind)
		rows += env.Batch.NumRows()
		ranges, complete := env.Ranges, env.Complete
		env.Release()
		require.NoError(t, reorg.Validate(previous, ranges), "%v after %v", ranges, previous)
		require.Empty(t, reorg.Detect(previous, ranges))
		previous = ranges
		if complete {
			last = ranges
		}
	}
	assert.Equal(t, int64(8), rows, "3 mainnet and 5 base blocks")
	require.Len(t, last, 2, "the completion's metadata has 2 ranges")
	assert.Equal(t, [2]string{"mainnet", "base"}, [2]string{last[0].Network, last[1].Network})
	assert.Equal(t, [2]uint64{0, 2}, [2]uint64{last[0].Start, last[0].End})
	assert.Equal(t, [2]uint64{100, 104}, [2]uint64{last[1].Start, last[1].End})
	for _, r := range last {
		h, ok := blockHash(t, sim, r.Network, r.End)
		require.True(t, ok)
		assert.Equal(t, h, r.Hash, "%s: the hash of its last block", r.Network)
	}

	// Validation per network, on a scripted two-network stream.
	t.Run("consecutive on both networks", func(t *testing.T) {
		s := startSim(t, simD(R(0, 10, 0), RN("base", 0, 5, 0)), simW(R(0, 10, 0), RN("base", 0, 5, 0)),
			simD(R(11, 20, 0), RN("base", 6, 9, 0)))
		events, err := protocolStream(t, s, 3)
		require.NoError(t, err)
		assert.Equal(t, []string{"Data eth 0..=10,base 0..=5 rows=1", "Watermark eth 0..=10,base 0..=5 rows=0",
			"Data eth 11..=20,base 6..=9 rows=1"}, events)
	})
	t.Run("gap on one network", func(t *testing.T) {
		s := startSim(t, simD(R(0, 10, 0), RN("base", 0, 5, 0)), simD(R(11, 20, 0), RN("base", 7, 9, 0)))
		_, err := protocolStream(t, s, 2)
		requireKind(t, err, reorg.Gap)
		var ve *reorg.ValidationError
		require.ErrorAs(t, err, &ve)
		assert.Equal(t, "base", ve.Network)
	})
	t.Run("reorg on one network", func(t *testing.T) {
		s := startSim(t, simD(R(0, 10, 0), RN("base", 0, 5, 0)), simD(R(11, 20, 0), RN("base", 4, 9, 1)))
		events, err := protocolStream(t, s, 2)
		require.NoError(t, err)
		assert.Equal(t, []string{"Data eth 0..=10,base 0..=5 rows=1", "Reorg base 4..=9",
			"Data eth 11..=20,base 4..=9 rows=1"}, events)
	})
}

func blockHash(t *testing.T, sim *ampsim.Server, network string, n uint64) (reorg.Hash, bool) {
	t.Helper()
	ch, err := sim.Chain(network)
	require.NoError(t, err)
	return ch.BlockHash(n)
}
