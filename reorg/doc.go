// Package reorg is the pure core of the bridge: block ranges, resume cursors,
// batch ids, range validation, reorg detection and the transactional state
// machine that turns Amp's positional reorg signal into Data, Undo and
// Watermark events with persisted sequence numbers.
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
package reorg
