package reorg

import "fmt"

// EventKind is the kind of an [Event].
type EventKind uint8

// The event kinds.
const (
	// KindData carries rows of a microbatch, to be written tagged with the
	// event's Seq and BatchID.
	KindData EventKind = iota + 1
	// KindUndo invalidates every event with a sequence number in
	// First..=Last.
	KindUndo
	// KindWatermark completes a microbatch: its ranges are the new resume
	// position once committed.
	KindWatermark
)

// String returns "data", "undo" or "watermark".
func (k EventKind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindUndo:
		return "undo"
	case KindWatermark:
		return "watermark"
	default:
		return fmt.Sprintf("EventKind(%d)", uint8(k))
	}
}

// Cause says why an Undo was emitted.
type Cause uint8

// The causes of an Undo.
const (
	// CauseReorg: the chain reorganised; Invalidations says which blocks.
	CauseReorg Cause = iota + 1
	// CauseRewind: crash recovery at start; the events after the last
	// committed watermark are discarded and will be replayed by the server.
	CauseRewind
)

// String returns "reorg" or "rewind".
func (c Cause) String() string {
	switch c {
	case CauseReorg:
		return "reorg"
	case CauseRewind:
		return "rewind"
	default:
		return fmt.Sprintf("Cause(%d)", uint8(c))
	}
}

// Invalidation is the block interval of one network that a reorg replaced:
// Start..=End.
type Invalidation struct {
	// Network is the network id.
	Network string `json:"network"`
	// Start is the first invalidated block (the fork point).
	Start uint64 `json:"start"`
	// End is the last invalidated block: the larger of the previous and the
	// incoming range's ends.
	End uint64 `json:"end"`
}

// String formats the invalidation as "mainnet 100..=105".
func (i Invalidation) String() string { return fmt.Sprintf("%s %d..=%d", i.Network, i.Start, i.End) }

// Event is one output of the [Machine]. Which fields are set depends on
// Kind; slices are shared with the machine and must not be modified.
type Event struct {
	// Kind is the event kind.
	Kind EventKind
	// Seq is the event's sequence number: strictly increasing, one per
	// event.
	Seq uint64

	// Ranges are the microbatch's ranges (Data, Watermark).
	Ranges []BlockRange
	// BatchID is BatchID(Ranges), the Kafka key of the rows (Data,
	// Watermark).
	BatchID string
	// Rows is the number of rows of the envelope (Data).
	Rows int
	// Prune is set on a Watermark when HasPrune is true: every watermark
	// with Seq <= Prune is now outside retention and its batch log entry
	// may be dropped once this watermark is committed.
	Prune uint64
	// HasPrune says whether Prune is set.
	HasPrune bool

	// Cause is why the Undo was emitted (Undo).
	Cause Cause
	// Invalidations are the reorg's invalidated block intervals (Undo with
	// CauseReorg).
	Invalidations []Invalidation
	// First and Last bound the invalidated sequence numbers, inclusive
	// (Undo). First <= Last always holds.
	First, Last uint64
	// Retract are the committed watermarks among First..=Last, oldest
	// first: their microbatches are visible downstream and need retraction
	// events (Undo). When Abort is true it also repeats the retractions of
	// an earlier Undo in the aborted transaction.
	Retract []Watermark
	// Abort is true when First..=Last includes events that are not
	// committed: the open Kafka transaction holds invalidated records and
	// must be aborted (Undo).
	Abort bool
	// Replay is true when Abort is true and the open transaction also holds
	// uncommitted events before First that are still valid: aborting loses
	// them, so after the abort call [Machine.Rollback] and reconnect from
	// Snapshot().Cursor(), ignoring the rest of this Apply's events and any
	// ReconnectError (Undo).
	Replay bool
}

// String formats the event for logs and test failures.
func (e Event) String() string {
	switch e.Kind {
	case KindData:
		return fmt.Sprintf("Data#%d(%s, %d rows)", e.Seq, rangesString(e.Ranges), e.Rows)
	case KindWatermark:
		if e.HasPrune {
			return fmt.Sprintf("Watermark#%d(%s, prune %d)", e.Seq, rangesString(e.Ranges), e.Prune)
		}
		return fmt.Sprintf("Watermark#%d(%s)", e.Seq, rangesString(e.Ranges))
	case KindUndo:
		return fmt.Sprintf("Undo#%d(%s, %d..=%d, retract %d, abort %t, replay %t)",
			e.Seq, e.Cause, e.First, e.Last, len(e.Retract), e.Abort, e.Replay)
	default:
		return fmt.Sprintf("%s#%d", e.Kind, e.Seq)
	}
}
