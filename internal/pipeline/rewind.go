package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// Retraction is what Rewind retracted.
type Retraction struct {
	// Batches and Rows count the retracted batches and their rows.
	Batches, Rows int
}

// Open connects the stream for an operator command such as bridge rewind:
// the control topic, the stream's producer (initialising its transactional
// id fences a running instance and aborts its open transaction), its
// reader and the checkpoint reconciled with Kafka. It runs no backfill, no
// hand-over and opens no Amp stream: it publishes nothing. Close releases
// what it opened.
func (r *Stream) Open(ctx context.Context) error { return r.connect(ctx) }

// Close closes what Open opened.
func (r *Stream) Close(ctx context.Context) { r.close(ctx) }

// Committed returns the checkpoint Open reconciled, or the last one a
// commit stored.
func (r *Stream) Committed() offsets.Checkpoint { return r.committed }

// Control returns the control topic, read through the stream's reader
// (after Open).
func (r *Stream) Control() *offsets.Control { return r.control() }

// Rewind retracts batches (read back from Kafka by their offset spans) and
// makes base the stream's state, in one transaction through the one commit
// path: the retractions, an undo event of cause rewind naming the batches,
// and a watermark event that carries the new checkpoint, which is then
// stored. The checkpoint's sequence moves on past the committed one, so
// that reconciliation sees it as newer than the one it replaces. Open must
// have been called.
func (r *Stream) Rewind(ctx context.Context, batches []offsets.Batch, base offsets.ControlState) (Retraction, error) {
	var res Retraction
	if err := r.begin(r.deps.Now()); err != nil {
		return res, err
	}
	u := offsets.Undo{Stream: r.cfg.ID, Sequence: r.committed.Snapshot.Next, TsMs: r.deps.Now().UnixMilli(), Cause: "rewind"}
	for _, b := range batches {
		if r.enc == nil && len(b.Ranges) > 0 {
			if err := r.setupTopic(ctx, []string{b.Ranges[0].Network}); err != nil {
				return res, err
			}
		}
	}
	if err := r.retractAll(ctx, batches, u.Cause, func(b offsets.Batch, n int) {
		res.Batches++
		res.Rows += n
		u.BatchIDs = append(u.BatchIDs, b.ID)
		for _, rg := range b.Ranges {
			u.Ranges = append(u.Ranges, offsets.InvalidatedRange{Network: rg.Network, Start: rg.Start, End: rg.End})
		}
		if res.Batches == 1 || b.Seq < u.FirstSequence {
			u.FirstSequence = b.Seq
		}
		u.LastSequence = max(u.LastSequence, b.Seq)
	}); err != nil {
		return res, err
	}
	snap := base.Snapshot
	snap.Next = max(snap.Next, r.committed.Snapshot.Next+1)
	cp := r.nextCheckpoint(snap, base.Batches)
	var undos []offsets.Undo
	if len(u.BatchIDs) > 0 {
		undos = []offsets.Undo{u}
	}
	var seq uint64
	if n := len(snap.Watermarks); n > 0 {
		seq = snap.Watermarks[n-1].Seq
	}
	if _, err := r.commitWith(ctx, r.prod, undos, func(sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error) {
		b, err := offsets.Marshal(cp)
		if err != nil {
			return offsets.Watermark{}, nil, fmt.Errorf("encoding the rewound checkpoint: %w", err)
		}
		return offsets.Watermark{Stream: r.cfg.ID, Sequence: seq, TsMs: r.deps.Now().UnixMilli(), Cursor: snap.Cursor(), Checkpoint: b}, &cp, nil
	}); err != nil {
		return res, fmt.Errorf("committing the rewind: %w", err)
	}
	r.txn.reset()
	r.log.Info("stream rewound", "batches", res.Batches, "rows", res.Rows, "cursor", cursorText(snap.Cursor()))
	return res, nil
}

// CursorText formats a cursor for people: the amp-resume header value, or
// "(start)" for the empty cursor.
func CursorText(c reorg.Cursor) string { return cursorText(c) }

// SyncedHeads asks Amp how far the tables of a query are synced: a batch
// query's completion metadata carries, per network, the synced range of
// the tables the plan reads (amp-protocol.md §2.6), whatever rows it
// returns. The query returns none: it is the backfill partition of the
// empty span [0, 0) on _block_num. opts configure the query (e.g. the
// stream's logger, source.WithLogger).
func SyncedHeads(ctx context.Context, amp *source.Client, sql string, opts ...source.StreamOption) (map[string]uint64, error) {
	q, err := source.PartitionSQL(sql, "_block_num", 0, 0)
	if err != nil {
		return nil, err
	}
	st, err := amp.Query(ctx, q, opts...)
	if err != nil {
		return nil, err
	}
	defer func() { _ = st.Close() }()
	heads := map[string]uint64{}
	for {
		env, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return heads, nil
		}
		if err != nil {
			return nil, err
		}
		if env.Complete {
			for _, r := range env.Ranges {
				heads[r.Network] = r.End
			}
		}
		env.Release()
	}
}
