package offsets

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// FormatVersion is the newest encoding version Marshal writes; Unmarshal
// accepts it and every earlier one. Any change to the encoded form,
// including one in reorg.Snapshot or reorg.BlockRange JSON, needs a new
// version (the golden tests fail first).
//
//   - 1: the first.
//   - 2: batches may carry the registry schema id they were written with
//     (Batch.SchemaID). Marshal writes format 1 while no batch has one (a
//     stream without a registry), so a bridge that reads only format 1
//     still loads it; a format-2 checkpoint is refused by such a bridge
//     with ErrUnsupportedFormat ("upgrade this bridge").
const FormatVersion = 2

// formatV1 is the encoding without batch schema ids.
const formatV1 = 1

// NoOffset is the ControlOffset of a checkpoint that has recorded no control
// event yet.
const NoOffset int64 = -1

// ValidateStream checks a stream id against design.md §3: [a-z0-9_.-]+.
func ValidateStream(stream string) error {
	ok := stream != ""
	for i := 0; ok && i < len(stream); i++ {
		c := stream[i]
		ok = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return fmt.Errorf("offsets: stream id %q is not valid: use one or more of a-z, 0-9, '_', '.' and '-'", stream)
	}
	return nil
}

// Span is the Kafka offsets of a batch's records on one data-topic
// partition: First..=Last. A batch keyed by batch id has one span; in row-key
// mode its records may land on several partitions, one span each.
type Span struct {
	// Topic is the data topic.
	Topic string `json:"topic"`
	// Partition is the partition number.
	Partition int32 `json:"partition"`
	// First is the offset of the batch's first record on the partition.
	First int64 `json:"first"`
	// Last is the offset of its last record (inclusive).
	Last int64 `json:"last"`
}

// Batch is one retained, committed data batch in the checkpoint's log. The
// spans are where a retraction reads the original rows back from
// (design.md §5 step 8).
type Batch struct {
	// Seq is the sequence number of the Watermark event that completed the
	// batch: the batch log is keyed like the snapshot's retained
	// watermarks, so a reorg's Undo (which lists watermarks) finds the
	// spans to read back.
	Seq uint64 `json:"seq"`
	// ID is reorg.BatchID(Ranges), the Kafka key of its records.
	ID string `json:"id"`
	// Ranges are the batch's block ranges, one per network.
	Ranges []reorg.BlockRange `json:"ranges"`
	// Spans are the data-topic offsets of its records, empty when it had
	// no rows.
	Spans []Span `json:"spans"`
	// SchemaID is the registry id of the value schema the batch's rows were
	// written with (format 2); 0 when unknown: no registry (single-object
	// framing names the schema in each record), a checkpoint written before
	// the field, or a batch rebuilt from a control event that carries no
	// checkpoint copy. A retraction reads the id from each record's header
	// either way; the stream loads these schemas at start so a retraction
	// across a schema change needs no registry lookup mid-transaction.
	SchemaID int `json:"schema_id,omitempty"`
}

// Checkpoint is the durable state of one stream (design.md §5 step 4),
// written after every Kafka commit and reconciled with the control topic on
// start.
type Checkpoint struct {
	// Stream is the stream id.
	Stream string `json:"stream"`
	// Version increases by one with every commit; the stores accept a
	// commit only when they hold Version-1 (0 = nothing stored), which
	// fences stale and zombie writers.
	Version uint64 `json:"version"`
	// Fingerprint identifies the stream's SQL and Arrow schema; the caller
	// computes it, Reconcile compares it.
	Fingerprint string `json:"fingerprint"`
	// CommittedAt is when the checkpoint was committed (UTC, written with
	// nanoseconds).
	CommittedAt time.Time `json:"committed_at"`
	// ControlOffset is the control-topic offset of the stream's last
	// control event (watermark, or undo when the last transaction only
	// retracted); NoOffset before the first.
	ControlOffset int64 `json:"control_offset"`
	// Snapshot is the reorg state machine's state: next sequence and the
	// retained watermarks; its newest watermark is the resume cursor.
	Snapshot reorg.Snapshot `json:"snapshot"`
	// Batches is the retained batch log, oldest first.
	Batches []Batch `json:"batches"`
	// TopicIDs maps the stream's data topic to its Kafka topic id (as
	// kafka-topics.sh prints it) when the checkpoint was committed, so that
	// a topic deleted and recreated under the stream is told from the one
	// its spans point into. Optional: checkpoints written before it, or by
	// a broker without topic ids, have none (omitted when empty, so their
	// encoding is unchanged; a bridge older than the field refuses a
	// checkpoint that has it, as it refuses any unknown field).
	TopicIDs map[string]string `json:"topic_ids,omitempty"`
}

