package offsets

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on with errors.Is.
var (
	// ErrNotFound means the store holds no checkpoint for the stream: the
	// stream has never committed, or its state was deleted.
	ErrNotFound = errors.New("offsets: no checkpoint stored for the stream")
	// ErrFenced means a commit was refused because the stored version is not
	// the one this writer expected; the error is a *StaleError.
	ErrFenced = errors.New("offsets: checkpoint commit fenced")
	// ErrInvalid means a checkpoint or partition record is inconsistent; the
	// error is a *ValidationError naming every problem.
	ErrInvalid = errors.New("offsets: invalid checkpoint")
	// ErrMalformedEvent means a control-topic record is not a control event
	// this build can decode: bad framing, an unknown schema fingerprint or
	// bad Avro data.
	ErrMalformedEvent = errors.New("offsets: malformed control event")
	// ErrUnsupportedFormat means the stored bytes were written in a format
	// this build does not know (a newer bridge wrote them).
	ErrUnsupportedFormat = errors.New("offsets: unsupported checkpoint format")
	// ErrPartitionRegressed means a backfill partition record would move
	// backwards (a zombie backfill worker); the stored record is kept.
	ErrPartitionRegressed = errors.New("offsets: backfill partition progress would move backwards")
	// ErrStoreAhead means the store's checkpoint is ahead of what Kafka's
	// control topic proves was published; the error is a *ReconcileError.
	ErrStoreAhead = errors.New("offsets: checkpoint store is ahead of Kafka")
	// ErrDiverged means the store and the control topic disagree in a way
	// neither can be ahead of the other (e.g. a recreated topic); the error
	// is a *ReconcileError.
	ErrDiverged = errors.New("offsets: checkpoint store and Kafka diverged")
	// ErrControlTruncated means the control topic no longer holds an event
	// the stream's state is rebuilt from (the full checkpoint copy a
	// watermark refers to): retention or DeleteRecords deleted it, or the
	// topic was rewritten.
	ErrControlTruncated = errors.New("offsets: the control topic no longer holds the events the stream's state is rebuilt from")
	// ErrFingerprintChanged means the stream's SQL or Arrow schema changed
	// under the same stream id; the error is a *FingerprintError.
	ErrFingerprintChanged = errors.New("offsets: stream SQL or schema changed under the same stream id")
)

// StaleError is returned by Store.Commit when the stored version is not
// Version-1 of the checkpoint being committed. It matches ErrFenced.
type StaleError struct {
	// Stream is the stream id.
	Stream string
	// Expected is the version this writer expected to find stored
	// (its checkpoint's Version minus one; 0 means "none").
	Expected uint64
	// Stored is the version found in the store (0 means none is stored).
	Stored uint64
	// Where names the store location (Redis key or file path).
	Where string
}

// Error says which versions were seen, what that means and what to do.
func (e *StaleError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "offsets: commit of checkpoint version %d for stream %q refused at %s: this writer expected stored version %d but ",
		e.Expected+1, e.Stream, e.Where, e.Expected)
	switch {
	case e.Stored > e.Expected:
		fmt.Fprintf(&b, "the store holds version %d. Another instance of stream %q is running, or this one was superseded "+
			"by a newer instance: stop this instance (its Kafka transactional id is fenced too); the newest instance owns the stream", e.Stored, e.Stream)
	case e.Stored == 0:
		b.WriteString("the store holds no checkpoint. The checkpoint was deleted or the store lost data " +
			"(flushed, or failed over to a replica without it): restart the stream so it reconciles with Kafka's control topic")
	default:
		fmt.Fprintf(&b, "the store holds the older version %d. The store lost acknowledged writes "+
			"(failover to a lagging replica, or a restore from backup): restart the stream so it reconciles with Kafka's control topic", e.Stored)
	}
	return b.String()
}

// Is reports whether target is ErrFenced.
func (e *StaleError) Is(target error) bool { return target == ErrFenced }

// ValidationError lists everything inconsistent in a checkpoint or a
// backfill partition record. It matches ErrInvalid.
type ValidationError struct {
	// What names the record: "checkpoint of stream \"s\"", a key or a file.
	What string
	// Problems are the individual inconsistencies, each a full sentence.
	Problems []string
}

// Error joins the problems.
func (e *ValidationError) Error() string {
	return fmt.Sprintf("offsets: invalid %s: %s", e.What, strings.Join(e.Problems, "; "))
}

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ReconcileError is a refusal of Reconcile: the store and Kafka's control
// topic cannot be reconciled automatically. It matches ErrStoreAhead or
// ErrDiverged (see Kind).
type ReconcileError struct {
	// Kind is ErrStoreAhead or ErrDiverged.
	Kind error
	// Stream is the stream id.
	Stream string
	// Message says what was found and how to recover.
	Message string
}

// Error returns the message.
func (e *ReconcileError) Error() string { return "offsets: " + e.Message }

// Is reports whether target is the error's Kind.
func (e *ReconcileError) Is(target error) bool { return target == e.Kind }

// FingerprintError is a refusal to start a stream whose SQL or Arrow schema
// fingerprint differs from the one recorded. It matches
// ErrFingerprintChanged.
type FingerprintError struct {
	// Stream is the stream id.
	Stream string
	// Recorded is the fingerprint stored with the stream's state.
	Recorded string
	// Current is the fingerprint of the configured SQL and schema.
	Current string
	// Where names where the recorded one came from ("checkpoint store" or
	// "control topic").
	Where string
}

// Error says what changed and the two ways forward.
func (e *FingerprintError) Error() string {
	return fmt.Sprintf("offsets: stream %q was published with SQL/schema fingerprint %q (recorded in the %s) but is now configured with %q: "+
		"the query or its Arrow schema changed under the same stream id, and continuing would mix two different result sets in one topic. "+
		"Either restore the previous SQL (or the Amp dataset version it reads), or give the changed query a new stream id "+
		"and its own topic (streams[].id, streams[].topic): the old stream's topic keeps what it published; or, to evolve the schema "+
		"under the stream id, set streams[].schema_evolution to backward or full (a change the value subject's registered versions "+
		"accept then goes on, on the same topic, from the checkpoint)", e.Stream, e.Recorded, e.Where, e.Current)
}

// Is reports whether target is ErrFingerprintChanged.
func (e *FingerprintError) Is(target error) bool { return target == ErrFingerprintChanged }
