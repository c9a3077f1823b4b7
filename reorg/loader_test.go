package reorg

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestE1_MicrobatchLoadedOnce: three batches of one range, only the last
// complete (with rows): all 6 rows are delivered and the range is checkpointed
// only at the third.
func TestE1_MicrobatchLoadedOnce(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	r := []BlockRange{R(100, 110, 0)}
	var rows int
	for i, complete := range []bool{false, false, true} {
		evs, err := m.Apply(r, complete, 2)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Kind == KindData {
				rows += e.Rows
			}
			if e.Kind == KindWatermark {
				assert.Equal(t, 2, i, "watermark only at the completion")
			}
		}
	}
	assert.Equal(t, 6, rows)
}

// TestE2_ReorgDeletesRangesFromFork: four complete ranges (9 rows), then a
// reorg from block 104: the ranges ending at or after 104 are retracted,
// the 3 rows of 100..=102 stay.
func TestE2_ReorgDeletesRangesFromFork(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c,
		step{ranges: []BlockRange{R(100, 102, 0)}, rows: 3}, W(R(100, 102, 0)),
		step{ranges: []BlockRange{R(103, 104, 0)}, rows: 2}, W(R(103, 104, 0)),
		step{ranges: []BlockRange{R(105, 106, 0)}, rows: 2}, W(R(105, 106, 0)),
		step{ranges: []BlockRange{R(107, 108, 0)}, rows: 2}, W(R(107, 108, 0)))
	require.Len(t, c.rows(), 9)
	evs, err := m.Apply([]BlockRange{withPrev(R(104, 108, 1), H("eth", 0, 103))}, false, 1)
	require.ErrorIs(t, err, ErrReconnect, "the fork is inside 103..=104: re-fetch 103 from cursor 102")
	c.handle(evs, nil)
	require.Len(t, evs, 1)
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 104, End: 108}}, evs[0].Invalidations)
	assert.Len(t, evs[0].Retract, 3)
	assert.Len(t, c.rows(), 3)
}

// TestE3_OverlapDeletesWholeRange: range 150..=175, invalidation from 160:
// the whole range is deleted.
func TestE3_OverlapDeletesWholeRange(t *testing.T) {
	c := newCDC()
	m := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, m, c, D(R(140, 149, 0)), W(R(140, 149, 0)), step{ranges: []BlockRange{R(150, 175, 0)}, rows: 4}, W(R(150, 175, 0)))
	evs, err := m.Apply([]BlockRange{withPrev(R(160, 180, 1), H("eth", 0, 159))}, false, 1)
	require.ErrorIs(t, err, ErrReconnect)
	c.handle(evs, nil)
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 160, End: 180}}, evs[0].Invalidations)
	assert.Len(t, c.rows(), 1, "only the row of 140..=149 remains")
}

// TestE4_NetworkIsolation: each network is its own stream (streaming
// queries have one network); a reorg on eth leaves polygon untouched. In a
// multi-network batch only the reorged network is invalidated (see C11).
func TestE4_NetworkIsolation(t *testing.T) {
	eth, pol := newCDC(), newCDC()
	me := newMachine(t, DefaultRetention, Snapshot{})
	mp := newMachine(t, DefaultRetention, Snapshot{})
	runCDC(t, me, eth, D(R(99, 99, 0)), W(R(99, 99, 0)), D(R(100, 100, 0)), W(R(100, 100, 0)))
	runCDC(t, mp, pol, D(Rn("polygon", 99, 99, 0)), W(Rn("polygon", 99, 99, 0)), D(Rn("polygon", 100, 100, 0)), W(Rn("polygon", 100, 100, 0)))
	runCDC(t, me, eth, D(R(100, 100, 1)))
	assert.Len(t, eth.rows(), 2, "eth 99 and the replacement 100")
	assert.Contains(t, eth.rows(), "eth 100..=100 ("+H("eth", 1, 100).String()+")/0")
	assert.Len(t, pol.rows(), 2)
	assert.Contains(t, pol.rows(), "polygon 100..=100 ("+H("polygon", 0, 100).String()+")/0")
}

// TestE5_BatchIDStableAcrossReplay: the rows of a microbatch replayed after
// a rollback carry the same batch id (consumers can de-duplicate); the
// replacement of a reorged range carries another.
func TestE5_BatchIDStableAcrossReplay(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	first, err := m.Apply([]BlockRange{R(11, 20, 0)}, false, 1)
	require.NoError(t, err)
	m.Rollback()
	again, err := m.Apply([]BlockRange{R(11, 20, 0)}, false, 1)
	require.NoError(t, err)
	assert.Equal(t, first[0].BatchID, again[0].BatchID)
	assert.Equal(t, BatchID([]BlockRange{R(11, 20, 0)}), again[0].BatchID)
	reorged, err := m.Apply([]BlockRange{R(11, 20, 1)}, false, 1)
	require.NoError(t, err)
	require.Equal(t, KindData, reorged[1].Kind)
	assert.NotEqual(t, first[0].BatchID, reorged[1].BatchID)
}