// formatOf is the format Marshal writes cp in: the oldest that holds it.
func formatOf(cp Checkpoint) int {
	for _, b := range cp.Batches {
		if b.SchemaID != 0 {
			return FormatVersion
		}
	}
	return formatV1
}

// Cursor returns the resume cursor: the ranges of the newest retained
// watermark, nil when there is none.
func (c Checkpoint) Cursor() reorg.Cursor { return c.Snapshot.Cursor() }

// encoded is the wire form: the format version first, then the checkpoint.
type encoded struct {
	Format int `json:"format"`
	Checkpoint
}

// Marshal validates cp and encodes it in the oldest format that holds it
// (formatOf; FormatVersion when a batch has a schema id): compact JSON with
// a "format" field first. The encoding is deterministic (CommittedAt is
// written in UTC) so it can be compared byte for byte.
func Marshal(cp Checkpoint) ([]byte, error) {
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	cp.CommittedAt = cp.CommittedAt.UTC()
	if y := cp.CommittedAt.Year(); y < 1 || y > 9999 {
		return nil, fmt.Errorf("offsets: encoding checkpoint of stream %q: committed_at %s is outside years 1-9999", cp.Stream, cp.CommittedAt)
	}
	return appendCheckpoint(make([]byte, 0, 512+len(cp.Batches)*640), cp), nil
}

// Unmarshal decodes bytes written by Marshal strictly (unknown fields are
// an error) and validates the result.
func Unmarshal(b []byte) (Checkpoint, error) {
	var probe struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Checkpoint{}, fmt.Errorf("offsets: decoding checkpoint: %w", err)
	}
	switch {
	case probe.Format == nil:
		return Checkpoint{}, fmt.Errorf("offsets: decoding checkpoint: no \"format\" field; these bytes were not written by offsets.Marshal")
	case *probe.Format < formatV1 || *probe.Format > FormatVersion:
		return Checkpoint{}, fmt.Errorf("%w: format %d, this build reads formats %d to %d; a newer bridge wrote it: upgrade this bridge",
			ErrUnsupportedFormat, *probe.Format, formatV1, FormatVersion)
	}
	var e encoded
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Checkpoint{}, fmt.Errorf("offsets: decoding checkpoint: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Checkpoint{}, err
	}
	if e.Format != formatOf(e.Checkpoint) {
		return Checkpoint{}, fmt.Errorf("offsets: decoding checkpoint of stream %q: format %d, but its content is format %d's (schema ids in batches are format 2's): %w",
			e.Stream, e.Format, formatOf(e.Checkpoint), ErrInvalid)
	}
	return e.Checkpoint, nil
}

// ControlStateOf decodes a checkpoint written by Marshal into a control
// event (the copy of the checkpoint that travels inside the Kafka
// transaction) as the ControlState of the event read at offset. The copy's
// version, control offset and commit time are ignored: the store assigns the
// version, and the offset is where the event was read.
func ControlStateOf(b []byte, offset int64) (*ControlState, error) {
	cp, err := Unmarshal(b)
	if err != nil {
		return nil, fmt.Errorf("decoding the checkpoint in the control event at offset %d: %w", offset, err)
	}
	return &ControlState{Offset: offset, Fingerprint: cp.Fingerprint, Snapshot: cp.Snapshot, Batches: cp.Batches, TopicIDs: cp.TopicIDs}, nil
}

