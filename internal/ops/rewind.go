package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// ErrNothingCommitted is returned by Rewind for a stream that has committed
// nothing live yet: there is nothing to retract, and nothing is written.
var ErrNothingCommitted = errors.New("the stream has committed nothing live yet (a backfill not yet handed over counts as nothing): there is nothing to rewind")

// RewindResult says what a rewind did.
type RewindResult struct {
	// Cursor is where the stream resumes.
	Cursor reorg.Cursor
	// Batches and Rows are what was retracted.
	Batches, Rows int
}

// Rewind is `bridge rewind`: in one Kafka transaction, with the stream's
// transactional id (which fences a running instance: stop it first), it
// retracts every batch the stream committed that reaches block to or
// later, and writes the checkpoint the stream had after its newest
// watermark that ends before to. The checkpoint is rebuilt from the control
// topic's watermark events (offsets.StateAt), so a rewind reaches beyond
// the reorg retention window: it is the recovery from a reorg deeper than
// retention. The next `bridge run` resumes from there. It does not reach
// into the blocks of a backfill, and it never runs one: it connects the
// stream with pipeline.Stream.Open, which publishes nothing.
//
// Cost: it reads the whole control topic once, from offset 0 (it needs the
// stream's whole history to find the target; a topic whose retention
// deleted its start is refused), streaming through it (rewindScan): it
// holds one fetch of records, the stream's live watermarks since the
// newest full checkpoint copy before the target (at most the writer's
// full-copy interval, 64), and the batches committed after the target,
// which are what it retracts. Time grows with the topic's length, memory
// does not.
func Rewind(ctx context.Context, sc config.StreamConfig, deps pipeline.Deps, to uint64) (RewindResult, error) {
	s := pipeline.New(sc, deps)
	defer s.Close(ctx)
	if err := s.Open(ctx); err != nil {
		return RewindResult{}, err
	}
	ctl := s.Control()
	bounds, err := ctl.Bounds(ctx)
	if err != nil {
		return RewindResult{}, err
	}
	if bounds.Start > 0 {
		return RewindResult{}, fmt.Errorf("control topic %s starts at offset %d: retention removed the history a rewind needs; "+
			"its retention must be infinite (retention.ms=-1): %w", deps.ControlTopic, bounds.Start, offsets.ErrControlTruncated)
	}
	scan := newRewindScan(to)
	if err := ctl.Scan(ctx, sc.ID, bounds.Start, bounds.End, scan.add); err != nil {
		return RewindResult{}, err
	}
	// The backfilled history cannot be published again by a rewind: its
	// progress records would still count it as published.
	if scan.backfilled && to < scan.backfillEnd {
		return RewindResult{}, fmt.Errorf("block %d is inside the stream's backfill (published up to block %d); "+
			"a rewind reaches back to the hand-over at most: start a new stream id to publish the history again", to, scan.backfillEnd-1)
	}
	// A stream that has committed nothing live (a fresh stream, or one
	// whose backfill has not handed over) has nothing to rewind: writing a
	// checkpoint would mark it as gone live and skip its backfill.
	if !scan.anyLive {
		return RewindResult{}, fmt.Errorf("stream %s: %w", sc.ID, ErrNothingCommitted)
	}
	base := offsets.ControlState{Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []offsets.Batch{}}
	if n := len(scan.target); n > 0 {
		if base, err = offsets.StateAt(scan.target, n-1); err != nil {
			return RewindResult{}, fmt.Errorf("rebuilding the checkpoint at control offset %d: %w", scan.target[n-1].Offset, err)
		}
	}
	batches := make([]offsets.Batch, 0, len(scan.live))
	for _, b := range scan.live {
		batches = append(batches, b)
	}
	slices.SortFunc(batches, func(a, b offsets.Batch) int { return cmp.Compare(a.Seq, b.Seq) })
	n, err := s.Rewind(ctx, batches, base)
	if err != nil {
		return RewindResult{}, err
	}
	return RewindResult{Cursor: base.Snapshot.Cursor(), Batches: n.Batches, Rows: n.Rows}, nil
}

// rewindScan is what Rewind keeps of the stream's history while it streams
// through the control topic, oldest first. The target is the newest live
// watermark whose cursor ends before block to.
type rewindScan struct {
	to uint64
	// backfilled and backfillEnd: the first block after the blocks the
	// backfill watermarks record.
	backfilled  bool
	backfillEnd uint64
	// anyLive: a live watermark was seen.
	anyLive bool
	// seg is the stream's live watermarks since (and with) the newest full
	// checkpoint copy: what StateAt rebuilds a watermark's state from.
	seg []offsets.HistoryEvent
	// target is seg as it was at the target, the target last; empty
	// before one is found.
	target []offsets.HistoryEvent
	// live are the batches committed after the target (all, before one is
	// found) and not retracted since.
	live map[string]offsets.Batch
}

func newRewindScan(to uint64) *rewindScan {
	return &rewindScan{to: to, live: map[string]offsets.Batch{}}
}

// add takes the stream's next event.
func (s *rewindScan) add(h offsets.HistoryEvent) error {
	if u := h.Event.Undo; u != nil {
		for _, id := range u.BatchIDs {
			delete(s.live, id)
		}
		return nil
	}
	w := h.Event.Watermark
	if w == nil {
		return nil
	}
	if w.Backfill != nil {
		for _, b := range w.Batches {
			for _, rg := range b.Ranges {
				s.backfilled, s.backfillEnd = true, max(s.backfillEnd, rg.End+1)
			}
		}
	}
	if offsets.IsLiveState(w) {
		s.anyLive = true
		if len(w.Checkpoint) > 0 {
			// A new segment: target may still hold the old one.
			s.seg = []offsets.HistoryEvent{h}
		} else {
			s.seg = append(s.seg, h)
		}
		if cursorBefore(w.Cursor, s.to) || seedState(w) {
			// seg only grows by appending, so target keeps its length
			// and elements.
			s.target = s.seg
			clear(s.live)
			return nil
		}
	}
	for _, cb := range w.Batches {
		s.live[cb.BatchID] = cb.Batch()
	}
	return nil
}

// seedState reports whether w commits the checkpoint of a start position
// or of a backfill's hand-over: no batch yet, and a cursor whose blocks
// Amp restarts at (every hash zero). Such a state is a target for any
// block: a rewind to a block at or below its cursor goes back to it (the
// blocks before it are never published again), not to Amp's first block.
func seedState(w *offsets.Watermark) bool {
	if len(w.Batches) > 0 || len(w.Checkpoint) == 0 || len(w.Cursor) == 0 {
		return false
	}
	for _, p := range w.Cursor {
		if !p.Hash.IsZero() {
			return false
		}
	}
	cp, err := offsets.Unmarshal(w.Checkpoint)
	return err == nil && len(cp.Snapshot.Handover) > 0 && len(cp.Snapshot.Watermarks) == 0
}

// cursorBefore reports whether every point of c is before block to.
func cursorBefore(c reorg.Cursor, to uint64) bool {
	if len(c) == 0 {
		return false
	}
	for _, p := range c {
		if p.Number >= to {
			return false
		}
	}
	return true
}
