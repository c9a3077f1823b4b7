package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// A data topic deleted or recreated under a stream that has committed to it
// loses the records the checkpoint's spans point at: reorgs can no longer
// be retracted and the topic no longer holds what the stream published. The
// stream detects it and stops with a *sink.DataTopicLostError (permanent):
//
//   - at start (setupTopic): the topic must exist, with the id the
//     checkpoint recorded and end offsets at or past the committed spans;
//     only a stream with no committed records to it creates it;
//   - at every commit, for free: a record of the transaction written below
//     the partition's known end means the partition started over
//     (checkSpans);
//   - every FullEvery-th commit, one metadata request: the topic id
//     (checkTopicID);
//   - when a retraction's read-back finds records missing (lostRecords).

// committedEnds returns, per partition of topic, the offset after the last
// record the checkpoint's retained batches committed to it.
func (r *Stream) committedEnds(topic string) map[int32]int64 {
	var ends map[int32]int64
	for _, b := range r.committed.Batches {
		for _, sp := range b.Spans {
			if sp.Topic != topic {
				continue
			}
			if ends == nil {
				ends = map[int32]int64{}
			}
			ends[sp.Partition] = max(ends[sp.Partition], sp.Last+1)
		}
	}
	return ends
}

// dataTopicSpec sets what the stream recorded of topic on spec: a stream
// that committed records to it (or recorded its id) must find it, the same.
func (r *Stream) dataTopicSpec(spec sink.TopicSpec) sink.TopicSpec {
	spec.ExpectedID = r.committed.TopicIDs[spec.Name]
	spec.CommittedEnd = r.committedEnds(spec.Name)
	spec.MustExist = spec.ExpectedID != "" || len(spec.CommittedEnd) > 0
	return spec
}

// useDataTopic records the data topic's id and known ends after setupTopic
// checked it.
func (r *Stream) useDataTopic(st sink.TopicState, spec sink.TopicSpec) {
	r.topicID = st.ID
	r.topicEnd = maps.Clone(spec.CommittedEnd)
	if r.topicEnd == nil {
		r.topicEnd = map[int32]int64{}
	}
}

// topicIDs is the checkpoint's record of the data topic's id.
func (r *Stream) topicIDs() map[string]string {
	if r.topic == "" || r.topicID == "" {
		return maps.Clone(r.committed.TopicIDs)
	}
	return map[string]string{r.topic: r.topicID}
}

// checkSpans checks the data records of a transaction about to commit: a
// record below the end its partition had already reached was written to a
// partition that started over, a topic recreated under the running stream.
// It returns the spans' new ends, for noteSpans after the commit.
func (r *Stream) checkSpans(flushed sink.Committed) (map[int32]int64, error) {
	next := map[int32]int64{}
	for _, g := range flushed.Groups {
		for _, sp := range g.Spans {
			if sp.Topic != r.topic {
				continue
			}
			if end := r.topicEnd[sp.Partition]; sp.First < end {
				return nil, &sink.DataTopicLostError{Topic: r.topic, RecordedID: r.topicID, Partition: sp.Partition, End: sp.First, Committed: end}
			}
			next[sp.Partition] = max(next[sp.Partition], sp.Last+1)
		}
	}
	return next, nil
}

// noteSpans records the ends checkSpans returned once their transaction
// committed.
func (r *Stream) noteSpans(next map[int32]int64) {
	if r.topicEnd == nil {
		r.topicEnd = map[int32]int64{}
	}
	for p, end := range next {
		r.topicEnd[p] = max(r.topicEnd[p], end)
	}
}

// checkTopicID compares the data topic's id now with the one it had at
// start. A look-up that fails for another reason does not stop the commit
// (the next one looks again).
func (r *Stream) checkTopicID(ctx context.Context) error {
	if r.topic == "" {
		return nil
	}
	id, err := r.deps.Admin.TopicID(ctx, r.topic)
	var lost *sink.DataTopicLostError
	if errors.As(err, &lost) {
		lost.RecordedID = r.topicID
		return lost
	}
	if err != nil {
		r.log.Warn("looking up the data topic's id", "topic", r.topic, "err", err)
		return nil
	}
	if r.topicID != "" && id != "" && id != r.topicID {
		return &sink.DataTopicLostError{Topic: r.topic, RecordedID: r.topicID, ID: id}
	}
	return nil
}

// lostRecords turns a read-back's missing records into the stream's
// permanent error: the records the checkpoint points at are gone, whether
// the topic was deleted, recreated or cut by retention.
func (r *Stream) lostRecords(ctx context.Context, err error) error {
	var mr *sink.MissingRecordsError
	if !errors.As(err, &mr) {
		return err
	}
	lost := &sink.DataTopicLostError{Topic: mr.Span.Topic, Cause: err}
	if mr.Span.Topic == r.topic {
		lost.RecordedID = r.topicID
		if id, ierr := r.deps.Admin.TopicID(ctx, r.topic); ierr != nil {
			lost.Missing = errors.Is(ierr, sink.ErrDataTopicLost)
		} else {
			lost.ID = id
		}
	}
	return fmt.Errorf("stream %s: %w", r.cfg.ID, lost)
}
