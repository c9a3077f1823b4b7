package offsets

import "context"

// Store keeps one checkpoint per stream with version fencing.
//
// Load returns ErrNotFound when nothing is stored. Commit stores cp only if
// the stored version is cp.Version-1 (nothing stored counts as 0), atomically
// with respect to every other writer of the same stream, in this process or
// another; otherwise it returns a *StaleError (errors.Is ErrFenced) and the
// store is unchanged.
type Store interface {
	// Load returns the stream's checkpoint or ErrNotFound.
	Load(ctx context.Context, stream string) (Checkpoint, error)
	// Commit stores cp if the stored version is cp.Version-1.
	Commit(ctx context.Context, cp Checkpoint) error
}

// PartitionStore keeps the backfill partition records of a stream, in the
// same place as its checkpoint.
//
// SavePartition replaces the record of the same [From, To) unless that would
// move it backwards (a done partition becoming not done, or Last going to an
// earlier block): then it returns an error matching ErrPartitionRegressed.
type PartitionStore interface {
	// SavePartition stores p unless its progress is behind the stored one.
	SavePartition(ctx context.Context, p Partition) error
	// Partitions returns the stream's records ordered by From, then To.
	Partitions(ctx context.Context, stream string) ([]Partition, error)
}

var (
	_ Store          = (*RedisStore)(nil)
	_ PartitionStore = (*RedisStore)(nil)
	_ Store          = (*FileStore)(nil)
	_ PartitionStore = (*FileStore)(nil)
)
