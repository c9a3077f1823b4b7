package offsets

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// memLog is a ControlLog over records in memory that counts what is read:
// the fake that shows how much of the topic a reader touches.
type memLog struct {
	recs       []ControlRecord // offset order
	start, end int64
	chunk      int
	// scans counts Scan calls, records the records handed out and offsets
	// the offsets the scans covered.
	scans, records int
	offsets        int64
}

var _ ControlLog = (*memLog)(nil)

func (l *memLog) Bounds(context.Context) (ControlBounds, error) {
	return ControlBounds{Start: l.start, End: l.end}, nil
}

func (l *memLog) Scan(_ context.Context, from, until int64, fn func([]ControlRecord) error) error {
	if from < l.start {
		return fmt.Errorf("offset %d is below the log start %d: %w", from, l.start, errOutOfRange)
	}
	l.scans++
	l.offsets += until - from
	i := sort.Search(len(l.recs), func(i int) bool { return l.recs[i].Offset >= from })
	for i < len(l.recs) && l.recs[i].Offset < until {
		j := i
		for j < len(l.recs) && j-i < l.chunk && l.recs[j].Offset < until {
			j++
		}
		l.records += j - i
		if err := fn(l.recs[i:j:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

var errOutOfRange = fmt.Errorf("offset out of range")

func (l *memLog) resetCounts() { l.scans, l.records, l.offsets = 0, 0, 0 }

// truncate deletes the records below offset start (retention).
func (l *memLog) truncate(start int64) {
	i := sort.Search(len(l.recs), func(i int) bool { return l.recs[i].Offset >= start })
	l.recs, l.start = l.recs[i:], start
}

// simWriter writes control events the way the run loop does: every
// transaction takes two offsets (the event and its commit marker), a live
// watermark carries the full checkpoint every fullEvery-th commit and
// otherwise its state with the offset of the newest full copy.
type simWriter struct {
	tb        testing.TB
	codec     *ControlCodec
	log       *memLog
	fullEvery int
	retain    int
	streams   map[string]*simStream
}

type simStream struct {
	next      uint64
	block     uint64
	batches   []Batch // retained, oldest first
	lastFull  int64
	sinceFull int
	// want is the state after the newest live watermark.
	want *ControlState
}

func newSimWriter(tb testing.TB, fullEvery int) *simWriter {
	codec, err := NewControlCodec()
	require.NoError(tb, err)
	return &simWriter{tb: tb, codec: codec, log: &memLog{chunk: 64}, fullEvery: fullEvery, retain: 8, streams: map[string]*simStream{}}
}

func (w *simWriter) stream(id string) *simStream {
	s, ok := w.streams[id]
	if !ok {
		s = &simStream{next: 1, block: 100, lastFull: -1}
		w.streams[id] = s
	}
	return s
}

// append writes one record in its own transaction and returns its offset.
func (w *simWriter) append(key string, value []byte) int64 {
	off := w.log.end
	w.log.recs = append(w.log.recs, ControlRecord{Offset: off, Key: []byte(key), Value: value})
	w.log.end += 2 // the record and the transaction's commit marker
	return off
}

// commit writes the stream's next live watermark, of one batch of one
// block.
func (w *simWriter) commit(id string) int64 {
	s := w.stream(id)
	rs := []reorg.BlockRange{rng("mainnet", s.block, s.block)}
	s.block++
	b := Batch{Seq: s.next, ID: reorg.BatchID(rs), Ranges: rs, Spans: []Span{{Topic: "amp." + id, First: int64(s.next) * 10, Last: int64(s.next)*10 + 9}}}
	s.next++
	s.batches = append(s.batches, b)
	if len(s.batches) > w.retain {
		s.batches = slices.Clone(s.batches[len(s.batches)-w.retain:])
	}
	snap := reorg.Snapshot{Next: s.next, Watermarks: []reorg.Watermark{}}
	for _, rb := range s.batches {
		snap.Watermarks = append(snap.Watermarks, reorg.Watermark{Seq: rb.Seq, Ranges: rb.Ranges})
	}
	cp := Checkpoint{Stream: id, Version: b.Seq, Fingerprint: "fp", CommittedAt: time.Unix(0, 0).UTC(),
		ControlOffset: w.log.end, Snapshot: snap, Batches: slices.Clone(s.batches)}
	state := &StreamState{Next: snap.Next, BaseOffset: s.lastFull}
	for _, rb := range s.batches {
		state.Retained = append(state.Retained, rb.Seq)
	}
	wm := Watermark{Stream: id, Sequence: b.Seq, Cursor: snap.Cursor(), State: state,
		Batches: []CommittedBatch{{BatchID: b.ID, Sequence: b.Seq, Ranges: b.Ranges, Rows: 1, Spans: b.Spans}}, Rows: 1}
	full := s.lastFull < 0 || s.sinceFull+1 >= w.fullEvery
	if full {
		enc, err := Marshal(cp)
		require.NoError(w.tb, err)
		wm.Checkpoint, state.BaseOffset = enc, -1
	}
	v, err := w.codec.AppendWatermark(nil, wm)
	require.NoError(w.tb, err)
	off := w.append(id, v)
	if full {
		s.lastFull, s.sinceFull = off, 0
	} else {
		s.sinceFull++
	}
	s.want = &ControlState{Offset: off, Fingerprint: "fp", Snapshot: snap, Batches: slices.Clone(s.batches)}
	return off
}

// undo writes an undo event of the stream (one that retracted nothing the
// live state depends on: the state stays the newest watermark's).
func (w *simWriter) undo(id string) int64 {
	v, err := w.codec.AppendUndo(nil, Undo{Stream: id, Sequence: w.stream(id).next, Cause: "reorg", BatchIDs: []string{"gone"}})
	require.NoError(w.tb, err)
	return w.append(id, v)
}

// backfill writes a backfill watermark of the stream.
func (w *simWriter) backfill(id string, from uint64) int64 {
	rs := []reorg.BlockRange{rng("mainnet", from, from)}
	v, err := w.codec.AppendWatermark(nil, Watermark{Stream: id, Cursor: reorg.Cursor{}, Backfill: &BackfillPartition{From: from, To: from + 1},
		Batches: []CommittedBatch{{BatchID: reorg.BatchID(rs), Ranges: rs}}})
	require.NoError(w.tb, err)
	return w.append(id, v)
}

// interleaved commits rounds times on each of streams, in turn.
func (w *simWriter) interleaved(rounds int, streams ...string) {
	for range rounds {
		for _, s := range streams {
			w.commit(s)
		}
	}
}

func (w *simWriter) control() *Control { return NewControl(w.log, w.codec, "ctl") }

// requireState checks NewestState's result against the writer's state.
func requireState(t *testing.T, want, got *ControlState) {
	t.Helper()
	require.NotNil(t, got)
	assert.Equal(t, want.Offset, got.Offset)
	assert.Equal(t, want.Fingerprint, got.Fingerprint)
	assert.Equal(t, want.Snapshot.Next, got.Snapshot.Next)
	assert.Equal(t, want.Snapshot.Watermarks, got.Snapshot.Watermarks)
	assert.Equal(t, want.Batches, got.Batches)
}

// TestNewestStateReadsAreBoundedByHistory: the Redis-less recovery reads
// the same few records whether the control topic holds 300 or 30,012
// events: it fails if NewestState scans from offset 0.
func TestNewestStateReadsAreBoundedByHistory(t *testing.T) {
	const fullEvery = 16
	var read []int
	for _, rounds := range []int{100, 10004} { // the same phase of the full-copy cycle
		w := newSimWriter(t, fullEvery)
		w.interleaved(rounds, "a", "b", "c")
		ctl := w.control()
		for _, s := range []string{"a", "b", "c"} {
			w.log.resetCounts()
			got, err := ctl.NewestState(t.Context(), s, NoOffset)
			require.NoError(t, err)
			requireState(t, w.streams[s].want, got)
			// One window back from the end, then the base's segment: at
			// most fullEvery rounds of three streams.
			assert.LessOrEqual(t, w.log.records, int(DefaultSearchWindow)/2+3*fullEvery+3, "stream %s, %d rounds", s, rounds)
			assert.LessOrEqual(t, w.log.scans, 2)
			read = append(read, w.log.records)
		}
	}
	assert.Equal(t, read[:3], read[3:], "the records read do not depend on the history's length")
}

// TestNewestStateSearchesBack: the stream's newest live watermark is found
// behind the other streams' events, its own undos and backfill watermarks,
// with its base offset far before the window the search found it in.
func TestNewestStateSearchesBack(t *testing.T) {
	w := newSimWriter(t, 64)
	w.interleaved(40, "a", "b")
	w.commit("a")
	wantA := w.streams["a"].want
	require.NotEqual(t, int64(-1), w.streams["a"].lastFull)
	// Then a's own events that carry no live state, and 3,000 of b's.
	w.undo("a")
	w.backfill("a", 7)
	w.undo("a")
	w.interleaved(3000, "b")
	w.undo("a")

	ctl := w.control()
	ctl.SetSearchWindow(4)
	got, err := ctl.NewestState(t.Context(), "a", NoOffset)
	require.NoError(t, err)
	requireState(t, wantA, got)
	assert.Equal(t, wantA.Offset, got.Offset)
	// Doubling windows: about log2(6000/4) of them, plus the base read.
	assert.LessOrEqual(t, w.log.scans, 13)

	// b's state too, whose base offset lies before the first window.
	w.log.resetCounts()
	got, err = ctl.NewestState(t.Context(), "b", NoOffset)
	require.NoError(t, err)
	requireState(t, w.streams["b"].want, got)
	assert.Equal(t, 2, w.log.scans, "the first window, then from the base offset")

	// A stream with only backfill watermarks and undos has no live state.
	w.backfill("c", 1)
	w.undo("c")
	got, err = ctl.NewestState(t.Context(), "c", NoOffset)
	require.NoError(t, err)
	assert.Nil(t, got)
	got, err = ctl.NewestState(t.Context(), "nobody", NoOffset)
	require.NoError(t, err)
	assert.Nil(t, got)
}

// TestNewestStateFromStoredOffset: with a stored checkpoint the search
// stops at its offset: nothing newer is nil (Reconcile decides), a newer
// watermark whose base is older than the offset is still rebuilt.
func TestNewestStateFromStoredOffset(t *testing.T) {
	w := newSimWriter(t, 8)
	w.interleaved(20, "a", "b")
	stored := w.commit("a")
	w.interleaved(3, "b")
	ctl := w.control()

	got, err := ctl.NewestState(t.Context(), "a", stored)
	require.NoError(t, err)
	requireState(t, w.streams["a"].want, got)
	got, err = ctl.NewestState(t.Context(), "a", stored+1)
	require.NoError(t, err)
	assert.Nil(t, got, "nothing of a at or after the stored offset")

	w.commit("a")
	w.commit("a")
	w.log.resetCounts()
	got, err = ctl.NewestState(t.Context(), "a", stored+1)
	require.NoError(t, err)
	requireState(t, w.streams["a"].want, got)
	assert.Less(t, got.Snapshot.Watermarks[0].Seq, got.Snapshot.Next)
	assert.LessOrEqual(t, w.log.scans, 2)
}

// TestNewestStateTruncated: when retention deleted the full copy the
// newest watermark refers to, recovery fails with ErrControlTruncated and
// says what to do; while the copy is retained it still works.
func TestNewestStateTruncated(t *testing.T) {
	w := newSimWriter(t, 64)
	w.interleaved(10, "a")
	base := w.streams["a"].lastFull
	w.log.truncate(base)
	ctl := w.control()
	got, err := ctl.NewestState(t.Context(), "a", NoOffset)
	require.NoError(t, err, "the copy at the log start is retained")
	requireState(t, w.streams["a"].want, got)

	w.log.truncate(base + 1)
	_, err = ctl.NewestState(t.Context(), "a", NoOffset)
	require.ErrorIs(t, err, ErrControlTruncated)
	assert.Contains(t, err.Error(), "control topic ctl")
	assert.Contains(t, err.Error(), "retention.ms=-1")
	assert.Contains(t, err.Error(), fmt.Sprintf("offset %d", base))

	// A base offset that is retained but is no full copy of the stream.
	w2 := newSimWriter(t, 64)
	w2.commit("a")
	w2.commit("a")
	w2.log.recs = w2.log.recs[1:] // rewritten: the copy is gone, the offsets are not
	_, err = w2.control().NewestState(t.Context(), "a", NoOffset)
	require.ErrorIs(t, err, ErrControlTruncated)
}

// TestNewestStateLostEvent: a committed watermark between the full copy
// and the newest one gone from the log (a broker that lost a committed
// record) leaves the newest one retaining a batch that no event records:
// recovery fails with ErrRollForward and says that a restart finds the
// same and what to do.
func TestNewestStateLostEvent(t *testing.T) {
	w := newSimWriter(t, 64)
	for range 5 {
		w.commit("a")
	}
	w.log.recs = slices.Delete(w.log.recs, 2, 3) // the third watermark, a delta
	_, err := w.control().NewestState(t.Context(), "a", NoOffset)
	require.ErrorIs(t, err, ErrRollForward)
	assert.NotErrorIs(t, err, ErrControlTruncated)
	assert.ErrorContains(t, err, `control topic ctl, stream "a"`)
	assert.ErrorContains(t, err, "a restart finds the same")
	assert.ErrorContains(t, err, "new stream id")
}

// TestNewest finds the newest event matching a predicate, and the search
// does not read past the from offset.
func TestNewest(t *testing.T) {
	w := newSimWriter(t, 4)
	w.interleaved(50, "a", "b")
	undo := w.undo("a")
	w.interleaved(50, "b")
	ctl := w.control()
	ctl.SetSearchWindow(8)
	h, _, err := ctl.Newest(t.Context(), "a", NoOffset, func(h HistoryEvent) bool { return h.Event.Undo != nil })
	require.NoError(t, err)
	require.NotNil(t, h)
	assert.Equal(t, undo, h.Offset)

	w.log.resetCounts()
	h, _, err = ctl.Newest(t.Context(), "a", undo+1, func(HistoryEvent) bool { return true })
	require.NoError(t, err)
	assert.Nil(t, h)
	assert.Equal(t, w.log.end-(undo+1), w.log.offsets, "read back to the from offset, not below")
}
