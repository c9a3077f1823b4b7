package reorg

// Watermark is one retained completed microbatch: the sequence number of its
// Watermark event and its ranges.
type Watermark struct {
	// Seq is the sequence number of the Watermark event.
	Seq uint64 `json:"seq"`
	// Ranges are the microbatch's ranges, one per network.
	Ranges []BlockRange `json:"ranges"`
}

// Snapshot is the serialisable state of the state machine: the part of the
// stream's checkpoint this package owns (amp-protocol.md §5.4). It is taken
// at a commit and restored on start.
type Snapshot struct {
	// Next is the next sequence number to allocate.
	Next uint64 `json:"next"`
	// Watermarks are the committed watermarks within retention, oldest
	// first. The last one is the resume cursor.
	Watermarks []Watermark `json:"watermarks"`
}

// Cursor returns the resume cursor of the snapshot: the ranges of its newest
// watermark, or nil when there is none (start from the earliest block).
func (s Snapshot) Cursor() Cursor {
	if len(s.Watermarks) == 0 {
		return nil
	}
	return CursorFromRanges(s.Watermarks[len(s.Watermarks)-1].Ranges)
}
