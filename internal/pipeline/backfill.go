package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"golang.org/x/sync/errgroup"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// The backfill (design.md §7) publishes a new stream's history before it
// goes live:
//
//   - A probe (a batch query of an empty span) asks Amp for the network and
//     the head its tables have synced. The backfill covers [from, end), end
//     being backfill.to or handover_margin blocks below that head: blocks
//     that deep are final, so the backfilled rows never need retracting.
//   - [from, end) is split into partitions, which workers take in turn. A
//     worker runs batch queries of step_blocks blocks, each the user's SQL
//     wrapped in a filter on the block column, and publishes each in one
//     Kafka transaction of the worker's transactional id
//     ({prefix}.{stream}.backfill.{k}, which fences the previous instance's
//     worker k), with rows of op r (source.snapshot true) keyed by the
//     step's batch id, and a watermark control event that names the
//     partition and the blocks published. That event is the record of
//     progress: a restarted backfill reads the control topic and runs only
//     the blocks no committed event covers, whatever partitions the new
//     head gives. The checkpoint store gets a partition record after each
//     step, for status.
//   - When every partition is done, the stream's own producer commits the
//     hand-over checkpoint (reorg.NewHandover: resume at end with a hash
//     Amp does not know, so it restarts exactly at block end) in a
//     watermark event, then to the checkpoint store, and the live stream
//     starts from it with op c.

// backfillPlan is the work of one backfill run.
type backfillPlan struct {
	// whole runs the span as one partition of one step: a one-shot load
	// of a query that must not be split (wholeRange).
	whole   bool
	network string
	column  string
	from    uint64
	end     uint64
	parts   []source.BlockSpan
	done    []source.BlockSpan // merged, sorted: blocks already published
}

// Backfilling reports whether the stream is running its backfill now (a
// cluster member weighs it more then). Safe for concurrent use.
func (r *Stream) Backfilling() bool { return r.backfilling.Load() }

// GoneLive reports whether this run has seen the stream past its backfill:
// the stream's own run once its backfill has handed over (or it had gone
// live before), a backfill worker's once it found the stream live. A
// stream that has gone live never backfills again, so none of its backfill
// workers has anything to do. Safe for concurrent use.
func (r *Stream) GoneLive() bool { return r.goneLive.Load() }

// isFresh reports whether a checkpoint is that of a stream that has
// published nothing live and has no hand-over yet.
func isFresh(cp offsets.Checkpoint) bool {
	return cp.Version == 0 && len(cp.Snapshot.Watermarks) == 0 && len(cp.Snapshot.Handover) == 0
}

