package reorg

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHandoverResumesAtFirstUnpublishedBlock: after a backfill of blocks
// before 100, the snapshot's cursor is (100, zero hash), which Amp does not
// know and so restarts at block 100 itself; the first range must start
// there, and from the first watermark on the stream is an ordinary one.
func TestHandoverResumesAtFirstUnpublishedBlock(t *testing.T) {
	snap := NewHandover(map[string]uint64{"eth": 100})
	require.NoError(t, snap.Validate())
	assert.Equal(t, Cursor{"eth": {Number: 100}}, snap.Cursor())
	assert.True(t, snap.Incomplete)

	m := newMachine(t, DefaultRetention, snap)
	evs := feed(t, m, D(R(100, 104, 0)), W(R(100, 104, 0)), D(R(105, 107, 0)), W(R(105, 107, 0)))
	assert.Equal(t, "D#0 W#1 D#2 W#3", brief(evs))
	assert.Equal(t, Cursor{"eth": {Number: 107, Hash: H("eth", 0, 107)}}, m.Snapshot().Cursor())

	// A reorg inside the live part is undone as usual.
	evs, err := m.Apply([]BlockRange{withPrev(R(105, 108, 1), H("eth", 0, 104))}, false, 1)
	require.NoError(t, err)
	assert.Equal(t, "U#4:reorg:2..=3 D#5", brief(evs)) // undoes events 2..=3
	assert.Equal(t, []Invalidation{{Network: "eth", Start: 105, End: 108}}, evs[0].Invalidations)
	// One reaching into the backfilled blocks cannot be: they are not
	// retained. (See TestHandoverReorgInFirstLiveBatch for one after the
	// hand-over block.)
	m = newMachine(t, DefaultRetention, snap)
	feed(t, m, D(R(100, 104, 0)), W(R(100, 104, 0)))
	_, err = m.Apply([]BlockRange{withPrev(R(99, 104, 1), H("eth", 0, 98))}, false, 1)
	require.ErrorIs(t, err, ErrUnrecoverable)
}

func TestHandoverMismatch(t *testing.T) {
	snap := NewHandover(map[string]uint64{"eth": 100})
	for name, tc := range map[string]struct {
		ranges []BlockRange
		want   string
	}{
		"starts after the backfill's end (gap)": {[]BlockRange{R(101, 104, 0)}, "is 101..=104, but the backfill published every block before 100"},
		"starts before it (published twice)":    {[]BlockRange{R(99, 104, 0)}, "must start at 100"},
		"another network":                       {[]BlockRange{Rn("base", 100, 104, 0)}, "has networks [base] but the backfill covered [eth]"},
		"an extra network":                      {[]BlockRange{R(100, 104, 0), Rn("base", 7, 9, 0)}, "has networks [eth base]"},
	} {
		t.Run(name, func(t *testing.T) {
			m := newMachine(t, DefaultRetention, snap)
			evs, err := m.Apply(tc.ranges, false, 1)
			require.ErrorIs(t, err, ErrInvalidRanges)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			assert.Equal(t, HandoverMismatch, ve.Kind)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, evs)
			assert.Empty(t, m.Previous(), "state unchanged")
		})
	}
	// Empty ranges (no synced table) say nothing about the position.
	m := newMachine(t, DefaultRetention, snap)
	_, err := m.Apply(nil, false, 0)
	require.NoError(t, err)
	_, err = m.Apply([]BlockRange{R(100, 100, 0)}, true, 0)
	require.NoError(t, err)
}

func TestHandoverRollbackChecksAgain(t *testing.T) {
	m := newMachine(t, DefaultRetention, NewHandover(map[string]uint64{"eth": 100}))
	_, err := m.Apply([]BlockRange{R(100, 103, 0)}, false, 2)
	require.NoError(t, err)
	m.Rollback() // nothing committed: back to the hand-over
	assert.Equal(t, Cursor{"eth": {Number: 100}}, m.Snapshot().Cursor())
	_, err = m.Apply([]BlockRange{R(104, 105, 0)}, false, 1)
	require.ErrorIs(t, err, ErrInvalidRanges)
}

func TestHandoverSnapshotValidate(t *testing.T) {
	bad := NewHandover(map[string]uint64{"eth": 100})
	bad.Handover["eth"] = Point{Number: 100, Hash: H("eth", 0, 100)}
	assert.ErrorContains(t, bad.Validate(), "must be zero")
	notIncomplete := NewHandover(map[string]uint64{"eth": 100})
	notIncomplete.Incomplete = false
	assert.ErrorContains(t, notIncomplete.Validate(), "not marked incomplete")
	empty := NewHandover(map[string]uint64{"": 3})
	assert.ErrorContains(t, empty.Validate(), "empty network id")
	_, err := New(DefaultConfig(), bad)
	require.Error(t, err)
}