// Validate checks the checkpoint's internal consistency and returns a
// *ValidationError naming every problem found.
func (c Checkpoint) Validate() error {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if err := ValidateStream(c.Stream); err != nil {
		add("stream id %q is not valid (want [a-z0-9_.-]+)", c.Stream)
	}
	if c.Version == 0 {
		add("version is 0; the first committed version is 1")
	}
	if c.Fingerprint == "" {
		add("fingerprint is empty; set it to the fingerprint of the stream's SQL and Arrow schema")
	}
	if c.CommittedAt.IsZero() {
		add("committed_at is not set")
	}
	wms := c.Snapshot.Watermarks
	if c.ControlOffset < NoOffset {
		add("control_offset %d is negative (use %d for none)", c.ControlOffset, NoOffset)
	}
	for i, w := range wms {
		if i > 0 && w.Seq <= wms[i-1].Seq {
			add("watermark %d has sequence %d, not after the previous one's %d; watermarks must be oldest first", i, w.Seq, wms[i-1].Seq)
		}
		if w.Seq >= c.Snapshot.Next {
			add("watermark %d has sequence %d but the next sequence is %d; it must be below", i, w.Seq, c.Snapshot.Next)
		}
		if len(w.Ranges) == 0 {
			add("watermark %d (sequence %d) has no ranges", i, w.Seq)
		}
		if msg := checkRanges(w.Ranges); msg != "" {
			add("watermark %d (sequence %d) %s", i, w.Seq, msg)
		}
	}
	if len(p) == 0 {
		// reorg's own rules for its snapshot (e.g. every watermark covers
		// the same networks), after the checks above that name every problem.
		if err := c.Snapshot.Validate(); err != nil {
			add("snapshot: %v", err)
		}
	}
	for i, b := range c.Batches {
		// The name is built only for a problem: Validate runs on every commit.
		name := func() string { return fmt.Sprintf("batch %d (sequence %d, id %s)", i, b.Seq, b.ID) }
		if i > 0 && b.Seq <= c.Batches[i-1].Seq {
			add("%s is not after the previous batch's sequence %d; the batch log must be oldest first", name(), c.Batches[i-1].Seq)
		}
		if len(wms) == 0 {
			add("%s is in the log but the snapshot has no committed watermark; only committed batches belong in a checkpoint", name())
		} else if w, ok := findWatermark(wms, b.Seq); !ok {
			add("%s has no retained watermark with its sequence; only committed, retained batches belong in the log", name())
		} else if reorg.BatchID(w.Ranges) != b.ID {
			add("%s differs from the ranges of watermark %d, whose batch id is %s", name(), w.Seq, reorg.BatchID(w.Ranges))
		}
		if len(b.Ranges) == 0 {
			add("%s has no ranges", name())
		} else if want := reorg.BatchID(b.Ranges); b.ID != want {
			add("%s does not match its ranges, whose batch id is %s", name(), want)
		}
		if msg := checkRanges(b.Ranges); msg != "" {
			add("%s %s", name(), msg)
		}
		if b.SchemaID < 0 {
			add("%s has schema id %d; want a registry id (positive) or 0 for none", name(), b.SchemaID)
		}
		for j, s := range b.Spans {
			switch {
			case s.Topic == "":
				add("%s span %d has no topic", name(), j)
			case s.Partition < 0:
				add("%s span %d has negative partition %d", name(), j, s.Partition)
			case s.First < 0 || s.Last < s.First:
				add("%s span %d on %s/%d has offsets %d..%d; want 0 <= first <= last", name(), j, s.Topic, s.Partition, s.First, s.Last)
			}
		}
	}
	for topic, id := range c.TopicIDs {
		if topic == "" || id == "" {
			add("topic_ids maps %q to %q; want a topic name and its id", topic, id)
		}
	}
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{What: fmt.Sprintf("checkpoint of stream %q version %d", c.Stream, c.Version), Problems: p}
}

// checkRanges returns what is wrong with a batch's ranges ("has ..."), or "".
func checkRanges(rs []reorg.BlockRange) string {
	for i, r := range rs {
		switch {
		case r.Network == "":
			return "has a range with an empty network"
		case r.Start > r.End:
			return fmt.Sprintf("has range %s whose start is after its end", r)
		}
		for _, q := range rs[:i] {
			if q.Network == r.Network {
				return fmt.Sprintf("has two ranges for network %q", r.Network)
			}
		}
	}
	return ""
}

// findWatermark finds the retained watermark with sequence seq (wms is
// sorted by sequence).
func findWatermark(wms []reorg.Watermark, seq uint64) (reorg.Watermark, bool) {
	i, ok := slices.BinarySearchFunc(wms, seq, func(w reorg.Watermark, s uint64) int { return cmp.Compare(w.Seq, s) })
	if !ok {
		return reorg.Watermark{}, false
	}
	return wms[i], true
}
