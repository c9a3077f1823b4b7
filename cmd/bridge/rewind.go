package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// rewindResult says what a rewind did.
type rewindResult struct {
	// Cursor is where the stream resumes.
	Cursor reorg.Cursor
	// Batches and Rows are what was retracted.
	Batches, Rows int
}

// cmdRewind retracts everything a stream committed from a block on and
// makes it resume there.
func cmdRewind(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rewind", flag.ContinueOnError)
	streamID := fs.String("stream", "", "the stream to rewind (required)")
	to := fs.Uint64("to-block", math.MaxUint64, "the first block to retract and publish again (required)")
	b, err := openFromFlags(ctx, fs, args, stderr, false)
	if err != nil {
		return err
	}
	defer b.close()
	if *streamID == "" || *to == math.MaxUint64 {
		return fmt.Errorf("rewind needs -stream and -to-block: %w", errUsage)
	}
	res, err := b.rewind(ctx, *streamID, *to)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "stream %s rewound: %d batch(es) with %d row(s) retracted; it resumes after %s\n",
		*streamID, res.Batches, res.Rows, cursorText(res.Cursor))
	return nil
}

// rewind is `bridge rewind`: in one Kafka transaction, with the stream's
// transactional id (which fences a running instance: stop it first), it
// retracts every batch the stream committed that reaches block to or
// later, and writes the checkpoint the stream had after its newest
// watermark that ends before to. The checkpoint is rebuilt from the control
// topic's watermark events (stateAt), so a rewind reaches beyond the reorg
// retention window: it is the recovery from a reorg deeper than retention.
// The next `bridge run` resumes from there. It does not reach into the
// blocks of a backfill.
func (b *bridge) rewind(ctx context.Context, id string, to uint64) (rewindResult, error) {
	var sc *config.StreamConfig
	for i := range b.cfg.Streams {
		if b.cfg.Streams[i].ID == id {
			sc = &b.cfg.Streams[i]
		}
	}
	if sc == nil {
		return rewindResult{}, fmt.Errorf("no stream %q in the configuration", id)
	}
	r := b.runner(*sc)
	defer r.close(ctx)
	if err := r.setup(ctx); err != nil {
		return rewindResult{}, err
	}
	return r.rewind(ctx, to)
}

// controlHistory is the stream's control events in offset order.
type controlHistory struct {
	offset int64
	ev     encode.ControlEvent
}

