package offsets

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// ControlState is what the sink reports from Kafka's control topic for one
// stream: the newest *committed* control event (watermark, or undo) of the
// stream, with enough content to rebuild the checkpoint it stood for. The
// encoder decodes it from the event; Version, ControlOffset and CommittedAt
// of a checkpoint are not part of it (the offset is where it was read).
type ControlState struct {
	// Offset is the control-topic offset of the event.
	Offset int64
	// Fingerprint is the SQL/schema fingerprint recorded in the event.
	Fingerprint string
	// Snapshot is the stream's reorg state after the event (next sequence
	// and retained watermarks).
	Snapshot reorg.Snapshot
	// Batches is the retained batch log after the event, with offset spans.
	Batches []Batch
	// TopicIDs are the data topics' ids the event's checkpoint recorded
	// (Checkpoint.TopicIDs; nil when none).
	TopicIDs map[string]string
}

// ControlReader reads the newest state of a stream from the control topic;
// Control implements it.
type ControlReader interface {
	// NewestState returns the state after the newest committed live
	// watermark of stream in the control topic (read_committed) at or after
	// offset from (inclusive; anywhere in the log when from is NoOffset), or
	// nil when there is none. Control reads only the end of the topic back
	// to that watermark and from the full checkpoint copy it names, not the
	// whole history.
	NewestState(ctx context.Context, stream string, from int64) (*ControlState, error)
}

// Outcome is the result of reconciliation, a label for the
// "reconciliation outcome" metric.
type Outcome int

// Outcomes of Reconcile.
const (
	// OutcomeFresh: neither the store nor Kafka knows the stream; start from
	// the beginning.
	OutcomeFresh Outcome = iota + 1
	// OutcomeInSync: the store's checkpoint is the newest committed state.
	OutcomeInSync
	// OutcomeRepaired: Kafka committed after the store's checkpoint (a crash
	// between the Kafka commit and the store write); the checkpoint was
	// rebuilt from Kafka and must be committed.
	OutcomeRepaired
	// OutcomeRebuilt: the store was empty; the checkpoint was rebuilt from
	// Kafka alone and must be committed.
	OutcomeRebuilt
	// OutcomeRefusedStoreAhead: the store is ahead of what Kafka proves.
	OutcomeRefusedStoreAhead
	// OutcomeRefusedDiverged: the store and Kafka disagree.
	OutcomeRefusedDiverged
	// OutcomeRefusedFingerprint: the SQL or schema changed under the same id.
	OutcomeRefusedFingerprint
)

// String returns the metric label: "fresh", "in_sync", "repaired",
// "rebuilt", "refused_store_ahead", "refused_diverged",
// "refused_fingerprint".
func (o Outcome) String() string {
	switch o {
	case OutcomeFresh:
		return "fresh"
	case OutcomeInSync:
		return "in_sync"
	case OutcomeRepaired:
		return "repaired"
	case OutcomeRebuilt:
		return "rebuilt"
	case OutcomeRefusedStoreAhead:
		return "refused_store_ahead"
	case OutcomeRefusedDiverged:
		return "refused_diverged"
	case OutcomeRefusedFingerprint:
		return "refused_fingerprint"
	default:
		return fmt.Sprintf("outcome(%d)", int(o))
	}
}

// Outcomes returns every outcome, to pre-register metric labels.
func Outcomes() []Outcome {
	return []Outcome{OutcomeFresh, OutcomeInSync, OutcomeRepaired, OutcomeRebuilt,
		OutcomeRefusedStoreAhead, OutcomeRefusedDiverged, OutcomeRefusedFingerprint}
}