func TestHandoverSnapshotWireForm(t *testing.T) {
	snap := NewHandover(map[string]uint64{"eth": 100})
	b, err := json.Marshal(snap)
	require.NoError(t, err)
	assert.Equal(t, `{"next":0,"watermarks":[],"incomplete":true,"handover":{"eth":{"number":100,`+
		`"hash":"0x0000000000000000000000000000000000000000000000000000000000000000"}}}`, string(b))
	var back Snapshot
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, snap, back)
	// The cursor is a copy: changing it does not change the snapshot.
	c := back.Cursor()
	c["eth"] = Point{Number: 1}
	assert.Equal(t, uint64(100), back.Handover["eth"].Number)
}

// TestHandoverReorgInFirstLiveBatch: a fork inside the first live
// microbatch after a hand-over (no watermark ends before it) is undone back
// to the hand-over: everything retained is retracted and the stream resumes
// at the hand-over block.
func TestHandoverReorgInFirstLiveBatch(t *testing.T) {
	snap := NewHandover(map[string]uint64{"eth": 100})
	m := newMachine(t, DefaultRetention, snap)
	feed(t, m, D(R(100, 110, 0)), W(R(100, 110, 0)))
	evs, err := m.Apply([]BlockRange{withPrev(R(108, 111, 1), H("eth", 0, 107))}, false, 1)
	require.ErrorIs(t, err, ErrReconnect)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc)
	assert.Equal(t, Cursor{"eth": {Number: 100}}, rc.Cursor, "resume at the hand-over block")
	require.Equal(t, "U#2:reorg:0..=1", brief(evs))
	assert.Equal(t, []Watermark{{Seq: 1, Ranges: []BlockRange{R(100, 110, 0)}}}, evs[0].Retract)
	require.NoError(t, m.Commit(2))
	assert.Equal(t, Cursor{"eth": {Number: 100}}, m.Snapshot().Cursor())
	// The server restarts at 100 on the new fork.
	r := withPrev(R(100, 111, 1), H("eth", 0, 99))
	evs = feed(t, m, D(r), W(r))
	assert.Equal(t, "D#3 W#4", brief(evs))

	// The same fork, when the server itself sends the new fork from the
	// hand-over block: no reconnect.
	m = newMachine(t, DefaultRetention, snap)
	feed(t, m, D(R(100, 110, 0)), W(R(100, 110, 0)))
	evs, err = m.Apply([]BlockRange{r}, false, 1)
	require.NoError(t, err)
	assert.Equal(t, "U#2:reorg:0..=1 D#3", brief(evs))

	// Once retention has pruned the first live watermark, a fork before the
	// oldest retained one is unrecoverable.
	m = newMachine(t, 5, snap)
	feed(t, m, W(R(100, 103, 0)), W(R(104, 107, 0)), W(R(108, 112, 0)), W(R(113, 120, 0)))
	oldest := m.Retained()[0].Ranges[0]
	require.Greater(t, oldest.Start, uint64(100), "pruned")
	_, err = m.Apply([]BlockRange{withPrev(R(oldest.Start+1, 121, 1), H("eth", 0, oldest.Start))}, false, 1)
	require.ErrorIs(t, err, ErrUnrecoverable)
}

// TestStartReorgBelowStartBlock: a stream that started at block 100
// (streams[].start) published nothing before it, so a reorg whose fork
// point is below 100 is not unrecoverable, as it is after a backfill: every
// retained batch is undone and the stream reconnects at block 100, where
// Amp restarts on its new chain.
func TestStartReorgBelowStartBlock(t *testing.T) {
	snap := NewStart(map[string]uint64{"eth": 100})
	require.NoError(t, snap.Validate())
	assert.Equal(t, Cursor{"eth": {Number: 100}}, snap.Cursor())
	m := newMachine(t, DefaultRetention, snap)
	feed(t, m, D(R(100, 104, 0)), W(R(100, 104, 0)), D(R(105, 107, 0)), W(R(105, 107, 0)))
	evs, err := m.Apply([]BlockRange{withPrev(R(99, 108, 1), H("eth", 0, 98))}, false, 1)
	require.ErrorIs(t, err, ErrReconnect)
	var rc *ReconnectError
	require.ErrorAs(t, err, &rc)
	assert.Equal(t, Cursor{"eth": {Number: 100}}, rc.Cursor, "reconnect at the start block")
	require.Equal(t, "U#4:reorg:0..=3", brief(evs))
	assert.Len(t, evs[0].Retract, 2, "both published batches are retracted")
	require.NoError(t, m.Commit(4))
	assert.True(t, m.Snapshot().Start, "the snapshot stays a start")
	r := withPrev(R(100, 108, 1), H("eth", 1, 99))
	assert.Equal(t, "D#5 W#6", brief(feed(t, m, D(r), W(r))))

	// The same fork after a backfill's hand-over stops the stream.
	m = newMachine(t, DefaultRetention, NewHandover(map[string]uint64{"eth": 100}))
	feed(t, m, D(R(100, 104, 0)), W(R(100, 104, 0)))
	_, err = m.Apply([]BlockRange{withPrev(R(99, 104, 1), H("eth", 0, 98))}, false, 1)
	require.ErrorIs(t, err, ErrUnrecoverable)

	noCursor := Snapshot{Start: true}
	assert.ErrorContains(t, noCursor.Validate(), "no hand-over cursor")
}
