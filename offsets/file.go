package offsets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// lockPoll is how often a writer waiting for another writer's lock retries.
const lockPoll = 2 * time.Millisecond

// FileStore is the embedded Store for `bridge demo` and users without Redis:
// one file per stream in a directory, replaced by write to a temporary file,
// fsync, atomic rename and fsync of the directory, so a crash leaves either
// the old or the new checkpoint, never a mix. Writers of the same stream are
// serialised by an exclusive lock on "<stream>.lock" (flock), which fences
// goroutines of this process and other processes alike. It is safe for
// concurrent use. The directory must be on a local file system (flock over
// NFS is not reliable).
type FileStore struct {
	dir string
	log *slog.Logger
}

// String names the store for messages: "checkpoint store file at dir".
func (s *FileStore) String() string { return "checkpoint store file at " + s.dir }

// NewFileStore creates dir (0700) if needed and returns a store in it.
func NewFileStore(dir string, log *slog.Logger) (*FileStore, error) {
	if log == nil {
		return nil, errors.New("offsets: NewFileStore needs a logger")
	}
	if dir == "" {
		return nil, errors.New("offsets: the embedded checkpoint store needs a directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("offsets: creating checkpoint directory: %w", err)
	}
	return &FileStore{dir: dir, log: log.With(slog.String("component", "offsets"), slog.String("dir", dir))}, nil
}

// CheckpointPath returns the file holding the stream's checkpoint.
func (s *FileStore) CheckpointPath(stream string) string {
	return filepath.Join(s.dir, stream+".checkpoint.json")
}

// PartitionsPath returns the file holding the stream's backfill partitions.
func (s *FileStore) PartitionsPath(stream string) string {
	return filepath.Join(s.dir, stream+".backfill.json")
}

func (s *FileStore) lockPath(stream string) string { return filepath.Join(s.dir, stream+".lock") }

// Load returns the stream's checkpoint, or ErrNotFound. Leftover temporary
// files of an interrupted commit are ignored.
func (s *FileStore) Load(_ context.Context, stream string) (Checkpoint, error) {
	if err := ValidateStream(stream); err != nil {
		return Checkpoint{}, err
	}
	cp, _, err := s.read(stream)
	return cp, err
}

func (s *FileStore) read(stream string) (Checkpoint, []byte, error) {
	path := s.CheckpointPath(stream)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Checkpoint{}, nil, fmt.Errorf("%w: %s does not exist", ErrNotFound, path)
	}
	if err != nil {
		return Checkpoint{}, nil, fmt.Errorf("offsets: reading checkpoint: %w", err)
	}
	cp, err := Unmarshal(b)
	if err != nil {
		return Checkpoint{}, nil, fmt.Errorf("loading checkpoint from %s: %w", path, err)
	}
	if cp.Stream != stream {
		return Checkpoint{}, nil, &ValidationError{What: path, Problems: []string{fmt.Sprintf("it holds the checkpoint of stream %q", cp.Stream)}}
	}
	return cp, b, nil
}

// Commit stores cp if the stored version is cp.Version-1, under the stream's
// lock. A refusal is a *StaleError.
func (s *FileStore) Commit(ctx context.Context, cp Checkpoint) error {
	b, err := Marshal(cp)
	if err != nil {
		return err
	}
	unlock, err := s.lock(ctx, cp.Stream)
	if err != nil {
		return err
	}
	defer unlock()
	path := s.CheckpointPath(cp.Stream)
	var stored uint64
	cur, curBytes, err := s.read(cp.Stream)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return fmt.Errorf("committing checkpoint version %d: %w (move the file away to rebuild it from Kafka)", cp.Version, err)
	default:
		stored = cur.Version
	}
	if stored == cp.Version && bytes.Equal(curBytes, b) {
		return nil // the same commit, retried
	}
	if stored != cp.Version-1 {
		return &StaleError{Stream: cp.Stream, Expected: cp.Version - 1, Stored: stored, Where: path}
	}
	if err := s.replace(cp.Stream, path, b); err != nil {
		return fmt.Errorf("offsets: committing checkpoint version %d of stream %q: %w", cp.Version, cp.Stream, err)
	}
	return nil
}

