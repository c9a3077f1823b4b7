package ops

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// TestRewindScanMatchesWholeHistory: the streaming rewindScan finds the
// same target, rebuild segment and batches to retract as the computation
// over the whole history held in memory that it replaced, over random
// histories of full copies, state watermarks, undos and backfill events.
func TestRewindScanMatchesWholeHistory(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		hist := randomHistory(r)
		to := uint64(100 + r.IntN(60))
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := newRewindScan(to)
			for _, h := range hist {
				require.NoError(t, s.add(h))
			}
			target, live := wholeHistoryRewind(hist, to)
			assert.Equal(t, offsets.LastLiveWatermark(hist) >= 0, s.anyLive)
			if target < 0 {
				assert.Empty(t, s.target)
			} else {
				require.NotEmpty(t, s.target)
				assert.Equal(t, hist[target].Offset, s.target[len(s.target)-1].Offset)
				// The segment holds what StateAt needs: the newest full copy
				// before the target and every live watermark since.
				var want []int64
				for _, h := range hist[:target+1] {
					if w := h.Event.Watermark; offsets.IsLiveState(w) {
						if len(w.Checkpoint) > 0 {
							want = want[:0]
						}
						want = append(want, h.Offset)
					}
				}
				var got []int64
				for _, h := range s.target {
					got = append(got, h.Offset)
				}
				assert.Equal(t, want, got)
			}
			assert.Equal(t, slices.Sorted(maps.Keys(live)), slices.Sorted(maps.Keys(s.live)))
		})
	}
}

// wholeHistoryRewind is Rewind's target and retraction set computed over
// the whole history, as it was before rewindScan.
func wholeHistoryRewind(hist []offsets.HistoryEvent, to uint64) (int, map[string]offsets.Batch) {
	target := -1
	for i, h := range hist {
		if w := h.Event.Watermark; offsets.IsLiveState(w) && cursorBefore(w.Cursor, to) {
			target = i
		}
	}
	live := map[string]offsets.Batch{}
	for _, h := range hist[target+1:] {
		switch {
		case h.Event.Watermark != nil:
			for _, cb := range h.Event.Watermark.Batches {
				live[cb.BatchID] = cb.Batch()
			}
		case h.Event.Undo != nil:
			for _, id := range h.Event.Undo.BatchIDs {
				delete(live, id)
			}
		}
	}
	return target, live
}

// randomHistory is a stream's history: backfill watermarks, a hand-over,
// then live watermarks (a full copy now and then), undos of earlier
// batches, and rewinds that move the cursor back.
func randomHistory(r *rand.Rand) []offsets.HistoryEvent {
	var hist []offsets.HistoryEvent
	off := int64(0)
	add := func(ev offsets.ControlEvent) {
		hist = append(hist, offsets.HistoryEvent{Offset: off, Event: ev})
		off += 2
	}
	batch := func(id string, block uint64) offsets.CommittedBatch {
		return offsets.CommittedBatch{BatchID: id, Ranges: []reorg.BlockRange{{Network: "mainnet", Start: block, End: block}}}
	}
	for i := range r.IntN(4) {
		add(offsets.ControlEvent{Kind: offsets.ControlWatermark, Watermark: &offsets.Watermark{
			Backfill: &offsets.BackfillPartition{From: 0, To: 100}, Batches: []offsets.CommittedBatch{batch(fmt.Sprint("bf", i), uint64(i))}}})
	}
	block := uint64(100)
	cursor := func(b uint64) reorg.Cursor { return reorg.Cursor{"mainnet": {Number: b}} }
	add(offsets.ControlEvent{Kind: offsets.ControlWatermark, Watermark: &offsets.Watermark{Cursor: cursor(block), Checkpoint: []byte{1}}})
	var ids []string
	for n := range 40 + r.IntN(40) {
		switch k := r.IntN(10); {
		case k == 0 && len(ids) > 0:
			add(offsets.ControlEvent{Kind: offsets.ControlUndo, Undo: &offsets.Undo{BatchIDs: []string{ids[r.IntN(len(ids))]}}})
		case k == 1:
			block -= min(block-100, uint64(r.IntN(10)))
			add(offsets.ControlEvent{Kind: offsets.ControlWatermark, Watermark: &offsets.Watermark{Cursor: cursor(block), Checkpoint: []byte{1}}})
		default:
			id := fmt.Sprint("b", n)
			ids = append(ids, id)
			w := &offsets.Watermark{Cursor: cursor(block), Batches: []offsets.CommittedBatch{batch(id, block)}}
			if r.IntN(8) == 0 {
				w.Checkpoint = []byte{1}
			} else {
				w.State = &offsets.StreamState{}
			}
			add(offsets.ControlEvent{Kind: offsets.ControlWatermark, Watermark: w})
			block++
		}
	}
	return hist
}
