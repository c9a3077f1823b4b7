package offsets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// Partition records the progress of one backfill partition [From, To) of a
// stream (design.md §7), so that an interrupted backfill resumes only the
// partitions that are not Done, each after its Last block.
type Partition struct {
	// Stream is the stream id.
	Stream string `json:"stream"`
	// From is the first block of the partition (inclusive).
	From uint64 `json:"from"`
	// To is the end of the partition (exclusive).
	To uint64 `json:"to"`
	// Done is true once every row of the partition is committed to Kafka.
	Done bool `json:"done"`
	// Last is the last block committed so far, with its hash; nil before the
	// first commit of the partition.
	Last *reorg.Point `json:"last,omitempty"`
	// UpdatedAt is when the record was written (UTC).
	UpdatedAt time.Time `json:"updated_at"`
	// RunStartedAt is when the backfill run that wrote the record started
	// (zero in records of older versions), RunFrom the first block that run
	// published in the partition and Rows the rows it published in it:
	// bridge status derives the run's rate and ETA from them.
	RunStartedAt time.Time `json:"run_started_at,omitzero"`
	RunFrom      uint64    `json:"run_from,omitempty"`
	Rows         uint64    `json:"rows,omitempty"`
}

// maxBlock bounds partition ends so that progress values stay exact as Lua
// numbers (doubles) in the Redis script.
const maxBlock = 1 << 53

// Key returns the partition's key within its stream: "from-to".
func (p Partition) Key() string { return fmt.Sprintf("%d-%d", p.From, p.To) }

// progress orders records of one partition: a record may replace a stored
// one only when its progress is not lower. Done is the highest.
func (p Partition) progress() uint64 {
	switch {
	case p.Done:
		return p.To + 1
	case p.Last != nil:
		return p.Last.Number + 1
	default:
		return 0
	}
}

// Validate checks the record and returns a *ValidationError naming every
// problem.
func (p Partition) Validate() error {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if err := ValidateStream(p.Stream); err != nil {
		add("stream id %q is not valid (want [a-z0-9_.-]+)", p.Stream)
	}
	if p.From >= p.To {
		add("partition [%d, %d) is empty; want from < to", p.From, p.To)
	}
	if p.To > maxBlock {
		add("partition end %d is beyond 2^53, which the stores cannot order exactly", p.To)
	}
	if p.Last != nil && (p.Last.Number < p.From || p.Last.Number >= p.To) {
		add("last block %d is outside the partition [%d, %d)", p.Last.Number, p.From, p.To)
	}
	if p.UpdatedAt.IsZero() {
		add("updated_at is not set")
	}
	if len(probs) == 0 {
		return nil
	}
	return &ValidationError{What: fmt.Sprintf("backfill partition %s of stream %q", p.Key(), p.Stream), Problems: probs}
}

func marshalPartition(p Partition) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.UpdatedAt = p.UpdatedAt.UTC()
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("offsets: encoding backfill partition %s: %w", p.Key(), err)
	}
	return b, nil
}

func unmarshalPartition(b []byte) (Partition, error) {
	var p Partition
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Partition{}, fmt.Errorf("offsets: decoding backfill partition: %w", err)
	}
	if err := p.Validate(); err != nil {
		return Partition{}, err
	}
	return p, nil
}

func regressedError(stored, next Partition, where string) error {
	return fmt.Errorf("%w: partition %s of stream %q at %s is stored with progress %s, the new record has %s; "+
		"another backfill worker is writing this partition (stop it), or this worker is stale",
		ErrPartitionRegressed, next.Key(), next.Stream, where, describeProgress(stored), describeProgress(next))
}

func describeProgress(p Partition) string {
	switch {
	case p.Done:
		return "done"
	case p.Last != nil:
		return fmt.Sprintf("up to block %d", p.Last.Number)
	default:
		return "not started"
	}
}
