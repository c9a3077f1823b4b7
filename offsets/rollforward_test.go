package offsets

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// chainSim is a chain of single-block ranges whose hashes depend on the
// fork (epoch) each block was mined on.
type chainSim struct {
	epoch []uint64 // per block
	next  uint64   // next epoch
}

func (c *chainSim) hash(n uint64) reorg.Hash {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], n)
	binary.BigEndian.PutUint64(b[8:], c.epoch[n])
	return sha256.Sum256(b[:])
}

func (c *chainSim) rng(n uint64) reorg.BlockRange {
	r := reorg.BlockRange{Network: "eth", Start: n, End: n, Hash: c.hash(n)}
	if n > 0 {
		r.PrevHash, r.HasPrevHash = c.hash(n-1), true
	}
	return r
}

// TestRollForwardMatchesTheMachine drives a reorg.Machine through a chain
// with reorgs, records after every commit what a delta watermark event
// carries, and checks that rolling forward from any earlier commit's state
// gives exactly the machine's state and batch log after the last commit.
func TestRollForwardMatchesTheMachine(t *testing.T) {
	var replays, aborts, undos, pruned int
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		m, err := reorg.New(reorg.Config{Retention: 30}, reorg.Snapshot{})
		require.NoError(t, err)
		c := &chainSim{}
		var states []ControlState // after each commit
		var deltas []Delta
		var log []Batch // the committed batch log
		head := int64(-1)
		for commit := range 60 {
			var pending []Batch
			for range 1 + r.IntN(3) { // microbatches per transaction
				var n uint64
				if head >= 6 && r.IntN(5) == 0 { // a reorg of 1-5 blocks
					d := 1 + r.IntN(5)
					n = uint64(head) - uint64(d) + 1
					c.next++
					c.epoch = c.epoch[:n]
				} else {
					n = uint64(head + 1)
				}
				if n == uint64(len(c.epoch)) {
					c.epoch = append(c.epoch, c.next)
				}
				head = int64(n)
				rg := []reorg.BlockRange{c.rng(n)}
				evs, err := m.Apply(rg, false, 1)
				require.NoError(t, err)
				if len(evs) > 0 && evs[0].Kind == reorg.KindUndo && evs[0].Replay {
					// As the bridge: roll back to the last commit and
					// reconnect from its cursor.
					m.Rollback()
					replays++
					pending = nil
					// The server resumes after the committed block, or
					// from the fork when that block was replaced.
					head = -1
					if cur := m.Snapshot().Cursor(); len(cur) > 0 {
						head = min(int64(cur["eth"].Number), int64(n)-1)
					}
					continue
				}
				w, err := m.Apply(rg, true, 0)
				require.NoError(t, err)
				for _, ev := range append(evs, w...) {
					switch ev.Kind {
					case reorg.KindUndo:
						undos++
						// A reorg reaching into the open transaction
						// aborts it: its batches are never committed.
						if ev.Abort {
							aborts++
							pending = nil
						}
					case reorg.KindWatermark:
						pending = append(pending, Batch{Seq: ev.Seq, ID: ev.BatchID, Ranges: ev.Ranges,
							Spans: []Span{{Topic: "t", Partition: 0, First: int64(ev.Seq), Last: int64(ev.Seq)}}})
					case reorg.KindData: // its rows are in the batch of the next watermark
					}
				}
			}
			require.NoError(t, m.Commit(m.Next()-1))
			snap := m.Snapshot()
			keep := map[uint64]bool{}
			retained := []uint64{}
			for _, w := range snap.Watermarks {
				keep[w.Seq] = true
				retained = append(retained, w.Seq)
			}
			var nextLog []Batch
			for _, b := range append(log, pending...) {
				if keep[b.Seq] {
					nextLog = append(nextLog, b)
				}
			}
			if nextLog == nil {
				nextLog = []Batch{}
			}
			log = nextLog
			off := int64(10 + 2*commit)
			deltas = append(deltas, Delta{Offset: off, Batches: pending, Retained: retained, Next: snap.Next, Incomplete: snap.Incomplete})
			states = append(states, ControlState{Offset: off, Fingerprint: "f", Snapshot: snap, Batches: log})
		}
		last := states[len(states)-1]
		if w := last.Snapshot.Watermarks; len(w) > 0 && w[0].Ranges[0].Start > 0 {
			pruned++
		}
		for _, from := range []int{0, 1, len(states) / 2, len(states) - 2, len(states) - 1} {
			got, err := RollForward(states[from], deltas[from+1:])
			require.NoError(t, err, "seed %d from commit %d", seed, from)
			assert.Equal(t, last.Offset, got.Offset)
			assert.Equal(t, last.Snapshot.Next, got.Snapshot.Next, "seed %d from %d", seed, from)
			assert.Equal(t, last.Snapshot.Incomplete, got.Snapshot.Incomplete)
			assert.Equal(t, last.Snapshot.Watermarks, got.Snapshot.Watermarks, "seed %d from %d", seed, from)
			assert.Equal(t, last.Batches, got.Batches, "seed %d from %d", seed, from)
		}
	}
	t.Logf("%d undos, %d aborting the open transaction, %d replays; %d of 20 runs pruned by retention", undos, aborts, replays, pruned)
	assert.Positive(t, undos)
	assert.Positive(t, aborts)
	assert.Positive(t, replays)
	assert.Positive(t, pruned)
}

func TestRollForwardErrors(t *testing.T) {
	base := ControlState{Offset: 5, Fingerprint: "f", Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []Batch{}}
	_, err := RollForward(base, []Delta{{Offset: 9, Retained: []uint64{3}, Next: 4}})
	require.ErrorIs(t, err, ErrRollForward)
	assert.ErrorContains(t, err, "retains watermark 3, which neither the checkpoint at offset 5 nor a later event records")
	_, err = RollForward(base, []Delta{{Offset: 5, Next: 1}})
	require.ErrorIs(t, err, ErrRollForward)
	assert.ErrorContains(t, err, "offset 5 follows offset 5")
	got, err := RollForward(base, nil)
	require.NoError(t, err)
	assert.Equal(t, base, got)
	// A hand-over survives the deltas until watermarks exist.
	h := base
	h.Snapshot = reorg.NewHandover(map[string]uint64{"eth": 100})
	got, err = RollForward(h, []Delta{{Offset: 6, Retained: []uint64{}, Next: 0, Incomplete: true}})
	require.NoError(t, err)
	assert.Equal(t, reorg.Cursor{"eth": {Number: 100}}, got.Snapshot.Cursor())
}
