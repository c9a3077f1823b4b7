// Package reorg is the pure core of the bridge: block ranges, resume cursors,
// batch ids, range validation, reorg detection and the transactional state
// machine that turns Amp's positional reorg signal into Data, Undo and
// Watermark events with sequence numbers.
//
// The package performs no I/O and imports only the standard library, so it can
// be fuzzed and property-tested without a server. Every other stage of the
// bridge speaks its vocabulary: [BlockRange], [Cursor], [BatchID].
//
// The rules follow amp-protocol.md §5 (the official Rust client) with the Go
// deviations that document recommends: a fork point inside an already
// committed multi-block microbatch is recovered instead of failing for good,
// watermarks with no ranges are never buffered, and a replayed range equal to
// the last committed watermark is detected.
//
// # Validation and detection
//
// [Validate] applies amp-protocol.md §5.1 steps 1–3 (prev_hash at and after
// genesis, network set, gaps, consecutive hashes, reorg hashes) and returns a
// [*ValidationError] naming the network, blocks and hashes. [Detect] applies
// the one correct reorg rule, incoming != previous && incoming.start <=
// previous.end, and invalidates [incoming.start, max(ends)] per network.
// Ranges are compared with [BlockRange.Same], which ignores Timestamp.
//
// # The machine
//
// [New] takes a [Config] and the last committed [Snapshot] (the zero value on
// a fresh stream); the source connects with Snapshot.Cursor(). Each envelope
// of the stream goes through [Machine.Apply] (ranges, ranges_complete, row
// count), whose events come in this order:
//
//  1. on the first call after New or Rollback, an Undo with [CauseRewind] when
//     the snapshot's Next lies beyond the event after its last watermark
//     (also available up front from [Machine.Start]);
//  2. an Undo with [CauseReorg] when the envelope reveals a reorg;
//  3. a Data event when the envelope has rows (keep-alives emit nothing);
//  4. a Watermark when the envelope completes its ranges (after its Data, if a
//     completion batch carries rows, which the real server never does).
//
// Every event has a sequence number one above the previous. Data and
// Watermark carry the ranges and their [BatchID] (the Kafka key). A
// Watermark's Prune says which older watermarks left retention.
//
// An envelope whose ranges equal the newest watermark's after that watermark
// completed is a replay (amp-protocol.md §8.6 F4: the real server never sends
// one, it resumes at cursor+1): it emits nothing, so its rows are not
// duplicated and the watermark is not repeated; [Machine.Replays] counts
// them. Envelopes with no ranges (a query whose tables are not synced) emit
// Data for their rows but never a Watermark: a watermark without ranges would
// give the empty cursor {}, which fails a streaming query.
//
// # Commit, persistence and rollback
//
// The run loop writes Data rows into the open Kafka transaction, closes the
// transaction only at a Watermark, then calls [Machine.Commit] with that
// watermark's Seq and persists [Machine.Snapshot] (the part of the
// checkpoint this package owns). Commit moves the watermarks, prunes and
// truncations of the events up to Seq into the committed snapshot and sets
// its Next to Seq+1; nothing else changes the snapshot.
//
// Sequence numbers: the Rust client persists next before emitting every
// event. Here Kafka transactions make uncommitted events invisible, so
// persisting Next with each commit is sufficient: after a crash or a
// Rollback, numbers above the committed Next are allocated again, and the
// events that held them were never visible. A consumer without transactions
// can keep the Rust semantics by persisting [Machine.Next] after every Apply
// and restoring Snapshot{Next: persisted, Watermarks: committed ones}: the
// restarted machine then starts with the Undo(Rewind) covering everything
// after the last committed watermark. A Rewind never lists anything to
// retract, because everything it covers is after the last committed
// watermark. Committing a seq that is not a watermark is allowed (Rust commit
// handles) but the bridge never does it: the retraction data of
// [Event.Retract] is per watermark.
//
// [Machine.Rollback] forgets everything not committed, exactly as a restart
// from Snapshot() would: the caller aborted its transaction and reconnects
// the source with Snapshot().Cursor(); [Machine.Previous] becomes the newest
// committed watermark's ranges.
//
// # Handling an Undo
//
// An Undo invalidates every event numbered First..=Last. For the run loop:
//
//   - Replay: the open transaction also holds uncommitted events that are
//     still valid, which an abort would lose. Abort the transaction, call
//     Rollback, reconnect from Snapshot().Cursor() and drop the rest of this
//     Apply's events and any [*ReconnectError]. The server then replays from
//     the committed cursor and the reorg, if it reaches committed batches, is
//     detected again against it.
//   - Abort (without Replay): every uncommitted event is invalidated. Abort
//     the open transaction and continue in a new one.
//   - Retract: the committed watermarks among First..=Last, oldest first.
//     Their microbatches are visible in Kafka: write retractions (and
//     tombstones) for each, keyed by its BatchID, in the current transaction
//     before any replacement rows. After an abort, Retract also repeats
//     retractions that an earlier, aborted Undo had written.
//
// # Partial reorgs (the Rust client's Partial error)
//
// Recovery picks the newest retained watermark all of whose ranges on the
// reorged networks end before the fork point, and invalidates every event
// after it. When the incoming ranges start right after that watermark, the
// stream simply continues. Otherwise the fork lies inside an already
// completed microbatch (amp-protocol.md §8.3 C20, the real server's shape
// A15), or the blocks between the watermark and the fork would never be sent
// again: Apply then drops the envelope, returns the Undo together with a
// [*ReconnectError] whose Cursor is that watermark's (nil: restart from the
// earliest block), and makes that watermark's ranges the previous ones. The
// caller handles the events, cancels the DoGet and reconnects with the
// cursor; the server replays from the block after it, which validates as
// consecutive. With the bridge's commit discipline the cursor is always a
// committed watermark unless the Undo says Replay.
//
// # Retention
//
// Retention is in blocks ([Config.Retention], default 128): once a watermark
// is emitted, the oldest watermarks all of whose ranges end more than
// Retention blocks before its start are pruned, except the newest of them,
// which stays as the recovery point of a fork at that depth
// (amp-protocol.md §5.2, whose Rust client prunes it too; pruning applies at
// once to the working state and reaches the snapshot at the commit). So a
// reorg whose fork point is at most Retention blocks below the newest
// watermark's start is always recoverable, even when one long microbatch (a
// catch-up after an outage) spans most of the window. A reorg whose fork point lies below every retained watermark,
// after some were pruned (or the snapshot is marked Incomplete), returns a
// [*UnrecoverableError] wrapping [ErrUnrecoverable] and leaves the state
// unchanged: the stream must stop, and `bridge rewind --stream S --to-block
// N` or a new stream id recovers it. While nothing was pruned the whole
// history is known, so such a reorg undoes everything and restarts from the
// earliest block instead.
//
// Errors: a [*ValidationError] (wrapping [ErrInvalidRanges]) and a
// [*UnrecoverableError] leave the machine unchanged; a [*ReconnectError]
// (wrapping [ErrReconnect]) comes with events that must be handled.
//
// The machine is deterministic: its state depends only on its Config, the
// snapshot and the calls made. It is not safe for concurrent use. FuzzMachine
// checks its invariants: it never panics, every invalidation covers the
// overlapping ranges, the committed watermark never goes backwards except
// through a committed Undo, and every snapshot it produces restarts a machine.
package reorg