// replace writes b to path atomically and durably. The caller holds the
// stream's lock, so temporary files of the stream left by a crashed writer
// can be removed.
func (s *FileStore) replace(stream, path string, b []byte) error {
	base := filepath.Base(path)
	if old, _ := filepath.Glob(filepath.Join(s.dir, "."+base+".tmp-*")); len(old) > 0 {
		for _, o := range old {
			if err := os.Remove(o); err == nil {
				s.log.Info("removed a temporary file left by an interrupted commit", slog.String("stream", stream), slog.String("file", o))
			}
		}
	}
	f, err := os.CreateTemp(s.dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating temporary file: %w", err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		done = true
		return fmt.Errorf("renaming %s to %s: %w", tmp, path, err)
	}
	done = true
	return syncDir(s.dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening directory %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// lock takes the stream's exclusive lock, waiting until ctx is done.
func (s *FileStore) lock(ctx context.Context, stream string) (func(), error) {
	path := s.lockPath(stream)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("offsets: opening lock file: %w", err)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		ok, err := tryLock(f)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("offsets: locking %s: %w", path, err)
		}
		if ok {
			return func() { _ = unlockFile(f); _ = f.Close() }, nil
		}
		t.Reset(lockPoll)
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("offsets: waiting for the lock %s held by another writer of stream %q: %w", path, stream, ctx.Err())
		case <-t.C:
		}
	}
}

// SavePartition stores a backfill partition record unless the stored
// progress of the same partition is higher.
func (s *FileStore) SavePartition(ctx context.Context, p Partition) error {
	if _, err := marshalPartition(p); err != nil {
		return err
	}
	p.UpdatedAt = p.UpdatedAt.UTC()
	unlock, err := s.lock(ctx, p.Stream)
	if err != nil {
		return err
	}
	defer unlock()
	ps, err := s.readPartitions(p.Stream)
	if err != nil {
		return err
	}
	path := s.PartitionsPath(p.Stream)
	found := false
	for i, q := range ps {
		if q.From == p.From && q.To == p.To {
			if q.progress() > p.progress() {
				return regressedError(q, p, path)
			}
			ps[i], found = p, true
		}
	}
	if !found {
		ps = append(ps, p)
	}
	sortPartitions(ps)
	b, err := json.Marshal(partitionsFile{Format: formatV1, Partitions: ps})
	if err != nil {
		return fmt.Errorf("offsets: encoding backfill partitions: %w", err)
	}
	if err := s.replace(p.Stream, path, b); err != nil {
		return fmt.Errorf("offsets: saving backfill partition %s of stream %q: %w", p.Key(), p.Stream, err)
	}
	return nil
}

type partitionsFile struct {
	Format     int         `json:"format"`
	Partitions []Partition `json:"partitions"`
}

// Partitions returns the stream's backfill partition records ordered by
// From, then To.
func (s *FileStore) Partitions(_ context.Context, stream string) ([]Partition, error) {
	if err := ValidateStream(stream); err != nil {
		return nil, err
	}
	return s.readPartitions(stream)
}

func (s *FileStore) readPartitions(stream string) ([]Partition, error) {
	path := s.PartitionsPath(stream)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("offsets: reading backfill partitions: %w", err)
	}
	var pf partitionsFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&pf); err != nil {
		return nil, fmt.Errorf("offsets: decoding backfill partitions in %s: %w", path, err)
	}
	if pf.Format != formatV1 {
		return nil, fmt.Errorf("%w: %s has format %d, this build reads %d", ErrUnsupportedFormat, path, pf.Format, formatV1)
	}
	for _, p := range pf.Partitions {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("loading backfill partitions from %s: %w", path, err)
		}
		if p.Stream != stream {
			return nil, &ValidationError{What: path, Problems: []string{fmt.Sprintf("it holds a partition of stream %q", p.Stream)}}
		}
	}
	return pf.Partitions, nil
}