func (r *streamRunner) rewind(ctx context.Context, to uint64) (rewindResult, error) {
	cr := &controlReader{reader: r.reader, codec: r.deps.control, topic: r.deps.controlTopic()}
	hist, read, err := cr.historyRead(ctx, r.cfg.ID, 0)
	if err != nil {
		return rewindResult{}, err
	}
	if read.Truncated || (read.End > read.Start && read.Start > 0) {
		return rewindResult{}, fmt.Errorf("control topic %s starts at offset %d: retention removed the history a rewind needs; "+
			"its retention must be infinite (retention.ms=-1)", r.deps.controlTopic(), read.Start)
	}
	// The backfilled history cannot be published again by a rewind: its
	// progress records would still count it as published.
	if bf := backfilledSpans(hist); len(bf) > 0 && to < bf[len(bf)-1].To {
		return rewindResult{}, fmt.Errorf("block %d is inside the stream's backfill (published up to block %d); "+
			"a rewind reaches back to the hand-over at most: start a new stream id to publish the history again", to, bf[len(bf)-1].To-1)
	}
	// The target: the newest live watermark whose cursor ends before block to.
	target := -1
	for i, h := range hist {
		if w := h.ev.Watermark; w != nil && w.Backfill == nil && (len(w.Checkpoint) > 0 || w.State != nil) && cursorBefore(w.Cursor, to) {
			target = i
		}
	}
	base := offsets.ControlState{Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []offsets.Batch{}}
	if target >= 0 {
		if base, err = stateAt(hist, target); err != nil {
			return rewindResult{}, fmt.Errorf("rebuilding the checkpoint at control offset %d: %w", hist[target].offset, err)
		}
	}
	// Everything committed after the target and not retracted since.
	live := map[string]offsets.Batch{}
	for _, h := range hist[target+1:] {
		switch {
		case h.ev.Watermark != nil:
			for _, cb := range h.ev.Watermark.Batches {
				live[cb.BatchID] = offsetsBatch(cb)
			}
		case h.ev.Undo != nil:
			for _, id := range h.ev.Undo.BatchIDs {
				delete(live, id)
			}
		}
	}
	batches := make([]offsets.Batch, 0, len(live))
	for _, b := range live {
		batches = append(batches, b)
	}
	slices.SortFunc(batches, func(a, b offsets.Batch) int { return cmp.Compare(a.Seq, b.Seq) })

	if err := r.begin(); err != nil {
		return rewindResult{}, err
	}
	res := rewindResult{Cursor: base.Snapshot.Cursor()}
	u := encode.Undo{Stream: r.cfg.ID, Sequence: r.committed.Snapshot.Next, TsMs: r.deps.now().UnixMilli(), Cause: "rewind"}
	for _, b := range batches {
		if r.enc == nil && len(b.Ranges) > 0 {
			if err := r.setupTopic(ctx, []string{b.Ranges[0].Network}); err != nil {
				return rewindResult{}, err
			}
		}
		n, err := r.retract(ctx, b)
		if err != nil {
			return rewindResult{}, err
		}
		res.Batches++
		res.Rows += n
		u.BatchIDs = append(u.BatchIDs, b.ID)
		for _, rg := range b.Ranges {
			u.Ranges = append(u.Ranges, encode.InvalidatedRange{Network: rg.Network, Start: rg.Start, End: rg.End})
		}
		if res.Batches == 1 || b.Seq < u.FirstSequence {
			u.FirstSequence = b.Seq
		}
		u.LastSequence = max(u.LastSequence, b.Seq)
	}
	// The sequence moves on: reconciliation must see this checkpoint as
	// newer than the one it replaces.
	snap := base.Snapshot
	snap.Next = max(snap.Next, r.committed.Snapshot.Next+1)
	cp := offsets.Checkpoint{Stream: r.cfg.ID, Version: r.committed.Version + 1, Fingerprint: r.fingerprint,
		CommittedAt: r.deps.now().UTC(), ControlOffset: r.committed.ControlOffset, Snapshot: snap, Batches: base.Batches}
	cpBytes, err := offsets.Marshal(cp)
	if err != nil {
		return rewindResult{}, fmt.Errorf("encoding the rewound checkpoint: %w", err)
	}
	if len(u.BatchIDs) > 0 {
		v, err := r.deps.control.AppendUndo(nil, u)
		if err != nil {
			return rewindResult{}, err
		}
		if err := r.prod.Produce(ctx, sink.Record{Topic: r.deps.controlTopic(), Key: []byte(r.cfg.ID), Value: v, Op: "undo"}); err != nil {
			return rewindResult{}, r.txnError("producing the undo event", err)
		}
	}
	var seq uint64
	if n := len(snap.Watermarks); n > 0 {
		seq = snap.Watermarks[n-1].Seq
	}
	v, err := r.deps.control.AppendWatermark(nil, encode.Watermark{Stream: r.cfg.ID, Sequence: seq, TsMs: r.deps.now().UnixMilli(),
		Cursor: snap.Cursor(), Checkpoint: cpBytes})
	if err != nil {
		return rewindResult{}, err
	}
	if err := r.prod.Produce(ctx, sink.Record{Topic: r.deps.controlTopic(), Key: []byte(r.cfg.ID), Value: v, Group: controlGroup, Op: "watermark"}); err != nil {
		return rewindResult{}, r.txnError("producing the watermark event", err)
	}
	committed, err := r.prod.Commit(ctx)
	if err != nil {
		return rewindResult{}, r.txnError("committing the rewind", err)
	}
	r.txnOpen = false
	if g, ok := committed.Group(controlGroup); ok && len(g.Spans) > 0 {
		cp.ControlOffset = g.Spans[0].Last
	}
	if err := r.deps.store.Commit(ctx, cp); err != nil {
		return res, fmt.Errorf("the rewind is committed in Kafka but storing the checkpoint failed (the next start repairs it from the control topic): %w", err)
	}
	r.log.Info("stream rewound", "to_block", to, "batches", res.Batches, "rows", res.Rows, "cursor", cursorText(res.Cursor))
	return res, nil
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
