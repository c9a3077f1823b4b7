package sink

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors callers branch on with errors.Is. Every error the
// transaction API returns wraps exactly one of ErrFenced, ErrUnknownOutcome,
// ErrAborted or ErrDeliveryFailed (or a context/usage error), so the run loop
// can map it to one outcome (style H10).
var (
	// ErrFenced means another producer with the same transactional id took
	// over (ProducerFenced, InvalidProducerEpoch) or the producer lost the
	// right to use its transactional id (TransactionalIDAuthorizationFailed,
	// ClusterAuthorizationFailed). The Producer is unusable; the process
	// must stop and exit non-zero: a second bridge instance is running the
	// same stream, or its credentials changed.
	ErrFenced = errors.New("producer fenced: another instance owns this transactional id")

	// ErrUnknownOutcome means EndTransaction(commit) failed in a way that
	// leaves the outcome unknown (transport error, timeout, UNKNOWN_SERVER_ERROR):
	// the transaction may or may not be committed. It is also returned when
	// the producer itself is in a state it cannot leave (an abort that could
	// not be confirmed, a producer id kgo cannot recover). The Producer is
	// unusable; the caller must close it, restart, and re-derive its state
	// from Kafka (the control topic) before producing again.
	ErrUnknownOutcome = errors.New("transaction outcome unknown: restart and reconcile with the control topic")

	// ErrAborted means the transaction was aborted and nothing it produced
	// is visible to read_committed consumers. The Producer stays usable: the
	// caller retries from its last checkpoint.
	ErrAborted = errors.New("transaction aborted")

	// ErrDeliveryFailed is the at-least-once counterpart of ErrAborted: some
	// records of the failed unit may already be visible. The caller replays
	// from its last checkpoint, and consumers see duplicates.
	ErrDeliveryFailed = errors.New("delivery failed (at-least-once: records may be partially visible)")

	// ErrClosed is returned by every call on a closed Producer or Reader.
	ErrClosed = errors.New("sink closed")

	// ErrTopicInvalid is wrapped by every *TopicError.
	ErrTopicInvalid = errors.New("topic invalid")

	// ErrRecordsMissing is wrapped by every *MissingRecordsError.
	ErrRecordsMissing = errors.New("records missing from kafka")
)

// TopicError says which topic is misconfigured, what is wrong and how to
// fix it. It wraps ErrTopicInvalid.
type TopicError struct {
	Topic   string
	Problem string
	Fix     string
}

// Error names the topic, the problem and the fix.
func (e *TopicError) Error() string {
	return fmt.Sprintf("topic %q: %s; fix: %s", e.Topic, e.Problem, e.Fix)
}

// Unwrap returns ErrTopicInvalid.
func (e *TopicError) Unwrap() error { return ErrTopicInvalid }

// MissingRecordsError reports offsets of a span that Kafka no longer (or
// never) held. It wraps ErrRecordsMissing.
type MissingRecordsError struct {
	Span Span
	// LogStart is the partition's log start offset when it was read (-1 if
	// unknown); records below it were deleted by retention or DeleteRecords.
	LogStart int64
	// End is the partition's end offset (high watermark) when it was
	// read (-1 if unknown); a span at or past it was never written.
	End int64
	// Missing counts offsets of the span no record was returned for.
	Missing int64
	// Reason is a human explanation.
	Reason string
}

// Error names the span, how many records are missing and why.
func (e *MissingRecordsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reading back %s: %d of %d records missing (log start %d, end %d): %s",
		e.Span, e.Missing, e.Span.Last-e.Span.First+1, e.LogStart, e.End, e.Reason)
	return b.String()
}

// Unwrap returns ErrRecordsMissing.
func (e *MissingRecordsError) Unwrap() error { return ErrRecordsMissing }