// Decision is what Reconcile decided.
type Decision struct {
	// Outcome says which case applied; set on refusals too.
	Outcome Outcome
	// Checkpoint is the state to resume from. For OutcomeFresh it is empty
	// (Version 0, ControlOffset NoOffset, no watermarks): the first commit
	// is Version 1.
	Checkpoint Checkpoint
	// Commit is true when Checkpoint must be committed to the store before
	// the stream resumes (OutcomeRepaired, OutcomeRebuilt).
	Commit bool
	// Changed is the recorded fingerprint when it differs from the
	// configured one and ReconcileInput.AcceptChange let it through: the
	// stream's SQL or schema changed under its id, and the caller must
	// decide whether the change is one it accepts (schema evolution)
	// before it publishes. Empty when unchanged.
	Changed string
}

// ReconcileInput is the input of Reconcile.
type ReconcileInput struct {
	// Stream is the stream id.
	Stream string
	// Fingerprint is the fingerprint of the configured SQL and schema.
	Fingerprint string
	// AcceptChange lets a recorded fingerprint other than Fingerprint
	// through (Decision.Changed names it) instead of refusing it with a
	// *FingerprintError: the stream evolves its schema, and the caller
	// checks the change.
	AcceptChange bool
	// Stored is the store's checkpoint, nil when the store has none.
	Stored *Checkpoint
	// Kafka is the newest committed control event read from the control
	// topic from Stored.ControlOffset (inclusive), nil when there is none.
	Kafka *ControlState
	// Now stamps a rebuilt checkpoint's CommittedAt.
	Now time.Time
}

// Reconcile decides where a stream resumes (design.md §5 step 5). It is pure:
//
//	store     Kafka                         outcome
//	none      none                          fresh start
//	none      event                         rebuilt from Kafka (commit version 1)
//	cp        none after cp's offset        refused: store ahead (topic deleted/truncated)
//	cp        event at cp's offset, same    in sync
//	cp        event after, higher next seq  repaired from Kafka (commit cp.Version+1)
//	cp        older event / lower next seq  refused: store ahead
//	cp        any other disagreement        refused: diverged
//	any fingerprint != configured           refused: fingerprint changed
//	                                        (unless AcceptChange: Decision.Changed)
func Reconcile(in ReconcileInput) (Decision, error) {
	d, err := reconcile(in)
	if err != nil || !in.AcceptChange {
		return d, err
	}
	switch {
	case in.Stored != nil && in.Stored.Fingerprint != in.Fingerprint:
		d.Changed = in.Stored.Fingerprint
	case in.Kafka != nil && in.Kafka.Fingerprint != in.Fingerprint:
		d.Changed = in.Kafka.Fingerprint
	}
	return d, nil
}

