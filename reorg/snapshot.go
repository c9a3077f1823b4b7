package reorg

import "fmt"

// Watermark is one retained completed microbatch: the sequence number of its
// Watermark event and its ranges.
type Watermark struct {
	// Seq is the sequence number of the Watermark event.
	Seq uint64 `json:"seq"`
	// Ranges are the microbatch's ranges, one per network.
	Ranges []BlockRange `json:"ranges"`
}

// BatchID returns BatchID(w.Ranges), the Kafka key of the microbatch's rows.
func (w Watermark) BatchID() string { return BatchID(w.Ranges) }

// Snapshot is the serialisable state of the state machine: the part of the
// stream's checkpoint this package owns (amp-protocol.md §5.4). It is taken
// at a commit and restored on start.
type Snapshot struct {
	// Next is the next sequence number to allocate.
	Next uint64 `json:"next"`
	// Watermarks are the committed watermarks within retention, oldest
	// first. The last one is the resume cursor.
	Watermarks []Watermark `json:"watermarks"`
	// Incomplete is true when Watermarks do not reach back to the stream's
	// first block: retention pruned older ones, or the snapshot was seeded
	// from a cursor (e.g. the backfill hand-over). A reorg below the oldest
	// watermark is then unrecoverable; when false it is recovered by undoing
	// everything and restarting from the earliest block.
	Incomplete bool `json:"incomplete,omitempty"`
	// Handover is where a stream whose history was backfilled goes live:
	// per network, the first block the backfill did not publish, with the
	// zero hash. Amp restarts a stream at the block of a cursor whose hash
	// it does not know (amp-protocol.md §3.2), so this cursor resumes
	// exactly there, and the machine requires the first range of every
	// network to start at that block. Used only until the first watermark.
	Handover Cursor `json:"handover,omitempty"`
	// Start marks Handover as a start position (a stream configured to
	// start at a block or at Amp's head) rather than a backfill's end: no
	// block before it was published, so a reorg that reaches below it is
	// recovered by undoing everything and resuming at Handover, where Amp
	// restarts on its new chain.
	Start bool `json:"start,omitempty"`
}

// NewStart returns the snapshot of a new stream that starts at block
// next[network]: a hand-over cursor there (Amp restarts exactly at a block
// whose hash it does not know, amp-protocol.md §3.2), marked Start.
func NewStart(next map[string]uint64) Snapshot {
	s := NewHandover(next)
	s.Start = true
	return s
}

// NewHandover returns the snapshot of a stream that goes live after a
// backfill of every block before next[network]: no watermark yet, and
// incomplete (a reorg below the first live watermark cannot be undone).
func NewHandover(next map[string]uint64) Snapshot {
	c := make(Cursor, len(next))
	for n, b := range next {
		c[n] = Point{Number: b}
	}
	return Snapshot{Watermarks: []Watermark{}, Incomplete: true, Handover: c}
}

// Cursor returns the resume cursor of the snapshot: the ranges of its newest
// watermark; without one the Handover cursor, or nil (start from the
// earliest block).
func (s Snapshot) Cursor() Cursor {
	if len(s.Watermarks) == 0 {
		if len(s.Handover) > 0 {
			return s.Handover.clone()
		}
		return nil
	}
	return CursorFromRanges(s.Watermarks[len(s.Watermarks)-1].Ranges)
}

// Validate checks that the snapshot is one the machine can have written:
// watermark sequence numbers strictly increasing and below Next, every
// watermark with valid ranges for the same networks.
func (s Snapshot) Validate() error {
	if len(s.Handover) > 0 {
		if err := s.Handover.Validate(); err != nil {
			return fmt.Errorf("reorg: snapshot hand-over cursor: %w", err)
		}
		for n, p := range s.Handover {
			if !p.Hash.IsZero() {
				return fmt.Errorf("reorg: snapshot hand-over cursor of network %q has hash %s; it must be zero "+
					"(a block the server does not know, so that it restarts at block %d)", n, p.Hash, p.Number)
			}
		}
		if !s.Incomplete {
			return fmt.Errorf("reorg: snapshot has a hand-over cursor but is not marked incomplete; " +
				"the backfilled blocks before it are not retained")
		}
	}
	if s.Start && len(s.Handover) == 0 {
		return fmt.Errorf("reorg: snapshot is marked start but has no hand-over cursor (the start block)")
	}
	for i, w := range s.Watermarks {
		if len(w.Ranges) == 0 {
			return fmt.Errorf("reorg: snapshot watermark seq %d has no ranges; the checkpoint is corrupt: "+
				"restore it from the control topic or use `bridge rewind`", w.Seq)
		}
		if err := Validate(nil, w.Ranges); err != nil {
			return fmt.Errorf("reorg: checking snapshot watermark seq %d: %w", w.Seq, err)
		}
		if w.Seq >= s.Next {
			return fmt.Errorf("reorg: snapshot watermark seq %d is not below next %d; the checkpoint is corrupt: "+
				"restore it from the control topic or use `bridge rewind`", w.Seq, s.Next)
		}
		if i == 0 {
			continue
		}
		prev := s.Watermarks[i-1]
		if w.Seq <= prev.Seq {
			return fmt.Errorf("reorg: snapshot watermark seq %d follows seq %d; the checkpoint is corrupt: "+
				"restore it from the control topic or use `bridge rewind`", w.Seq, prev.Seq)
		}
		if len(w.Ranges) != len(prev.Ranges) {
			return fmt.Errorf("reorg: snapshot watermarks seq %d and %d have different networks; the checkpoint is corrupt",
				prev.Seq, w.Seq)
		}
		for _, r := range w.Ranges {
			if _, ok := rangeOf(prev.Ranges, r.Network); !ok {
				return fmt.Errorf("reorg: snapshot watermark seq %d has network %q that seq %d lacks; the checkpoint is corrupt",
					w.Seq, r.Network, prev.Seq)
			}
		}
	}
	return nil
}

// clone returns a copy whose Watermarks slice is not shared (the ranges,
// which are never modified, are).
func (s Snapshot) clone() Snapshot {
	s.Watermarks = append([]Watermark(nil), s.Watermarks...)
	s.Handover = s.Handover.clone()
	return s
}
