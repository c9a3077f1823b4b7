package reorg

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidRanges is wrapped by every [*ValidationError]: an incoming
// batch's ranges break the protocol rules of amp-protocol.md §5.1.
var ErrInvalidRanges = errors.New("reorg: invalid block ranges")

// ErrUnrecoverable is wrapped by [*UnrecoverableError]: a reorg reaches below
// the oldest retained watermark, so the bridge cannot know which published
// batches it replaced.
var ErrUnrecoverable = errors.New("reorg: reorg deeper than retention")

// ErrReconnect is wrapped by [*ReconnectError]: the events returned with it
// must be handled, then the source must reconnect with the error's cursor.
var ErrReconnect = errors.New("reorg: reconnect required")

// ValidationKind says which rule of amp-protocol.md §5.1 an incoming range
// broke.
type ValidationKind uint8

// The validation rules, in the order they are checked.
const (
	// InvalidRange: the range's start is after its end, or its network id
	// is empty.
	InvalidRange ValidationKind = iota + 1
	// InvalidPrevHash: a range starting at genesis (block 0) has a non-zero
	// prev_hash.
	InvalidPrevHash
	// MissingPrevHash: a range starting after genesis has a null or zero
	// prev_hash.
	MissingPrevHash
	// DuplicateNetwork: one batch has two ranges for the same network.
	DuplicateNetwork
	// NetworkCountChanged: the batch has a different number of networks
	// than the previous one.
	NetworkCountChanged
	// UnexpectedNetwork: the batch has a network the previous one had not.
	UnexpectedNetwork
	// Gap: the range starts more than one block after the previous end.
	Gap
	// HashMismatch: the range starts right after the previous end but its
	// prev_hash is not the previous range's hash.
	HashMismatch
	// InvalidReorg: the range goes back (starts at or before the previous
	// end) yet its prev_hash equals the previous range's hash.
	InvalidReorg
	// HandoverMismatch: the first range after a backfill's hand-over does
	// not start at the first block the backfill did not publish, or is for
	// another network.
	HandoverMismatch
)

// String returns the rule's name as the Rust client spells it.
func (k ValidationKind) String() string {
	switch k {
	case InvalidRange:
		return "InvalidRange"
	case InvalidPrevHash:
		return "InvalidPrevHash"
	case MissingPrevHash:
		return "MissingPrevHash"
	case DuplicateNetwork:
		return "DuplicateNetwork"
	case NetworkCountChanged:
		return "NetworkCountChanged"
	case UnexpectedNetwork:
		return "UnexpectedNetwork"
	case Gap:
		return "Gap"
	case HashMismatch:
		return "HashMismatchOnConsecutiveBlocks"
	case InvalidReorg:
		return "InvalidReorg"
	case HandoverMismatch:
		return "HandoverMismatch"
	default:
		return fmt.Sprintf("ValidationKind(%d)", uint8(k))
	}
}

// ValidationError reports an incoming range that breaks a protocol rule. The
// machine's state is unchanged when it is returned. It wraps
// [ErrInvalidRanges].
type ValidationError struct {
	// Kind is the broken rule.
	Kind ValidationKind
	// Network is the network concerned ("" for NetworkCountChanged).
	Network string
	// Previous is the previous range of Network (zero when there is none).
	Previous BlockRange
	// Incoming is the offending range (zero for NetworkCountChanged).
	Incoming BlockRange
	// PreviousNetworks and IncomingNetworks are the network ids of the two
	// batches, set for NetworkCountChanged and UnexpectedNetwork.
	PreviousNetworks, IncomingNetworks []string
}

const validationAdvice = "; the Amp server sent an inconsistent stream: resume from the last committed checkpoint, " +
	"and report it to the Amp operator if it repeats"