func reconcile(in ReconcileInput) (Decision, error) {
	s, k := in.Stored, in.Kafka
	if s != nil {
		if s.Stream != in.Stream {
			return Decision{Outcome: OutcomeRefusedDiverged}, &ReconcileError{Kind: ErrDiverged, Stream: in.Stream,
				Message: fmt.Sprintf("the store returned the checkpoint of stream %q when asked for stream %q", s.Stream, in.Stream)}
		}
		if s.Fingerprint != in.Fingerprint && !in.AcceptChange {
			return Decision{Outcome: OutcomeRefusedFingerprint},
				&FingerprintError{Stream: in.Stream, Recorded: s.Fingerprint, Current: in.Fingerprint, Where: "checkpoint store"}
		}
	}
	if k != nil && k.Fingerprint != in.Fingerprint && !in.AcceptChange {
		return Decision{Outcome: OutcomeRefusedFingerprint},
			&FingerprintError{Stream: in.Stream, Recorded: k.Fingerprint, Current: in.Fingerprint, Where: "control topic"}
	}
	switch {
	case s == nil && k == nil:
		return Decision{Outcome: OutcomeFresh, Checkpoint: Checkpoint{
			Stream: in.Stream, Fingerprint: in.Fingerprint, ControlOffset: NoOffset,
			Snapshot: reorg.Snapshot{Watermarks: []reorg.Watermark{}}, Batches: []Batch{},
		}}, nil
	case s == nil:
		cp, err := fromKafka(in, k, 1)
		if err != nil {
			return Decision{Outcome: OutcomeRefusedDiverged}, err
		}
		return Decision{Outcome: OutcomeRebuilt, Checkpoint: cp, Commit: true}, nil
	case k == nil:
		if s.ControlOffset == NoOffset && len(s.Snapshot.Watermarks) == 0 {
			return Decision{Outcome: OutcomeInSync, Checkpoint: *s}, nil
		}
		return Decision{Outcome: OutcomeRefusedStoreAhead}, &ReconcileError{Kind: ErrStoreAhead, Stream: in.Stream, Message: fmt.Sprintf(
			"the checkpoint of stream %q (version %d, next sequence %d, cursor %s) records its last control event at offset %d, "+
				"but the control topic has no committed event of the stream at or after that offset: the control topic was deleted, "+
				"truncated or recreated, or its retention removed the events, so Kafka no longer proves what was published. %s",
			in.Stream, s.Version, s.Snapshot.Next, cursorText(s.Cursor()), s.ControlOffset, recoveryText(in.Stream, s.Cursor()))}
	}
	switch {
	case k.Offset == s.ControlOffset && sameState(s, k):
		return Decision{Outcome: OutcomeInSync, Checkpoint: *s}, nil
	case k.Offset > s.ControlOffset && k.Snapshot.Next > s.Snapshot.Next:
		cp, err := fromKafka(in, k, s.Version+1)
		if err != nil {
			return Decision{Outcome: OutcomeRefusedDiverged}, err
		}
		return Decision{Outcome: OutcomeRepaired, Checkpoint: cp, Commit: true}, nil
	case k.Offset < s.ControlOffset && k.Snapshot.Next < s.Snapshot.Next:
		return Decision{Outcome: OutcomeRefusedStoreAhead}, &ReconcileError{Kind: ErrStoreAhead, Stream: in.Stream, Message: fmt.Sprintf(
			"the checkpoint of stream %q (version %d) is at control offset %d, next sequence %d, cursor %s, but the newest committed event "+
				"of the stream in the control topic is older (offset %d, next sequence %d, cursor %s): the control topic was truncated or "+
				"recreated. %s", in.Stream, s.Version, s.ControlOffset, s.Snapshot.Next, cursorText(s.Cursor()),
			k.Offset, k.Snapshot.Next, cursorText(k.Snapshot.Cursor()), recoveryText(in.Stream, s.Cursor()))}
	default:
		return Decision{Outcome: OutcomeRefusedDiverged}, &ReconcileError{Kind: ErrDiverged, Stream: in.Stream, Message: fmt.Sprintf(
			"the checkpoint of stream %q (version %d: control offset %d, next sequence %d, cursor %s) and the newest committed event of the "+
				"stream in the control topic (offset %d, next sequence %d, cursor %s) disagree, and neither is a later state of the other: "+
				"the control topic was probably recreated, or two deployments write the same stream id into it. %s",
			in.Stream, s.Version, s.ControlOffset, s.Snapshot.Next, cursorText(s.Cursor()),
			k.Offset, k.Snapshot.Next, cursorText(k.Snapshot.Cursor()), recoveryText(in.Stream, s.Cursor()))}
	}
}

func recoveryText(stream string, cursor reorg.Cursor) string {
	block := "<block>"
	if len(cursor) == 1 {
		for _, p := range cursor {
			block = fmt.Sprint(p.Number)
		}
	}
	// Not bridge rewind: it reconciles first, and would refuse the same way.
	return fmt.Sprintf("The bridge will not guess. To recover: restore the control topic if it can be restored (stream %s, "+
		"last committed block %s); or start over under a new stream id with new topics", stream, block)
}

func cursorText(c reorg.Cursor) string {
	if len(c) == 0 {
		return "none"
	}
	s := ""
	for i, n := range c.Networks() {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%s@%d(%s)", n, c[n].Number, c[n].Hash)
	}
	return s
}

