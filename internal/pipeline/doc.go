// Package pipeline runs the bridge's streams: the per-stream supervisor
// and run loop (Stream.Run), which reads Amp through source, detects
// reorgs with reorg, encodes with encode and publishes with sink in Kafka
// transactions closed at watermarks, with the checkpoint in offsets; the
// retractions of what a reorg replaced; the backfill of a new stream's
// history and its hand-over to the live stream; a new stream's start
// position and one-shot loads (start.go); and the one commit path
// (commitWith) all of them use. The operator commands of internal/ops are
// built on its exported API (Stream.Open, Stream.Rewind, SyncedHeads).
package pipeline
