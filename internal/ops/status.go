package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
)

// StreamStatus is where a stream is, by its checkpoint store and Amp.
type StreamStatus struct {
	// Stream is the stream's id.
	Stream string
	// Checkpoint is the stored checkpoint; nil when there is none yet.
	Checkpoint *offsets.Checkpoint
	// Age is how long ago the checkpoint was committed.
	Age time.Duration
	// Backfill are the backfill's partition records (backfill-enabled
	// streams only); BackfillErr is why they could not be read.
	Backfill    []offsets.Partition
	BackfillErr error
	// BackfillProgress is what the partition records say of the
	// backfill's progress: blocks done of the total, and the last run's
	// rows/s and ETA when its records carry them (Progress.RowsPerSec and
	// ETA say whether they are known). Zero without records.
	BackfillProgress pipeline.Progress
	// Heads is the block Amp has synced per network; HeadsErr is why Amp
	// could not say (nil heads: not asked, the stream has no checkpoint).
	Heads    map[string]uint64
	HeadsErr error
}

// Lag returns the blocks between Amp's synced head and the committed
// cursor on network (ok false when either is unknown).
func (s StreamStatus) Lag(network string) (int64, bool) {
	if s.Checkpoint == nil {
		return 0, false
	}
	head, ok := s.Heads[network]
	p, ok2 := s.Checkpoint.Cursor()[network]
	if !ok || !ok2 {
		return 0, false
	}
	return int64(head) - int64(p.Number), true
}

// Cursor returns the committed cursor (empty without a checkpoint).
func (s StreamStatus) Cursor() reorg.Cursor {
	if s.Checkpoint == nil {
		return nil
	}
	return s.Checkpoint.Cursor()
}

// PartitionStore is what Status reads a stream's state from.
type PartitionStore interface {
	offsets.Store
	offsets.PartitionStore
}

// Status reads stream sc's checkpoint and backfill records from store and,
// when it has a checkpoint, asks Amp how far its tables are synced with
// heads (nil: not asked). An error of the store is returned; one of Amp
// is reported in HeadsErr.
func Status(ctx context.Context, store PartitionStore, heads func(ctx context.Context, sql string) (map[string]uint64, error),
	sc config.StreamConfig, now time.Time) (StreamStatus, error) {
	st := StreamStatus{Stream: sc.ID}
	cp, err := store.Load(ctx, sc.ID)
	switch {
	case errors.Is(err, offsets.ErrNotFound):
	case err != nil:
		return st, fmt.Errorf("stream %s: loading its checkpoint: %w", sc.ID, pipeline.NoAnswer(pipeline.StoreService(store), err))
	default:
		st.Checkpoint, st.Age = &cp, now.Sub(cp.CommittedAt)
	}
	if sc.Backfill.Enabled {
		st.Backfill, st.BackfillErr = store.Partitions(ctx, sc.ID)
		st.BackfillErr = pipeline.NoAnswer(pipeline.StoreService(store), st.BackfillErr)
		st.BackfillProgress = pipeline.PartitionProgress(st.Backfill)
	}
	if st.Checkpoint != nil && heads != nil {
		st.Heads, st.HeadsErr = heads(ctx, sc.SQL)
	}
	return st, nil
}