func fromKafka(in ReconcileInput, k *ControlState, version uint64) (Checkpoint, error) {
	cp := Checkpoint{
		Stream: in.Stream, Version: version, Fingerprint: k.Fingerprint, CommittedAt: in.Now.UTC(),
		ControlOffset: k.Offset,
		Snapshot:      k.Snapshot,
		Batches:       slices.Clone(k.Batches),
		TopicIDs:      maps.Clone(k.TopicIDs),
	}
	cp.Snapshot.Watermarks = slices.Clone(k.Snapshot.Watermarks)
	if cp.Snapshot.Watermarks == nil {
		cp.Snapshot.Watermarks = []reorg.Watermark{}
	}
	if cp.Batches == nil {
		cp.Batches = []Batch{}
	}
	if err := cp.Validate(); err != nil {
		return Checkpoint{}, &ReconcileError{Kind: ErrDiverged, Stream: in.Stream, Message: fmt.Sprintf(
			"the control event of stream %q at offset %d cannot be turned into a checkpoint: %v. "+
				"The event was not written by this bridge version or is corrupt. %s", in.Stream, k.Offset, err, recoveryText(in.Stream, nil))}
	}
	return cp, nil
}

// sameState reports whether the event at the checkpoint's own offset is the
// one the checkpoint recorded: same next sequence and same newest watermark
// (the resume cursor). The older part of the batch log is not compared, so a
// reader need not reproduce it byte for byte to be in sync.
func sameState(s *Checkpoint, k *ControlState) bool {
	sw, kw := s.Snapshot.Watermarks, k.Snapshot.Watermarks
	if s.Snapshot.Next != k.Snapshot.Next || len(sw) == 0 != (len(kw) == 0) {
		return false
	}
	if len(sw) == 0 {
		return true
	}
	a, b := sw[len(sw)-1], kw[len(kw)-1]
	return a.Seq == b.Seq && slices.EqualFunc(a.Ranges, b.Ranges, reorg.BlockRange.Same)
}

// Recover loads the stream's checkpoint, reads the control topic from its
// recorded offset, reconciles the two and commits a repaired or rebuilt
// checkpoint, returning the decision to resume from. A refusal is returned
// as an error together with the decision (for its Outcome). A fingerprint
// other than the recorded one is refused (RecoverEvolving accepts it).
func Recover(ctx context.Context, store Store, reader ControlReader, stream, fingerprint string, now time.Time) (Decision, error) {
	return recoverWith(ctx, store, reader, ReconcileInput{Stream: stream, Fingerprint: fingerprint, Now: now})
}

// RecoverEvolving is Recover for a stream that evolves its schema: a
// recorded fingerprint other than fingerprint is let through and named in
// Decision.Changed, for the caller to check the change before it publishes.
func RecoverEvolving(ctx context.Context, store Store, reader ControlReader, stream, fingerprint string, now time.Time) (Decision, error) {
	return recoverWith(ctx, store, reader, ReconcileInput{Stream: stream, Fingerprint: fingerprint, Now: now, AcceptChange: true})
}

func recoverWith(ctx context.Context, store Store, reader ControlReader, in ReconcileInput) (Decision, error) {
	stream := in.Stream
	from := NoOffset
	cp, err := store.Load(ctx, stream)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Decision{}, fmt.Errorf("reconciling stream %q: %w", stream, err)
	default:
		in.Stored, from = &cp, cp.ControlOffset
	}
	k, err := reader.NewestState(ctx, stream, from)
	if err != nil {
		return Decision{}, fmt.Errorf("offsets: reconciling stream %q: reading the control topic from offset %d: %w", stream, from, err)
	}
	in.Kafka = k
	d, err := Reconcile(in)
	if err != nil {
		return d, err
	}
	if d.Commit {
		if err := store.Commit(ctx, d.Checkpoint); err != nil {
			return d, fmt.Errorf("reconciling stream %q: committing the checkpoint rebuilt from Kafka: %w", stream, err)
		}
	}
	return d, nil
}
