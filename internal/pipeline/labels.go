package pipeline

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// The stream's hook for streams[].labels: the label files are read at the
// stream's first start and kept (a file changed on disk is read at the next
// start of the process), bound to Amp's schema at every connect, and joined
// onto each batch before anything else sees it, so the reorg machine, the
// encoder, the backfill and the checkpoint's row counts all see the joined
// rows, and the joined schema is the stream's schema (its fingerprint, its
// Avro schemas).

// LabelledSchema returns the schema of stream sc's rows: Amp's schema s
// with the label columns of sc's label files, which it reads (s itself for
// a stream without labels). bridge schema and bridge verify use it.
func LabelledSchema(sc config.StreamConfig, s *arrow.Schema) (*arrow.Schema, error) {
	set, err := sc.LoadLabels()
	if err != nil {
		return nil, err
	}
	j, err := set.Bind(s)
	if err != nil {
		return nil, fmt.Errorf("config streams (%s).%w", sc.ID, err)
	}
	if j == nil {
		return s, nil
	}
	return j.Schema(), nil
}

// bindLabels binds the stream's label files to Amp's schema s and returns
// the joined schema (s without labels).
func (r *Stream) bindLabels(s *arrow.Schema) (*arrow.Schema, error) {
	r.join = nil
	if len(r.cfg.Labels) == 0 {
		return s, nil
	}
	if r.labels == nil {
		set, err := r.cfg.LoadLabels()
		if err != nil {
			return nil, err
		}
		r.labels = set
		for _, l := range r.cfg.Labels {
			r.log.Info("label file read", "file", l.File, "key", l.Key, "join", string(l.Join))
		}
	}
	j, err := r.labels.Bind(s)
	if err != nil {
		return nil, fmt.Errorf("config streams (%s).%w", r.cfg.ID, err)
	}
	r.join = j
	return j.Schema(), nil
}

// joinLabels replaces env's batch by the batch joined with the labels
// (env's own reference is released).
func (r *Stream) joinLabels(env *source.Envelope) error {
	if r.join == nil || env.Batch == nil || env.Batch.NumRows() == 0 {
		return nil
	}
	out, miss, err := r.join.Join(env.Batch)
	if err != nil {
		return fmt.Errorf("stream %s: joining the labels: %w", r.cfg.ID, err)
	}
	r.deps.Metrics.labelMisses.WithLabelValues(r.cfg.ID, "dropped").Add(float64(miss.Dropped))
	r.deps.Metrics.labelMisses.WithLabelValues(r.cfg.ID, "null").Add(float64(miss.Nulls))
	env.Batch.Release()
	env.Batch = out
	return nil
}