// backfill runs the stream's backfill to the end and commits the hand-over
// checkpoint into r.committed.
func (r *Stream) backfill(ctx context.Context) error {
	r.backfilling.Store(true)
	defer r.backfilling.Store(false)
	plan, err := r.planBackfill(ctx)
	if err != nil {
		return err
	}
	if r.deps.ClusterBackfill {
		return r.backfillCluster(ctx, plan)
	}
	workers := make([]*backfillWorker, len(r.bfProds))
	for k, prod := range r.bfProds {
		if workers[k], err = r.newBackfillWorker(plan, prod, k); err != nil {
			return err
		}
	}
	if plan.done, err = r.backfillDone(ctx); err != nil {
		return err
	}
	// Connected and publishing: a backfill may run for hours, and /readyz
	// must not hold the pod unready for all of it.
	r.deps.Health.Ready()
	queue := make(chan source.BlockSpan, len(plan.parts))
	total, left := plan.end-plan.from, uint64(0)
	for _, p := range plan.parts {
		if rest := subtractSpans(p, plan.done); len(rest) > 0 {
			queue <- p
			for _, s := range rest {
				left += s.Len()
			}
		}
	}
	r.backfillLeft.Store(left)
	r.backfillRows.Store(0)
	r.backfillStart = r.deps.Now()
	r.deps.Metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(float64(left))
	r.log.Info("backfill", "network", plan.network, "from", plan.from, "to", plan.end, "partitions", len(plan.parts),
		"partitions_to_run", len(queue), "workers", len(workers), "column", plan.column, "blocks", total, "blocks_to_run", left)
	close(queue)
	snap := func() Progress {
		return Progress{BlocksTotal: total, BlocksDone: total - r.backfillLeft.Load(), BlocksAtStart: total - left,
			Rows: r.backfillRows.Load(), Elapsed: r.deps.Now().Sub(r.backfillStart)}
	}
	// The reporter stops when the workers do; its goroutine is waited for.
	pctx, stopProgress := context.WithCancel(ctx)
	report, finish := r.progressReporter()
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		reportProgress(pctx, r.deps.ProgressEvery, snap, report)
	}()
	defer func() { stopProgress(); <-reported; finish() }()
	g, gctx := errgroup.WithContext(ctx)
	for _, w := range workers {
		g.Go(func() error {
			for p := range queue {
				if err := w.partition(gctx, p, subtractSpans(p, plan.done)); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	stopProgress()
	<-reported
	p := snap()
	r.log.Info("backfill published", append([]any{"network", plan.network}, p.logAttrs()...)...)
	if r.cfg.Mode == config.ModeOnce {
		return r.loadDone(plan, left)
	}
	return r.handover(ctx, plan.network, plan.end)
}

// planBackfill checks the block column, probes Amp for the synced range,
// fixes the backfill's span and partitions, and prepares the data topic.
func (r *Stream) planBackfill(ctx context.Context) (*backfillPlan, error) {
	bf := r.cfg.Backfill
	plan := &backfillPlan{column: bf.Column}
	var err error
	if plan.whole, err = r.wholeRange(); err != nil {
		return nil, err
	}
	if err := checkBlockColumn(r.schema, bf.Column); err != nil {
		return nil, fmt.Errorf("config streams (%s).backfill.column: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	synced, err := r.probeSynced(ctx, bf.Column)
	if err != nil {
		return nil, err
	}
	plan.network = synced.Network
	limit := uint64(0)
	if synced.End+1 > bf.HandoverMargin {
		limit = synced.End + 1 - bf.HandoverMargin
	}
	plan.from = max(bf.From, synced.Start)
	if plan.from > bf.From {
		r.log.Info("backfill starts at the first block Amp has synced for the query's tables", "from", plan.from, "configured_from", bf.From)
	}
	plan.end = limit
	if bf.To != 0 {
		if bf.To > limit {
			return nil, fmt.Errorf("stream %s: backfill.to %d is not yet %d blocks (handover_margin) below the head Amp has synced, %d; waiting for Amp to sync further",
				r.cfg.ID, bf.To, bf.HandoverMargin, synced.End)
		}
		plan.end = bf.To
	}
	plan.end = max(plan.end, plan.from)
	if r.enc == nil {
		if err := r.setupTopic(ctx, []string{plan.network}); err != nil {
			return nil, err
		}
	}
	plan.parts = source.PlanPartitions(plan.from, plan.end, bf.Workers, bf.PartitionSize)
	if plan.whole {
		plan.parts = source.PlanPartitions(plan.from, plan.end, 1, 0)
	}
	return plan, nil
}

// checkBlockColumn checks that the query's output has an integer column
// named col.
func checkBlockColumn(s *arrow.Schema, col string) error {
	idx := s.FieldIndices(col)
	if len(idx) != 1 {
		return fmt.Errorf("the query's output has %d columns named %q; the backfill partitions filter on it, so select it "+
			"(e.g. SELECT _block_num, … ) or name the block column with backfill.column", len(idx), col)
	}
	switch t := s.Field(idx[0]).Type.ID(); t {
	case arrow.UINT64, arrow.INT64, arrow.UINT32, arrow.INT32:
		return nil
	default:
		return fmt.Errorf("column %q is %s, not an integer block number", col, s.Field(idx[0]).Type)
	}
}

// probeSynced runs the partition query of an empty span: no rows, and the
// completion batch's ranges are the synced range of the query's tables
// (amp-protocol.md §2.6). The backfill supports one network.
func (r *Stream) probeSynced(ctx context.Context, col string) (reorg.BlockRange, error) {
	sql, err := source.PartitionSQL(r.cfg.SQL, col, 0, 0)
	if err != nil {
		return reorg.BlockRange{}, fmt.Errorf("config streams (%s).sql: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	return r.syncedRange(ctx, sql, "backfill",
		"a backfill partitions one network's blocks, so backfill each network's query as its own stream")
}

// syncedRange runs sql, a batch query that returns no rows, and returns the
// network and synced range its completion carries (amp-protocol.md §2.6);
// a query over several networks is a configuration error of
// streams[].key, which one network's blocks need, for the reason given.
func (r *Stream) syncedRange(ctx context.Context, sql, key, why string) (reorg.BlockRange, error) {
	ranges, _, err := r.runQuery(ctx, sql, func(arrow.RecordBatch) error { return nil })
	if err != nil {
		return reorg.BlockRange{}, fmt.Errorf("stream %s: asking Amp how far the query's tables are synced: %w", r.cfg.ID, err)
	}
	switch len(ranges) {
	case 0:
		return reorg.BlockRange{}, fmt.Errorf("stream %s: Amp has no synced data for the query's tables yet; waiting for Amp to sync", r.cfg.ID)
	case 1:
		return ranges[0], nil
	default:
		nets := make([]string, len(ranges))
		for i, rg := range ranges {
			nets[i] = rg.Network
		}
		return reorg.BlockRange{}, fmt.Errorf("config streams (%s).%s: the query spans networks %v; %s: %w",
			r.cfg.ID, key, nets, why, config.ErrInvalid)
	}
}

// runQuery runs a batch query, hands each result batch to fn (which must
// not keep it) and returns the completion batch's ranges and the rows seen.
func (r *Stream) runQuery(ctx context.Context, sql string, fn func(arrow.RecordBatch) error) ([]reorg.BlockRange, int, error) {
	q, err := r.deps.Amp.Query(ctx, sql, r.publishingAmpOpts()...)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = q.Close() }()
	var ranges []reorg.BlockRange
	rows := 0
	for {
		env, err := q.Next(ctx)
		if errors.Is(err, io.EOF) {
			return ranges, rows, nil
		}
		if err != nil {
			return nil, rows, err
		}
		if env.Batch != nil && env.Batch.NumRows() > 0 {
			r.deps.Metrics.polled.WithLabelValues(r.cfg.ID).Add(float64(env.Batch.NumRows()))
			err := r.joinLabels(&env)
			if err == nil && env.Batch.NumRows() > 0 {
				rows += int(env.Batch.NumRows())
				err = fn(env.Batch)
			}
			if err != nil {
				env.Release()
				return nil, rows, err
			}
		}
		if env.Complete {
			ranges = slices.Clone(env.Ranges)
		}
		env.Release()
	}
}

// backfillDone returns the blocks the stream's committed backfill watermark
// events cover, merged. A partition record of the checkpoint store that
// claims more is refused: the control topic lost events.
//
// It runs only for a fresh stream (setup runs no backfill for a stream that
// has gone live), whose events in the control topic are its backfill's, so
// it reads the whole topic; it streams through it, merging the spans as it
// goes, so its memory is bounded by one fetch and the disjoint spans
// published, not by the number of events.
func (r *Stream) backfillDone(ctx context.Context) ([]source.BlockSpan, error) {
	// The records first: each is written after its step committed, so any
	// record read now is of a step the control topic, read next, holds, even
	// while other workers publish (a cluster's run on other members).
	recs, err := r.partitionRecords(ctx)
	if err != nil {
		return nil, err
	}
	defer r.deps.Health.Track("kafka: reading the backfill's progress from the control topic")()
	ctl := r.control()
	b, err := ctl.Bounds(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: reading the backfill's progress: %w", r.cfg.ID, err)
	}
	var done spanSet
	if err := ctl.Scan(ctx, r.cfg.ID, b.Start, b.End, func(h offsets.HistoryEvent) error {
		done.addBackfill(h.Event.Watermark)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("stream %s: reading the backfill's progress: %w", r.cfg.ID, err)
	}
	return r.checkPartitionRecords(recs, done.merged())
}

// partitionRecords reads the backfill's partition records.
func (r *Stream) partitionRecords(ctx context.Context) ([]offsets.Partition, error) {
	recs, err := r.deps.Store.Partitions(ctx, r.cfg.ID)
	if err != nil {
		return nil, fmt.Errorf("stream %s: reading the backfill's partition records: %w", r.cfg.ID, err)
	}
	return recs, nil
}

// checkPartitionRecords returns done unless a partition record, read
// before done, claims blocks done does not cover.
func (r *Stream) checkPartitionRecords(recs []offsets.Partition, done []source.BlockSpan) ([]source.BlockSpan, error) {
	for _, p := range recs {
		claimed := source.BlockSpan{From: p.From, To: p.From}
		switch {
		case p.Done:
			claimed.To = p.To
		case p.Last != nil:
			claimed.To = p.Last.Number + 1
		}
		if claimed.Len() > 0 && len(subtractSpans(claimed, done)) > 0 {
			return nil, fmt.Errorf("stream %s: the checkpoint store records backfill partition [%d, %d) as published up to block %d, "+
				"but the control topic %s has no committed event for some of those blocks: the control topic was truncated or recreated. "+
				"The bridge will not publish them again blindly; restore the control topic, or start over under a new stream id: %w",
				r.cfg.ID, p.From, p.To, claimed.To-1, r.deps.ControlTopic, offsets.ErrStoreAhead)
		}
	}
	return done, nil
}

// fenceBackfillWorkers creates the producers of the backfill's workers,
// of transactional ids {prefix}.{stream}.backfill.{k}: initialising them
// fences the previous instance's workers and aborts their open
// transactions. All of them, however many partitions are left: each slot
// may hold a previous instance's transaction. The ids are per worker, not
// per partition: the partitions move with the head Amp has synced at each
// start, the workers' ids do not (unless backfill.workers is lowered).
func (r *Stream) fenceBackfillWorkers(ctx context.Context) error {
	deps := r.sinkDeps()
	for k := range r.cfg.Backfill.Workers {
		prod, err := sink.NewProducer(ctx, r.backfillKafka(), r.backfillWorkerID(k), deps)
		if err != nil {
			return fmt.Errorf("stream %s: starting the producer of backfill worker %d: %w", r.cfg.ID, k, err)
		}
		r.bfProds = append(r.bfProds, prod)
	}
	return nil
}

// minWorkerBufferedBytes is the least producer buffer of a backfill worker.
const minWorkerBufferedBytes = 8 << 20

// backfillKafka is the producer configuration of the backfill's workers:
// they share kafka.max_buffered_bytes (each has its part, at least
// minWorkerBufferedBytes), so that memory follows the configuration, not
// the number of workers.
func (r *Stream) backfillKafka() sink.Config {
	c := r.deps.Kafka
	if n := r.cfg.Backfill.Workers; n > 1 {
		c.MaxBufferedBytes = max(c.MaxBufferedBytes/n, min(c.MaxBufferedBytes, minWorkerBufferedBytes))
	}
	return c
}

// backfillWorkerID is the producer id of backfill worker k.
func (r *Stream) backfillWorkerID(k int) string { return fmt.Sprintf("%s.backfill.%d", r.cfg.ID, k) }

// closeBackfillWorkers closes the backfill workers' producers.
func (r *Stream) closeBackfillWorkers(ctx context.Context) {
	for _, p := range r.bfProds {
		closeProducer(ctx, p, r.log)
	}
	r.bfProds = nil
}

// newBackfillWorker returns worker k: its producer and an encoder.
func (r *Stream) newBackfillWorker(plan *backfillPlan, prod *sink.Producer, k int) (*backfillWorker, error) {
	enc, err := encode.NewEncoder(r.encCfg, r.schema)
	if err != nil {
		return nil, fmt.Errorf("stream %s: compiling the encoder of backfill worker %d: %w", r.cfg.ID, k, err)
	}
	enc.SetFraming(r.enc.ValueFraming(), r.enc.KeyFraming())
	return &backfillWorker{r: r, plan: plan, prod: prod, enc: enc}, nil
}

// backfillWorker publishes partitions, one step per transaction.
type backfillWorker struct {
	r    *Stream
	plan *backfillPlan
	prod *sink.Producer
	enc  *encode.Encoder
	part source.BlockSpan // the partition being published
	// runFrom is the first block this run publishes of the partition, rows
	// the rows it has published of it.
	runFrom uint64
	rows    uint64
	// beforeStep, when set, runs before each step (a cluster worker checks
	// that the plan it publishes is still the stored one).
	beforeStep func(ctx context.Context) error
}

// partition publishes the blocks rest of partition p, step by step.
func (w *backfillWorker) partition(ctx context.Context, p source.BlockSpan, rest []source.BlockSpan) error {
	w.part, w.rows = p, 0
	if len(rest) > 0 {
		w.runFrom = rest[0].From
	}
	step := w.r.cfg.Backfill.StepBlocks
	if w.plan.whole {
		step = p.Len()
	}
	for _, s := range rest {
		for a := s.From; a < s.To; {
			b := s.To
			if s.To-a > step {
				b = a + step
			}
			if err := w.step(ctx, source.BlockSpan{From: a, To: b}, b == p.To); err != nil {
				return err
			}
			a = b
		}
	}
	return nil
}

// step publishes the blocks of span s in one transaction: its rows, then
// the watermark event recording them.
func (w *backfillWorker) step(ctx context.Context, s source.BlockSpan, last bool) error {
	r := w.r
	if w.beforeStep != nil {
		if err := w.beforeStep(ctx); err != nil {
			return err
		}
	}
	sql, err := source.PartitionSQL(r.cfg.SQL, w.plan.column, s.From, s.To)
	if err != nil {
		return fmt.Errorf("config streams (%s).sql: %w: %w", r.cfg.ID, err, config.ErrInvalid)
	}
	ranges := []reorg.BlockRange{{Network: w.plan.network, Start: s.From, End: s.To - 1}}
	batchID := reorg.BatchID(ranges)
	headers := recordHeaders(r.cfg.ID, batchID, "r", ranges)
	if err := w.prod.Begin(); err != nil {
		return w.txnError("beginning a transaction", err)
	}
	rows := 0
	synced, _, err := r.runQuery(ctx, sql, func(rec arrow.RecordBatch) error {
		now := r.deps.Now()
		meta := encode.BatchMeta{Op: encode.OpRead, Snapshot: true, Ranges: ranges, BatchID: batchID,
			TsMs: now.UnixMilli(), RowOffset: int64(rows)}
		encoding, err := r.slabs.encodeSlabs(ctx, w.enc, rec, meta, nil, func(sl *slab, rowOffset int64) error {
			defer sl.done()
			out := produceBatch{topic: r.topic, batchID: batchID, op: "r", rowKey: r.cfg.Key == config.KeyRow,
				headers: headers, rowOffset: rowOffset, ts: now}
			n, err := out.produce(ctx, w.prod, r.limit, sl)
			rows += n
			if err != nil && !errors.Is(err, sink.ErrRecordTooLarge) {
				return w.txnError("producing backfill records", err)
			}
			return err
		})
		if encoding {
			return fmt.Errorf("stream %s: encoding backfill batch %s (blocks %s): %w", r.cfg.ID, batchID, s, err)
		}
		return err
	})
	if err == nil {
		err = checkSynced(synced, w.plan.network, s)
	}
	if err != nil {
		if aerr := w.prod.Abort(context.WithoutCancel(ctx)); aerr != nil {
			r.log.Warn("aborting a backfill transaction", "partition", w.part.String(), "err", aerr)
		}
		return fmt.Errorf("stream %s: backfill partition %s, blocks %s: %w", r.cfg.ID, w.part, s, err)
	}
	part := &offsets.BackfillPartition{From: w.part.From, To: w.part.To}
	if _, err := r.commitWith(ctx, w.prod, nil, func(flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error) {
		cb := offsets.CommittedBatch{BatchID: batchID, Ranges: ranges, Rows: uint64(rows), Spans: groupSpans(flushed, batchID)}
		return offsets.Watermark{Stream: r.cfg.ID, TsMs: r.deps.Now().UnixMilli(), Cursor: reorg.Cursor{}, Rows: uint64(rows),
			Batches: []offsets.CommittedBatch{cb}, Backfill: part}, nil, nil
	}); err != nil {
		return fmt.Errorf("backfill partition %s: %w", w.part, err)
	}
	r.deps.Health.Ready() // a step committed: Amp and Kafka answer
	if left := r.backfillLeft.Add(^(s.Len() - 1)); !r.worker {
		// A cluster worker's part is not the stream's: its owner sets the
		// gauge from the control topic (backfillCluster).
		r.deps.Metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(float64(left))
	}
	r.backfillRows.Add(uint64(rows))
	w.rows += uint64(rows)
	r.emit(Event{Kind: "backfill", BatchID: batchID, Ranges: ranges, Rows: rows})
	rec := offsets.Partition{Stream: r.cfg.ID, From: w.part.From, To: w.part.To, Done: last,
		Last: &reorg.Point{Number: s.To - 1}, UpdatedAt: r.deps.Now().UTC(),
		RunStartedAt: r.backfillStart.UTC(), RunFrom: w.runFrom, Rows: w.rows}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = r.deps.Store.SavePartition(sctx, rec)
	cancel()
	if err != nil {
		// Kafka holds the truth; the record only reports progress.
		r.log.Warn("recording backfill progress in the checkpoint store", "partition", w.part.String(), "err", err)
	}
	return nil
}

func (w *backfillWorker) txnError(what string, err error) error {
	if errors.Is(err, sink.ErrFenced) {
		return fmt.Errorf("stream %s: backfill partition %s: %s: %w (another instance runs this stream; stop one of them)",
			w.r.cfg.ID, w.part, what, err)
	}
	return fmt.Errorf("stream %s: backfill partition %s: %s: %w", w.r.cfg.ID, w.part, what, err)
}

// checkSynced checks that a batch query's synced range covers the span:
// rows of blocks Amp has not synced would be missing.
func checkSynced(synced []reorg.BlockRange, network string, s source.BlockSpan) error {
	if len(synced) != 1 || synced[0].Network != network {
		return fmt.Errorf("the batch query's synced ranges %v are not one range of network %s", synced, network)
	}
	if rg := synced[0]; rg.Start > s.From || rg.End < s.To-1 {
		return fmt.Errorf("the query's tables are synced at Amp over blocks %d..=%d, which does not cover the step's blocks %s", rg.Start, rg.End, s)
	}
	return nil
}

// handover commits the hand-over checkpoint: in a watermark event of the
// stream's own producer, then to the checkpoint store.
func (r *Stream) handover(ctx context.Context, network string, end uint64) error {
	if err := r.commitSeed(ctx, reorg.NewHandover(map[string]uint64{network: end})); err != nil {
		return fmt.Errorf("committing the hand-over: %w", err)
	}
	r.deps.Metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(0)
	r.log.Info("backfill done: the live stream starts at the first block not backfilled", "network", network, "block", end)
	r.emit(Event{Kind: "handover", Detail: fmt.Sprintf("%s: live from block %d", network, end)})
	return nil
}

// spanSet accumulates block spans and keeps them merged as they come, so
// its size is bounded by the number of disjoint spans, not by the number
// added.
type spanSet struct {
	spans   []source.BlockSpan
	nMerged int // len(spans) after the last merge
}

// add adds s.
func (s *spanSet) add(sp source.BlockSpan) {
	s.spans = append(s.spans, sp)
	if len(s.spans) > 2*s.nMerged+64 {
		s.spans = mergeSpans(s.spans)
		s.nMerged = len(s.spans)
	}
}

// addBackfill adds the blocks a backfill watermark records as published
// (nothing for any other event).
func (s *spanSet) addBackfill(w *offsets.Watermark) {
	if w == nil || w.Backfill == nil {
		return
	}
	for _, b := range w.Batches {
		for _, rg := range b.Ranges {
			s.add(source.BlockSpan{From: rg.Start, To: rg.End + 1})
		}
	}
}

// merged returns the spans added, merged and sorted.
func (s *spanSet) merged() []source.BlockSpan {
	s.spans = mergeSpans(s.spans)
	s.nMerged = len(s.spans)
	return s.spans
}

// subtractSpans returns the parts of s not covered by done (merged, sorted).
func subtractSpans(s source.BlockSpan, done []source.BlockSpan) []source.BlockSpan {
	var out []source.BlockSpan
	at := s.From
	for _, d := range done {
		if d.To <= at || d.From >= s.To {
			continue
		}
		if d.From > at {
			out = append(out, source.BlockSpan{From: at, To: d.From})
		}
		at = max(at, d.To)
		if at >= s.To {
			break
		}
	}
	if at < s.To {
		out = append(out, source.BlockSpan{From: at, To: s.To})
	}
	return out
}

// mergeSpans sorts spans and merges the overlapping and adjacent ones.
func mergeSpans(spans []source.BlockSpan) []source.BlockSpan {
	slices.SortFunc(spans, func(a, b source.BlockSpan) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To))
	})
	var out []source.BlockSpan
	for _, s := range spans {
		if s.Len() == 0 {
			continue
		}
		if n := len(out); n > 0 && s.From <= out[n-1].To {
			out[n-1].To = max(out[n-1].To, s.To)
			continue
		}
		out = append(out, s)
	}
	return out
}
