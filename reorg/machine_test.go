package reorg

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		errContains string
	}{
		{"default", DefaultConfig(), ""},
		{"zero keeps only the newest watermark", Config{}, ""},
		{"maximum", Config{Retention: MaxRetention}, ""},
		{"above maximum", Config{Retention: MaxRetention + 1}, "retention 1000001 blocks is above the maximum 1000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.errContains == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.errContains)
			_, err = New(tt.cfg, Snapshot{})
			require.ErrorContains(t, err, tt.errContains)
		})
	}
	assert.Equal(t, uint64(128), DefaultConfig().Retention)
}

func TestNewRejectsCorruptSnapshot(t *testing.T) {
	tests := []struct {
		name        string
		snap        Snapshot
		errContains string
	}{
		{"seq not below next", Snapshot{Next: 1, Watermarks: []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 1, 0)}}}}, "not below next 1"},
		{"seq order", Snapshot{Next: 9, Watermarks: []Watermark{{Seq: 3, Ranges: []BlockRange{R(0, 1, 0)}}, {Seq: 2, Ranges: []BlockRange{R(2, 3, 0)}}}}, "seq 2 follows seq 3"},
		{"no ranges", Snapshot{Next: 9, Watermarks: []Watermark{{Seq: 3}}}, "has no ranges"},
		{"bad range", Snapshot{Next: 9, Watermarks: []Watermark{{Seq: 3, Ranges: []BlockRange{{Network: "eth", Start: 5, End: 4}}}}}, "start 5 is after end 4"},
		{"networks differ", Snapshot{Next: 9, Watermarks: []Watermark{{Seq: 3, Ranges: []BlockRange{R(0, 1, 0)}}, {Seq: 4, Ranges: []BlockRange{Rn("pol", 2, 3, 0)}}}}, `network "pol"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(DefaultConfig(), tt.snap)
			require.ErrorContains(t, err, tt.errContains)
		})
	}
}

func TestC1_DataThenWatermark(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	require.Equal(t, "D#0 W#1", brief(evs))
	assert.Equal(t, BatchID([]BlockRange{R(0, 10, 0)}), evs[0].BatchID)
	assert.Equal(t, evs[0].BatchID, evs[1].BatchID)
	assert.Equal(t, 1, evs[0].Rows)
	assert.Equal(t, Snapshot{Next: 2, Watermarks: []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 10, 0)}}}}, m.Snapshot())
}

func TestC2_SeveralDataThenWatermark(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), D(R(11, 20, 0)), D(R(21, 30, 0)), W(R(21, 30, 0)))
	assert.Equal(t, "D#0 D#1 D#2 W#3", brief(evs))
}

// TestC3_Retention10Prunes differs from the Rust client on purpose: with
// the cutoff at 21−10 = 11, W#1 (0..=5) and W#3 (6..=10) both end before
// it, and Rust prunes both (prune = 3), so a fork at block 11, within
// retention, would be unrecoverable. Go keeps W#3, the recovery point of
// such a fork (prune = 1).
func TestC3_Retention10Prunes(t *testing.T) {
	m := newMachine(t, 10, Snapshot{})
	evs := feed(t, m, D(R(0, 5, 0)), W(R(0, 5, 0)), D(R(6, 10, 0)), W(R(6, 10, 0)),
		D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 25, 0)), W(R(21, 25, 0)))
	assert.Equal(t, "D#0 W#1 D#2 W#3 D#4 W#5 D#6 W#7/p1", brief(evs))
	snap := m.Snapshot()
	assert.True(t, snap.Incomplete)
	require.Len(t, snap.Watermarks, 3)
	assert.Equal(t, uint64(3), snap.Watermarks[0].Seq)
	evs, err := m.Apply([]BlockRange{R(11, 12, 1)}, false, 1)
	require.NoError(t, err, "a fork at the cutoff is within retention")
	assert.Equal(t, "U#8:reorg:4..=7 D#9", brief(evs))
}

// TestRetentionKeepsTheRecoveryPointOfALongMicrobatch is the shape CI met
// after an outage of about the retention: one catch-up microbatch 82..=208
// (127 blocks under a retention of 128), a few one-block microbatches, then
// a reorg of 208..=211. The fork is 4 blocks deep, but its recovery point is
// the watermark before the long microbatch (…=81), which ends more than 128
// blocks before the newest start: the Rust rule prunes it and the reorg is
// unrecoverable; Go keeps it.
func TestRetentionKeepsTheRecoveryPointOfALongMicrobatch(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	var msgs []step
	for b := uint64(0); b <= 81; b++ {
		msgs = append(msgs, D(R(b, b, 0)), W(R(b, b, 0)))
	}
	msgs = append(msgs, D(R(82, 208, 0)), W(R(82, 208, 0)))
	for b := uint64(209); b <= 215; b++ {
		msgs = append(msgs, D(R(b, b, 0)), W(R(b, b, 0)))
	}
	feed(t, m, msgs...)
	snap := m.Snapshot()
	require.True(t, snap.Incomplete, "retention pruned the oldest watermarks")
	require.Equal(t, uint64(81), snap.Watermarks[0].Ranges[0].End, "the watermark before the long microbatch stays")
	evs, err := m.Apply([]BlockRange{R(208, 211, 1)}, false, 1)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc, "the fork is inside the long microbatch: undo it and reconnect before it")
	require.NotEmpty(t, evs)
	assert.Equal(t, KindUndo, evs[0].Kind)
	assert.Equal(t, uint64(81), rc.Cursor["eth"].Number)
}

func TestC4_Retention20NoPrune(t *testing.T) {
	m := newMachine(t, 20, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 15, 0)), W(R(11, 15, 0)))
	assert.Equal(t, "D#0 W#1 D#2 W#3", brief(evs))
	assert.False(t, m.Snapshot().Incomplete)
}

func TestC5_Retention5(t *testing.T) {
	m := newMachine(t, 5, Snapshot{})
	evs := feed(t, m, D(R(0, 5, 0)), W(R(0, 5, 0)), D(R(6, 10, 0)), W(R(6, 10, 0)), D(R(11, 15, 0)), W(R(11, 15, 0)))
	// Rust prunes W#1 here (prune = 1): the cutoff is 11−5 = 6 and W#1 ends
	// at 5. Go keeps it, the recovery point of a fork at block 6.
	assert.Equal(t, "D#0 W#1 D#2 W#3 D#4 W#5", brief(evs))
	evs = feed(t, m, D(R(16, 20, 0)), W(R(16, 20, 0)))
	assert.Equal(t, "D#6 W#7/p1", brief(evs), "once W#3 is beyond retention too, W#1 goes")
}

func TestC6_MultiNetwork(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	second := []BlockRange{R(11, 20, 0), Rn("polygon", 6, 15, 0)}
	evs := feed(t, m, D(R(0, 10, 0), Rn("polygon", 0, 5, 0)), D(second...), W(second...))
	require.Equal(t, "D#0 D#1 W#2", brief(evs))
	assert.Equal(t, BatchID(second[:1])+"|"+BatchID(second[1:]), evs[2].BatchID)
	c, err := m.Snapshot().Cursor().Header()
	require.NoError(t, err)
	assert.Contains(t, c, `"polygon":{"number":15`)
}

func TestC7_ConsecutiveWatermarks(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, W(R(0, 10, 0)), W(R(11, 20, 0)), W(R(21, 30, 0)))
	assert.Equal(t, "W#0 W#1 W#2", brief(evs))
}

func TestC8_Reorg(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 15, 0)), W(R(11, 12, 1)))
	require.Equal(t, "D#0 W#1 D#2 U#3:reorg:2..=2 W#4", brief(evs))
	u := evs[3]
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 11, End: 15}}, u.Invalidations)
	assert.Empty(t, u.Retract, "Data#2 is not a watermark")
	assert.False(t, u.Abort, "everything up to #2 was committed")
}

func TestC9_DeepReorg(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), D(R(21, 30, 0)), D(R(31, 40, 0)), W(R(11, 20, 1)))
	assert.Equal(t, "D#0 W#1 D#2 D#3 D#4 U#5:reorg:2..=4 W#6", brief(evs))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 11, End: 40}}, evs[5].Invalidations)
}

func TestC10_UnaffectedBatchesKept(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 30, 0)), W(R(21, 25, 1)))
	assert.Equal(t, "D#0 W#1 D#2 W#3 D#4 U#5:reorg:4..=4 W#6", brief(evs))
	assert.Equal(t, []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 10, 0)}}, {Seq: 3, Ranges: []BlockRange{R(11, 20, 0)}},
		{Seq: 6, Ranges: []BlockRange{R(21, 25, 1)}}}, m.Snapshot().Watermarks)
}

func TestC11_MultiNetworkPartialReorg(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	reorged := []BlockRange{R(11, 15, 1), Rn("pol", 11, 20, 0)}
	evs := feed(t, m, D(R(0, 10, 0), Rn("pol", 0, 10, 0)), W(R(0, 10, 0), Rn("pol", 0, 10, 0)),
		D(R(11, 20, 0), Rn("pol", 11, 20, 0)), D(reorged...), W(reorged...))
	require.Equal(t, "D#0 W#1 D#2 U#3:reorg:2..=2 D#4 W#5", brief(evs))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 11, End: 20}}, evs[3].Invalidations, "polygon is not invalidated")
}

func TestC12_ConsecutiveReorgs(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 30, 0)),
		W(R(21, 25, 1)), D(R(26, 30, 1)), W(R(21, 30, 2)))
	assert.Equal(t, "D#0 W#1 D#2 W#3 D#4 U#5:reorg:4..=4 W#6 D#7 U#8:reorg:4..=7 W#9", brief(evs))
	assert.Equal(t, []Watermark{{Seq: 6, Ranges: []BlockRange{R(21, 25, 1)}}}, evs[8].Retract,
		"the committed W#6 is retracted")
}

// TestC13_BackwardJumpBeyondOldEnd: the Rust client emits Undo#3 then W#4
// and silently loses blocks 11..=14 of the undone Data#2. Go invalidates the
// same events but, since the incoming range does not start right after the
// recovery watermark (block 10), drops it and asks for a reconnect from W#1
// so blocks 11.. are re-sent.
func TestC13_BackwardJumpBeyondOldEnd(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)))
	evs, err := m.Apply([]BlockRange{R(15, 25, 1)}, true, 0)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc)
	require.Equal(t, "U#3:reorg:2..=2", brief(evs))
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 15, End: 25}}, evs[0].Invalidations)
	assert.Equal(t, Cursor{"eth": {Number: 10, Hash: H("eth", 0, 10)}}, rc.Cursor)
	require.NoError(t, m.Commit(3))
	replay := withPrev(R(11, 25, 1), H("eth", 0, 10))
	evs = feed(t, m, D(replay), W(replay))
	assert.Equal(t, "D#4 W#5", brief(evs))
}

func TestC14_CrashAfterDataBeforeCommit(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	_, err := m.Apply([]BlockRange{R(11, 20, 0)}, false, 1)
	require.NoError(t, err)

	t.Run("next persisted per event (Rust)", func(t *testing.T) {
		snap := m.Snapshot()
		snap.Next = m.Next()
		h, err := snap.Cursor().Header()
		require.NoError(t, err)
		assert.Equal(t, `{"eth":{"number":10,"hash":"`+H("eth", 0, 10).String()+`"}}`, h)
		m2 := newMachine(t, DefaultRetention, snap)
		assert.Equal(t, []BlockRange{R(0, 10, 0)}, m2.Previous())
		evs := feed(t, m2, D(R(11, 20, 0)))
		require.Equal(t, "U#3:rewind:2..=2 D#4", brief(evs))
		assert.Empty(t, evs[0].Retract)
		assert.False(t, evs[0].Abort, "rewound events were never visible")
	})
	t.Run("next persisted at commit (bridge)", func(t *testing.T) {
		m2 := newMachine(t, DefaultRetention, m.Snapshot())
		evs := feed(t, m2, D(R(11, 20, 0)))
		assert.Equal(t, "D#2", brief(evs), "the uncommitted Data#2 was invisible; its seq is reused")
	})
}

func TestC15_SeveralUncommitted(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	for _, s := range []step{D(R(11, 20, 0)), D(R(21, 30, 0)), W(R(21, 30, 0))} {
		_, err := m.Apply(s.ranges, s.complete, s.rows)
		require.NoError(t, err)
	}
	snap := m.Snapshot()
	snap.Next = m.Next()
	m2 := newMachine(t, DefaultRetention, snap)
	assert.Equal(t, "U#5:rewind:2..=4", brief(m2.Start()))
	assert.Empty(t, m2.Start(), "Start emits the rewind once")
}

func TestC16_CleanRestart(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	snap := m.Snapshot()
	snap.Next = m.Next()
	m2 := newMachine(t, DefaultRetention, snap)
	assert.Equal(t, "D#2", brief(feed(t, m2, D(R(11, 20, 0)))))
}

func TestC17_CrashBeforeAnyWatermark(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	_, err := m.Apply([]BlockRange{R(0, 10, 0)}, false, 1)
	require.NoError(t, err)
	snap := m.Snapshot()
	snap.Next = m.Next()
	assert.Nil(t, snap.Cursor(), "no watermark: start from the earliest block")
	m2 := newMachine(t, DefaultRetention, snap)
	assert.Equal(t, "U#1:rewind:0..=0 D#2", brief(feed(t, m2, D(R(0, 10, 0)))))
}

func TestC18_RewindThenContinue(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	_, err := m.Apply([]BlockRange{R(11, 20, 0)}, false, 1)
	require.NoError(t, err)
	snap := m.Snapshot()
	snap.Next = m.Next()
	m2 := newMachine(t, DefaultRetention, snap)
	evs := feed(t, m2, D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 30, 0)))
	assert.Equal(t, "U#3:rewind:2..=2 D#4 W#5 D#6", brief(evs))
}

func TestC19_Unrecoverable(t *testing.T) {
	m := newMachine(t, 0, Snapshot{})
	// Retention 0 keeps the newest watermark and the one before it (the
	// recovery point of a fork at the newest's start).
	evs := feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 30, 0)), W(R(21, 30, 0)))
	require.Equal(t, "D#0 W#1 D#2 W#3 D#4 W#5/p1", brief(evs))
	before := m.Snapshot()
	evs, err := m.Apply([]BlockRange{R(11, 15, 1)}, false, 1)
	require.ErrorIs(t, err, ErrUnrecoverable)
	assert.Empty(t, evs)
	var ue *UnrecoverableError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, uint64(3), ue.Oldest.Seq)
	for _, s := range []string{"eth 11..=20", "seq 3", "retention of 0 blocks", "bridge rewind --stream S --to-block N",
		"before block 11", "new stream id"} {
		assert.Contains(t, err.Error(), s)
	}
	assert.Equal(t, before, m.Snapshot(), "state unchanged")
	assert.Equal(t, []BlockRange{R(21, 30, 0)}, m.Previous())
}

// TestC20_PartialReorgRecovered is the real server's shape of A15: the fork
// (block 2) lies inside the committed microbatch 1..=2. Rust fails with
// Partial, for good; Go undoes back to W#1 and asks for a reconnect with
// its cursor, after which the server's 1..=3 validates as consecutive.
func TestC20_PartialReorgRecovered(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 0, 0)), W(R(0, 0, 0)), D(R(1, 2, 0)), W(R(1, 2, 0)))
	in := withPrev(R(2, 3, 1), H("eth", 0, 1))
	evs, err := m.Apply([]BlockRange{in}, false, 1)
	require.ErrorIs(t, err, ErrReconnect)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc)
	require.Equal(t, "U#4:reorg:2..=3", brief(evs))
	u := evs[0]
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 2, End: 3}}, u.Invalidations)
	assert.Equal(t, []Watermark{{Seq: 3, Ranges: []BlockRange{R(1, 2, 0)}}}, u.Retract)
	assert.False(t, u.Abort)
	assert.Equal(t, Cursor{"eth": {Number: 0, Hash: H("eth", 0, 0)}}, rc.Cursor)
	assert.Equal(t, uint64(1), rc.Seq)
	assert.Contains(t, err.Error(), `reconnect with cursor {"eth":{"number":0`)
	assert.Equal(t, []BlockRange{R(0, 0, 0)}, m.Previous())
	require.NoError(t, m.Commit(4))
	assert.Equal(t, []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 0, 0)}}}, m.Snapshot().Watermarks, "truncated at commit")

	replay := withPrev(R(1, 3, 1), H("eth", 0, 0))
	evs = feed(t, m, D(replay), W(replay))
	assert.Equal(t, "D#5 W#6", brief(evs))
	assert.Equal(t, Cursor{"eth": {Number: 3, Hash: H("eth", 1, 3)}}, m.Snapshot().Cursor())
}

func TestF4_ReplayedRangeDropped(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	evs := feed(t, m, D(R(0, 10, 0)), K(R(0, 10, 0)), W(R(0, 10, 0)))
	assert.Empty(t, evs, "a range equal to the last watermark is a replay: no duplicate rows, no second watermark")
	assert.Equal(t, uint64(3), m.Replays())
	snap := m.Snapshot()
	assert.Equal(t, "D#2", brief(feed(t, m, D(R(11, 20, 0)))))

	// After a restart the last committed watermark is the one replayed.
	m2 := newMachine(t, DefaultRetention, snap)
	evs = feed(t, m2, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)))
	assert.Equal(t, "D#2", brief(evs))
	assert.Equal(t, uint64(2), m2.Replays())
}

func TestCompleteBatchWithRowsKeepsRows(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, step{ranges: []BlockRange{R(0, 10, 0)}, complete: true, rows: 3})
	require.Equal(t, "D#0 W#1", brief(evs))
	assert.Equal(t, 3, evs[0].Rows)
}

func TestEmptyRangesNeverBuffered(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	evs := feed(t, m, step{complete: true}, step{rows: 2})
	require.Equal(t, "D#0", brief(evs), "an empty-range completion emits no watermark")
	assert.Empty(t, m.Snapshot().Watermarks)
	assert.Nil(t, m.Snapshot().Cursor())
	evs = feed(t, m, D(R(0, 5, 0)))
	assert.Equal(t, "D#1", brief(evs))
	_, err := m.Apply(nil, true, 0)
	requireValidation(t, err, NetworkCountChanged)
}

func TestNegativeRows(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	_, err := m.Apply([]BlockRange{R(0, 1, 0)}, false, -1)
	require.ErrorContains(t, err, "negative row count -1")
}

func TestCommit(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	for _, s := range []step{D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), W(R(11, 20, 0))} {
		_, err := m.Apply(s.ranges, s.complete, s.rows)
		require.NoError(t, err)
	}
	require.ErrorContains(t, m.Commit(4), "committing seq 4, but only seqs below 4 were emitted")
	assert.Equal(t, Snapshot{}, m.Snapshot(), "nothing committed yet")
	require.NoError(t, m.Commit(2))
	assert.Equal(t, Snapshot{Next: 3, Watermarks: []Watermark{{Seq: 1, Ranges: []BlockRange{R(0, 10, 0)}}}}, m.Snapshot())
	require.NoError(t, m.Commit(1), "committing an older seq is a no-op")
	assert.Equal(t, uint64(3), m.Snapshot().Next)
	require.NoError(t, m.Commit(3))
	assert.Len(t, m.Snapshot().Watermarks, 2)

	b, err := json.Marshal(m.Snapshot())
	require.NoError(t, err)
	var back Snapshot
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, m.Snapshot(), back, "the snapshot round-trips through JSON")
}

// TestRollback: an aborted transaction forgets the uncommitted events; the
// machine resumes from the committed watermark.
func TestRollback(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)))
	for _, s := range []step{D(R(11, 20, 0)), W(R(11, 20, 0)), D(R(21, 30, 0))} {
		_, err := m.Apply(s.ranges, s.complete, s.rows)
		require.NoError(t, err)
	}
	assert.Len(t, m.Retained(), 2)
	m.Rollback()
	assert.Equal(t, []BlockRange{R(0, 10, 0)}, m.Previous())
	assert.Equal(t, uint64(2), m.Next())
	assert.Len(t, m.Retained(), 1)
	assert.Equal(t, Cursor{"eth": {Number: 10, Hash: H("eth", 0, 10)}}, m.Snapshot().Cursor())
	assert.Equal(t, "D#2 W#3", brief(feed(t, m, D(R(11, 20, 0)), W(R(11, 20, 0)))))
}

// TestUndoAbortAndReplay covers what the run loop needs from an Undo:
// which invalidated watermarks are committed (retract) and whether the open
// transaction must be aborted, and if so whether valid events are lost with
// it (Replay: Rollback and reconnect).
func TestUndoAbortAndReplay(t *testing.T) {
	setup := func(t *testing.T) *Machine {
		m := newMachine(t, DefaultRetention, Snapshot{})
		feed(t, m, D(R(0, 10, 0)), W(R(0, 10, 0)), D(R(11, 20, 0)), W(R(11, 20, 0))) // committed to #3
		return m
	}
	t.Run("committed only", func(t *testing.T) {
		m := setup(t)
		evs := feed(t, m, D(R(11, 15, 1)))
		require.Equal(t, "U#4:reorg:2..=3 D#5", brief(evs))
		assert.Equal(t, []Watermark{{Seq: 3, Ranges: []BlockRange{R(11, 20, 0)}}}, evs[0].Retract)
		assert.False(t, evs[0].Abort)
		assert.False(t, evs[0].Replay)
	})
	t.Run("committed and uncommitted", func(t *testing.T) {
		m := setup(t)
		_, err := m.Apply([]BlockRange{R(21, 30, 0)}, false, 1) // #4, open transaction
		require.NoError(t, err)
		evs, err := m.Apply([]BlockRange{R(11, 15, 1)}, false, 1)
		require.NoError(t, err)
		require.Equal(t, "U#5:reorg:2..=4 D#6", brief(evs))
		assert.Len(t, evs[0].Retract, 1)
		assert.True(t, evs[0].Abort)
		assert.False(t, evs[0].Replay, "every uncommitted event is invalidated")
	})
	t.Run("uncommitted valid events lost by the abort", func(t *testing.T) {
		m := setup(t)
		for _, s := range []step{D(R(21, 30, 0)), W(R(21, 30, 0)), D(R(31, 40, 0))} { // #4 #5 #6 open
			_, err := m.Apply(s.ranges, s.complete, s.rows)
			require.NoError(t, err)
		}
		evs, err := m.Apply([]BlockRange{R(31, 35, 1)}, false, 1)
		require.NoError(t, err)
		require.Equal(t, "U#7:reorg:6..=6 D#8", brief(evs))
		assert.Empty(t, evs[0].Retract)
		assert.True(t, evs[0].Abort)
		assert.True(t, evs[0].Replay, "#4 and #5 are valid but in the aborted transaction")
		m.Rollback()
		assert.Equal(t, Cursor{"eth": {Number: 20, Hash: H("eth", 0, 20)}}, m.Snapshot().Cursor())
		assert.Equal(t, uint64(4), m.Next())
	})
}

// TestReorgBelowFirstWatermarkRestartsFromEarliest: with the whole history
// retained (nothing pruned), a fork inside the first microbatch undoes
// everything and restarts from the earliest block (amp-protocol.md §8.1 A9:
// stream [0,1], then [2], then a reorg replacing 1 and 2).
func TestReorgBelowFirstWatermarkRestartsFromEarliest(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 1, 0)), W(R(0, 1, 0)), D(R(2, 2, 0)), W(R(2, 2, 0)))
	in := withPrev(R(1, 3, 1), H("eth", 0, 0))
	evs, err := m.Apply([]BlockRange{in}, false, 1)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc)
	assert.Nil(t, rc.Cursor)
	assert.Contains(t, err.Error(), "reconnect without a cursor")
	require.Equal(t, "U#4:reorg:0..=3", brief(evs))
	assert.Len(t, evs[0].Retract, 2)
	assert.Nil(t, m.Previous())
	require.NoError(t, m.Commit(4))
	assert.Empty(t, m.Snapshot().Watermarks)
	evs = feed(t, m, D(R(0, 3, 1)), W(R(0, 3, 1)))
	assert.Equal(t, "D#5 W#6", brief(evs))
}

func TestGenesisReorgContinues(t *testing.T) {
	m := newMachine(t, DefaultRetention, Snapshot{})
	feed(t, m, D(R(0, 1, 0)), W(R(0, 1, 0)))
	evs := feed(t, m, D(R(0, 2, 1)))
	assert.Equal(t, "U#2:reorg:0..=1 D#3", brief(evs), "the reorg restarts at the stream's first block: no reconnect")
}

func TestSeededSnapshotIncomplete(t *testing.T) {
	snap := Snapshot{Next: 1, Watermarks: []Watermark{{Seq: 0, Ranges: []BlockRange{R(100, 199, 0)}}}, Incomplete: true}
	m := newMachine(t, DefaultRetention, snap)
	_, err := m.Apply([]BlockRange{withPrev(R(150, 210, 1), H("eth", 0, 149))}, false, 1)
	require.ErrorIs(t, err, ErrUnrecoverable)
	assert.Contains(t, err.Error(), "before block 150")
}

// TestSnapshotWireForm pins the JSON of the snapshot, which the checkpoint
// embeds.
func TestSnapshotWireForm(t *testing.T) {
	m := newMachine(t, 0, Snapshot{})
	feed(t, m, W(R(0, 1, 0)), W(R(2, 3, 0)), W(R(4, 5, 0)))
	b, err := json.Marshal(m.Snapshot())
	require.NoError(t, err)
	assert.Equal(t, `{"next":3,"watermarks":[{"seq":1,"ranges":[{"numbers":{"start":2,"end":3},"network":"eth",`+
		`"hash":"0x0000000000000189990000000000000000000000000000000000000000000003",`+
		`"prev_hash":"0x0000000000000189990000000000000000000000000000000000000000000001"}]},`+
		`{"seq":2,"ranges":[{"numbers":{"start":4,"end":5},"network":"eth",`+
		`"hash":"0x0000000000000189990000000000000000000000000000000000000000000005",`+
		`"prev_hash":"0x0000000000000189990000000000000000000000000000000000000000000003"}]}],"incomplete":true}`, string(b))
	var back Snapshot
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, m.Snapshot(), back)
	_, err = New(DefaultConfig(), back)
	require.NoError(t, err)
}
