package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// Start positions (streams[].start) and one-shot loads (streams[].mode:
// once).
//
// A new stream with start latest or N does not begin at the first block
// Amp has synced. At its first start, with no checkpoint, the bridge asks
// Amp for the network and synced range of the query's tables, fixes the
// start block (N, or the block after the synced head for latest, never
// below the first synced block) and commits a start checkpoint
// (reorg.NewStart): the cursor of that block with a hash Amp does not know,
// so Amp restarts the stream exactly there (amp-protocol.md §3.2), as after
// a backfill's hand-over; the first range must start there. The checkpoint
// fixes the start: a restart before anything was published resumes there
// (latest does not move with the head), and once the stream has a
// checkpoint streams[].start is ignored. Nothing before the start block is
// published, so a reorg that reaches below it undoes every published batch
// and reconnects at the start block, where Amp sends the new chain.
//
// A one-shot load publishes [backfill.from, backfill.to) with the
// backfill's partitions, steps and progress records, then the stream stops
// (Run returns nil): a restart publishes only the blocks no committed event
// covers, and a run after a complete one publishes nothing and says so. A
// query whose rows depend on rows of other blocks (source.SplitHazards)
// runs as one batch query over the whole range, in one transaction: its
// result is then exactly that query's; such a query without the block
// column in its output is refused, since no block range selects its rows.

// errLoadDone ends a one-shot load's run: the stream stops without error.
var errLoadDone = errors.New("one-shot load done")

// startAt fixes the start block of a fresh stream whose start is not
// earliest and commits the start checkpoint.
func (r *Stream) startAt(ctx context.Context) error {
	synced, err := r.probeStart(ctx)
	if err != nil {
		return err
	}
	n, numeric, err := r.cfg.Start.Block()
	if err != nil {
		return fmt.Errorf("config streams (%s).start: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	if !numeric { // latest
		n = synced.End + 1
	}
	if n < synced.Start {
		r.log.Info("the start block is below the first block Amp has synced for the query's tables; starting there",
			"start", n, "first_synced", synced.Start)
		n = synced.Start
	}
	snap := reorg.NewStart(map[string]uint64{synced.Network: n})
	if err := r.commitSeed(ctx, snap); err != nil {
		return fmt.Errorf("committing the start checkpoint: %w", err)
	}
	r.log.Info("new stream: starts at its configured position", "start", string(r.cfg.Start), "network", synced.Network,
		"block", n, "synced_head", synced.End)
	r.emit(Event{Kind: "start", Detail: fmt.Sprintf("%s: live from block %d (start %s)", synced.Network, n, r.cfg.Start)})
	return nil
}

// probeStart asks Amp for the network and synced range of the query's
// tables: a batch query that returns no rows (LIMIT 0 around the query,
// which needs no block column), whose completion batch carries them
// (amp-protocol.md §2.6). A start position needs one network.
func (r *Stream) probeStart(ctx context.Context) (reorg.BlockRange, error) {
	body, err := source.StripStreamSetting(r.cfg.SQL)
	if err != nil {
		return reorg.BlockRange{}, fmt.Errorf("config streams (%s).sql: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	return r.syncedRange(ctx, "SELECT * FROM (\n"+body+"\n) AS amp_start LIMIT 0", "start",
		"a start block is one network's, so run each network's query as its own stream")
}

// commitSeed commits snap, a checkpoint without batches (a backfill's
// hand-over or a start position), in a watermark event of the stream's own
// producer, then to the checkpoint store.
func (r *Stream) commitSeed(ctx context.Context, snap reorg.Snapshot) error {
	cp := r.nextCheckpoint(snap, []offsets.Batch{})
	res, err := r.commitWith(ctx, r.prod, nil, func(sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error) {
		b, err := offsets.Marshal(cp)
		if err != nil {
			return offsets.Watermark{}, nil, fmt.Errorf("encoding the checkpoint: %w", err)
		}
		return offsets.Watermark{Stream: r.cfg.ID, TsMs: r.deps.Now().UnixMilli(), Cursor: snap.Cursor(), Checkpoint: b}, &cp, nil
	})
	if err != nil {
		return err
	}
	r.lastFull, r.sinceFull = res.ControlOffset, 0
	return nil
}

// wholeRange reports whether a one-shot load runs as one batch query over
// its whole range (its query must not be split), and refuses such a query
// whose output lacks the block column.
func (r *Stream) wholeRange() (bool, error) {
	if r.cfg.Mode != config.ModeOnce {
		return false, nil
	}
	hz, err := source.SplitHazards(r.cfg.SQL, r.cfg.Backfill.Column)
	if err != nil {
		return false, fmt.Errorf("config streams (%s).sql: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	if len(hz) == 0 {
		return false, nil
	}
	if err := checkBlockColumn(r.schema, r.cfg.Backfill.Column); err != nil {
		return false, fmt.Errorf("config streams (%s).sql: has %v and its output has no block column %q: a one-shot load publishes "+
			"the rows of blocks [backfill.from, backfill.to), and rows computed over many blocks belong to none, so the bridge "+
			"cannot select them by block (nor split them: amp-python's parallel loads return one wrong answer per partition "+
			"for such queries). Select the block column (e.g. GROUP BY _block_num, … or MAX(_block_num) AS _block_num, with the "+
			"blocks to count restricted in the query's own WHERE), or run the query at Amp directly (%v): %w",
			r.cfg.ID, hz, r.cfg.Backfill.Column, err, config.ErrInvalid)
	}
	r.log.Info("one-shot load: the query must not be split into partitions; it runs as one batch query over the whole range, in one transaction",
		"features", fmt.Sprint(hz), "from", r.cfg.Backfill.From, "to", r.cfg.Backfill.To)
	return true, nil
}

// loadDone reports the end of a one-shot load that had blocks blocks left
// to publish at its start, and ends the run (errLoadDone).
func (r *Stream) loadDone(plan *backfillPlan, left uint64) error {
	span := source.BlockSpan{From: plan.from, To: plan.end}
	if left == 0 {
		r.log.Info("one-shot load: every block was published by an earlier run; nothing to publish", "network", plan.network,
			"blocks", span.String())
		r.loaded = fmt.Sprintf("one-shot load done: %s blocks %s were all published before; nothing to publish", plan.network, span)
		r.emit(Event{Kind: "load-done", Detail: fmt.Sprintf("%s: blocks %s were all published before; nothing to publish", plan.network, span)})
		return errLoadDone
	}
	r.log.Info("one-shot load done", "network", plan.network, "blocks", span.String(), "blocks_published", left)
	r.loaded = fmt.Sprintf("one-shot load done: %s blocks %s published", plan.network, span)
	r.emit(Event{Kind: "load-done", Detail: fmt.Sprintf("%s: blocks %s published (%d this run)", plan.network, span, left)})
	return errLoadDone
}
