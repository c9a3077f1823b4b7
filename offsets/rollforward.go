package offsets

import (
	"errors"
	"fmt"
	"slices"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Delta is what a watermark event without a checkpoint copy records: the
// batches its transaction committed and the stream's state after it. With
// the checkpoint of an earlier event and the deltas since, it rebuilds the
// checkpoint (RollForward), so that not every event needs a full copy.
type Delta struct {
	// Offset is the control-topic offset of the event.
	Offset int64
	// Batches are the batches the transaction committed, oldest first.
	Batches []Batch
	// Retained are the sequence numbers of the watermarks retained after
	// the transaction, oldest first.
	Retained []uint64
	// Next is the next sequence number after the transaction.
	Next uint64
	// Incomplete is the reorg snapshot's Incomplete flag after it.
	Incomplete bool
}

// ErrRollForward marks control events that do not rebuild a consistent
// checkpoint.
var ErrRollForward = errors.New("the control events do not rebuild a checkpoint")

// RollForward returns the state after base and the deltas, in offset
// order: the retained watermarks and batches are those of the last delta's
// Retained list, found in base or in the deltas' batches; Next and
// Incomplete are the last delta's; the hand-over cursor, the fingerprint
// and the topic ids are base's. With no delta it returns base.
func RollForward(base ControlState, deltas []Delta) (ControlState, error) {
	if len(deltas) == 0 {
		return base, nil
	}
	type entry struct {
		w reorg.Watermark
		b *Batch
	}
	pool := map[uint64]entry{}
	for _, w := range base.Snapshot.Watermarks {
		pool[w.Seq] = entry{w: w}
	}
	for i := range base.Batches {
		b := base.Batches[i]
		e := pool[b.Seq]
		e.b = &b
		pool[b.Seq] = e
	}
	prev := base.Offset
	for _, d := range deltas {
		if d.Offset <= prev {
			return ControlState{}, fmt.Errorf("%w: event at offset %d follows offset %d", ErrRollForward, d.Offset, prev)
		}
		prev = d.Offset
		for i := range d.Batches {
			b := d.Batches[i]
			pool[b.Seq] = entry{w: reorg.Watermark{Seq: b.Seq, Ranges: b.Ranges}, b: &b}
		}
		keep := make(map[uint64]entry, len(d.Retained))
		for _, s := range d.Retained {
			e, ok := pool[s]
			if !ok || len(e.w.Ranges) == 0 {
				return ControlState{}, fmt.Errorf("%w: the event at offset %d retains watermark %d, which neither the checkpoint "+
					"at offset %d nor a later event records", ErrRollForward, d.Offset, s, base.Offset)
			}
			keep[s] = e
		}
		pool = keep
	}
	last := deltas[len(deltas)-1]
	out := ControlState{Offset: last.Offset, Fingerprint: base.Fingerprint, TopicIDs: base.TopicIDs,
		Snapshot: reorg.Snapshot{Next: last.Next, Incomplete: last.Incomplete, Handover: base.Snapshot.Handover, Start: base.Snapshot.Start,
			Watermarks: make([]reorg.Watermark, 0, len(last.Retained))},
		Batches: []Batch{}}
	seqs := slices.Clone(last.Retained)
	slices.Sort(seqs)
	for _, s := range seqs {
		e := pool[s]
		out.Snapshot.Watermarks = append(out.Snapshot.Watermarks, e.w)
		if e.b != nil {
			out.Batches = append(out.Batches, *e.b)
		}
	}
	if err := out.Snapshot.Validate(); err != nil {
		return ControlState{}, fmt.Errorf("%w: the state after offset %d: %w", ErrRollForward, last.Offset, err)
	}
	return out, nil
}