// Error names the network, the blocks and the hashes involved.
func (e *ValidationError) Error() string {
	in, prev := e.Incoming, e.Previous
	var msg string
	switch e.Kind {
	case InvalidRange:
		if in.Network == "" {
			msg = fmt.Sprintf("range %d..=%d has an empty network id", in.Start, in.End)
		} else {
			msg = fmt.Sprintf("range %s: start %d is after end %d", in, in.Start, in.End)
		}
	case InvalidPrevHash:
		msg = fmt.Sprintf("range %s starts at genesis but has prev_hash %s; a genesis range has a null or zero prev_hash",
			in, in.PrevHash)
	case MissingPrevHash:
		msg = fmt.Sprintf("range %s starts after genesis but its prev_hash is null or zero; it must be the hash of block %d",
			in, in.Start-1)
	case DuplicateNetwork:
		msg = fmt.Sprintf("network %q appears twice in one batch's ranges (second: %s)", e.Network, in)
	case NetworkCountChanged:
		msg = fmt.Sprintf("the batch has ranges for %d networks %v but the previous batch had %d %v; a stream's networks cannot change",
			len(e.IncomingNetworks), e.IncomingNetworks, len(e.PreviousNetworks), e.PreviousNetworks)
	case UnexpectedNetwork:
		msg = fmt.Sprintf("range %s is for network %q, which the previous batch (networks %v) did not have",
			in, e.Network, e.PreviousNetworks)
	case Gap:
		msg = fmt.Sprintf("gap on network %s: range %d..=%d follows %d..=%d, so blocks %d..=%d are missing",
			e.Network, in.Start, in.End, prev.Start, prev.End, prev.End+1, in.Start-1)
	case HashMismatch:
		msg = fmt.Sprintf("hash mismatch on network %s: range %d..=%d follows %d..=%d whose hash is %s, but its prev_hash is %s",
			e.Network, in.Start, in.End, prev.Start, prev.End, prev.Hash, prevHashString(in))
	case InvalidReorg:
		msg = fmt.Sprintf("invalid reorg on network %s: range %d..=%d goes back before the end of %d..=%d but its prev_hash %s "+
			"is that range's hash; a reorg must change the parent hash", e.Network, in.Start, in.End, prev.Start, prev.End, prev.Hash)
	case HandoverMismatch:
		if e.Network == "" || len(e.IncomingNetworks) > 0 {
			msg = fmt.Sprintf("the first live batch after the backfill has networks %v but the backfill covered %v",
				e.IncomingNetworks, e.PreviousNetworks)
		} else {
			msg = fmt.Sprintf("the first live range after the backfill on network %s is %d..=%d, but the backfill published "+
				"every block before %d, so it must start at %d (else blocks are missing or published twice)",
				e.Network, in.Start, in.End, prev.Start, prev.Start)
		}
	default:
		msg = fmt.Sprintf("%s on network %s: incoming %s, previous %s", e.Kind, e.Network, in, prev)
	}
	return "reorg: " + msg + validationAdvice
}

// Unwrap returns [ErrInvalidRanges].
func (e *ValidationError) Unwrap() error { return ErrInvalidRanges }

func prevHashString(r BlockRange) string {
	if !r.HasPrevHash {
		return "null"
	}
	return r.PrevHash.String()
}

// UnrecoverableError reports a reorg whose fork point lies below every
// retained watermark. The machine's state is unchanged when it is returned;
// the stream must stop. It wraps [ErrUnrecoverable].
type UnrecoverableError struct {
	// Invalidations are the ranges the reorg invalidates.
	Invalidations []Invalidation
	// Oldest is the oldest retained watermark (zero Seq and no ranges when
	// none is retained).
	Oldest Watermark
	// Retention is the configured retention in blocks.
	Retention uint64
}

// Error says what happened and how to recover.
func (e *UnrecoverableError) Error() string {
	var sb strings.Builder
	sb.WriteString("reorg: the reorg invalidating ")
	for i, inv := range e.Invalidations {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(inv.String())
	}
	if len(e.Oldest.Ranges) > 0 {
		fmt.Fprintf(&sb, " reaches below the oldest retained watermark (seq %d, %s)", e.Oldest.Seq, rangesString(e.Oldest.Ranges))
	} else {
		sb.WriteString(" reaches below the retained history (no watermark is retained)")
	}
	fmt.Fprintf(&sb, " with a retention of %d blocks, so the published batches it replaced are unknown; "+
		"recover with `bridge rewind --stream S --to-block N` (N before block %d) or start a new stream id, "+
		"and raise retention above the deepest reorg you expect", e.Retention, minStart(e.Invalidations))
	return sb.String()
}

// Unwrap returns [ErrUnrecoverable].
func (e *UnrecoverableError) Unwrap() error { return ErrUnrecoverable }

// ReconnectError is returned together with events by [Machine.Apply] when a
// reorg's fork point lies inside an already completed multi-block microbatch
// (the Rust client's fatal `Partial` error, recovered here). The returned
// Undo has invalidated everything after the newest watermark that ends
// before the fork; the caller must handle the returned events, then cancel
// the current DoGet and reconnect with Cursor so the server replays from the
// block after it. It wraps [ErrReconnect].
type ReconnectError struct {
	// Cursor is the resume cursor: the ranges of watermark Seq, or nil to
	// restart from the earliest block (no amp-resume header).
	Cursor Cursor
	// Seq is the sequence number of the watermark the stream resumes after;
	// meaningful only when Cursor is not nil.
	Seq uint64
	// Invalidations are the reorg's invalidation ranges.
	Invalidations []Invalidation
}

// Error says where the stream must resume.
func (e *ReconnectError) Error() string {
	var sb strings.Builder
	sb.WriteString("reorg: the reorg invalidating ")
	for i, inv := range e.Invalidations {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(inv.String())
	}
	sb.WriteString(" forks inside an already completed microbatch; ")
	if e.Cursor == nil {
		sb.WriteString("reconnect without a cursor to replay from the earliest block")
	} else {
		h, _ := e.Cursor.Header()
		fmt.Fprintf(&sb, "reconnect with cursor %s (watermark seq %d) to replay the blocks after it", h, e.Seq)
	}
	return sb.String()
}

// Unwrap returns [ErrReconnect].
func (e *ReconnectError) Unwrap() error { return ErrReconnect }

func rangesString(rs []BlockRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ", ")
}

func minStart(invs []Invalidation) uint64 {
	var m uint64
	for i, inv := range invs {
		if i == 0 || inv.Start < m {
			m = inv.Start
		}
	}
	return m
}
