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
func Rewind(ctx context.Context, sc config.StreamConfig, deps pipeline.Deps, to uint64) (RewindResult, error) {
	s := pipeline.New(sc, deps)
	defer s.Close(ctx)
	if err := s.Open(ctx); err != nil {
		return RewindResult{}, err
	}
	hist, page, err := s.Control().History(ctx, sc.ID, 0)
	if err != nil {
		return RewindResult{}, err
	}
	if page.Truncated || (page.End > page.Start && page.Start > 0) {
		return RewindResult{}, fmt.Errorf("control topic %s starts at offset %d: retention removed the history a rewind needs; "+
			"its retention must be infinite (retention.ms=-1)", deps.ControlTopic, page.Start)
	}
	// The backfilled history cannot be published again by a rewind: its
	// progress records would still count it as published.
	if end, ok := pipeline.BackfillEnd(hist); ok && to < end {
		return RewindResult{}, fmt.Errorf("block %d is inside the stream's backfill (published up to block %d); "+
			"a rewind reaches back to the hand-over at most: start a new stream id to publish the history again", to, end-1)
	}
	// A stream that has committed nothing live (a fresh stream, or one
	// whose backfill has not handed over) has nothing to rewind: writing a
	// checkpoint would mark it as gone live and skip its backfill.
	if offsets.LastLiveWatermark(hist) < 0 {
		return RewindResult{}, fmt.Errorf("stream %s: %w", sc.ID, ErrNothingCommitted)
	}
	// The target: the newest live watermark whose cursor ends before block to.
	target := -1
	for i, h := range hist {
		if w := h.Event.Watermark; offsets.IsLiveState(w) && cursorBefore(w.Cursor, to) {
			target = i
		}
	}
	base := offsets.ControlState{Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []offsets.Batch{}}
	if target >= 0 {
		if base, err = offsets.StateAt(hist, target); err != nil {
			return RewindResult{}, fmt.Errorf("rebuilding the checkpoint at control offset %d: %w", hist[target].Offset, err)
		}
	}
	// Everything committed after the target and not retracted since.
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
	batches := make([]offsets.Batch, 0, len(live))
	for _, b := range live {
		batches = append(batches, b)
	}
	slices.SortFunc(batches, func(a, b offsets.Batch) int { return cmp.Compare(a.Seq, b.Seq) })
	n, err := s.Rewind(ctx, batches, base)
	if err != nil {
		return RewindResult{}, err
	}
	return RewindResult{Cursor: base.Snapshot.Cursor(), Batches: n.Batches, Rows: n.Rows}, nil
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
