package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
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
	// Retention is the stream's retention_blocks.
	Retention uint64
	// Start and Mode are the stream's streams[].start and streams[].mode,
	// Load its backfill.from and backfill.to: writeStart says whether the
	// start position still applies.
	Start config.StartPosition
	Mode  config.StreamMode
	Load  [2]uint64
	// Running is what a running bridge's /readyz says of the stream (nil:
	// no bridge answered at http.addr); RunningErr why none did.
	Running    *health.StreamReport
	RunningErr error
	// Owner is who runs the stream in cluster mode (Cluster); nil
	// otherwise.
	Owner *StreamOwner
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
	st := StreamStatus{Stream: sc.ID, Retention: sc.RetentionBlocks, Start: sc.Start, Mode: sc.Mode,
		Load: [2]uint64{sc.Backfill.From, sc.Backfill.To}}
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

// RunningHealth asks the bridge serving addr (http.addr) for its /readyz
// report; nil without an error when addr is off.
func RunningHealth(ctx context.Context, addr string) (*health.Report, error) {
	if addr == "" || addr == "off" {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no bridge answers at http.addr %s: %w", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var rep health.Report
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("reading /readyz of the bridge at %s: %w", addr, err)
	}
	return &rep, nil
}

// WriteText writes the status for people (bridge status); store names the
// checkpoint store.
func (s StreamStatus) WriteText(w io.Writer, store string) {
	if s.Owner != nil {
		s.Owner.WriteText(w)
	}
	switch {
	case s.Running != nil:
		fmt.Fprintf(w, "%s: running bridge says %s", s.Stream, s.Running.State)
		if s.Running.Reason != "" {
			fmt.Fprintf(w, ": %s", s.Running.Reason)
		}
		fmt.Fprintln(w)
	case s.RunningErr != nil:
		fmt.Fprintf(w, "%s: running bridge: unknown (%v)\n", s.Stream, s.RunningErr)
	}
	if s.Checkpoint == nil {
		fmt.Fprintf(w, "%s: no checkpoint yet (store %s)\n", s.Stream, store)
		s.writeStart(w)
		s.writeBackfill(w)
		return
	}
	cp := s.Checkpoint
	fmt.Fprintf(w, "%s: cursor %s\n", s.Stream, pipeline.CursorText(cp.Cursor()))
	fmt.Fprintf(w, "  checkpoint version %d, committed %s (%s ago), store %s\n", cp.Version,
		cp.CommittedAt.Format(time.RFC3339), s.Age.Round(time.Second), store)
	fmt.Fprintf(w, "  retained batches %d (retention %d blocks), next sequence %d, control offset %d\n",
		len(cp.Batches), s.Retention, cp.Snapshot.Next, cp.ControlOffset)
	s.writeStart(w)
	s.writeBackfill(w)
	if s.HeadsErr != nil {
		fmt.Fprintf(w, "  head lag: unknown (%v)\n", s.HeadsErr)
		return
	}
	for _, net := range cp.Cursor().Networks() {
		lag, ok := s.Lag(net)
		if !ok {
			fmt.Fprintf(w, "  head lag %s: unknown (Amp reports no synced range for it)\n", net)
			continue
		}
		fmt.Fprintf(w, "  head lag %s: %d block(s) (Amp synced to %d)\n", net, lag, s.Heads[net])
	}
}

// writeBackfill writes the partition records of the stream's backfill.
func (s StreamStatus) writeBackfill(w io.Writer) {
	if s.BackfillErr != nil {
		fmt.Fprintf(w, "  backfill: unknown (%v)\n", s.BackfillErr)
		return
	}
	if s.Backfill == nil {
		return
	}
	done := 0
	for _, p := range s.Backfill {
		if p.Done {
			done++
		}
	}
	fmt.Fprintf(w, "  backfill: %d partition(s) recorded, %d done; %s\n", len(s.Backfill), done, s.BackfillProgress)
	for _, p := range s.Backfill {
		switch {
		case p.Done:
			fmt.Fprintf(w, "    [%d, %d) done\n", p.From, p.To)
		case p.Last != nil:
			fmt.Fprintf(w, "    [%d, %d) published up to block %d\n", p.From, p.To, p.Last.Number)
		}
	}
}

// writeStart says what the stream's mode and start position mean now: a
// start position applies only at the first start, and the checkpoint then
// records where the stream began.
func (s StreamStatus) writeStart(w io.Writer) {
	var began []string
	if cp := s.Checkpoint; cp != nil && cp.Snapshot.Start {
		for _, net := range cp.Snapshot.Handover.Networks() {
			began = append(began, fmt.Sprintf("%s block %d", net, cp.Snapshot.Handover[net].Number))
		}
	}
	switch {
	case s.Mode == config.ModeOnce:
		fmt.Fprintf(w, "  mode once: a one-shot load of blocks [%d, %d); the stream stops once they are published\n", s.Load[0], s.Load[1])
	case len(began) > 0:
		fmt.Fprintf(w, "  started at %s (its start position at the first start); streams[].start (now %s) is ignored: "+
			"the stream resumes from its checkpoint\n", strings.Join(began, ", "), s.Start)
	case s.Start == "" || s.Start == config.StartEarliest:
	case s.Checkpoint == nil:
		fmt.Fprintf(w, "  start %s: applies at the stream's first start\n", s.Start)
	default:
		fmt.Fprintf(w, "  start %s is ignored: the stream has a checkpoint and resumes from its cursor\n", s.Start)
	}
}
