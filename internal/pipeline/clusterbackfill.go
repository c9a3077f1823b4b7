package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// A backfill in cluster mode (Deps.ClusterBackfill) is shared by the
// members: its workers are cluster items of their own
// (RunBackfillWorker), which any member may run, and the stream's owner
// only plans it, waits for the workers' steps and hands over to live.
//
//   - The owner fixes the plan once in the checkpoint store
//     (offsets.PlanStore.ClaimPlan: the first plan stored wins), so that
//     every worker publishes partitions of the same span whatever head its
//     member probed, and no block is published by two workers.
//   - Worker k publishes the plan's partitions whose index is k modulo the
//     plan's workers, each step in a transaction of its transactional id
//     {prefix}.{stream}.backfill.{k}: a member that takes worker k over
//     fences the one that ran it, and runs only the steps no committed
//     watermark event covers, as a restarted backfill does.
//   - The owner reads the control topic's committed backfill events as they
//     come; once they cover the plan, it commits the hand-over (or ends a
//     one-shot load) and drops the plan.

// clusterPollEvery is how often the owner of a cluster backfill reads the
// workers' progress, and how often an idle worker looks for a plan.
const clusterPollEvery = time.Second

// planStore returns the store's backfill plans, which cluster mode needs.
func (r *Stream) planStore() (offsets.PlanStore, error) {
	ps, ok := r.deps.Store.(offsets.PlanStore)
	if !ok {
		return nil, fmt.Errorf("stream %s: a backfill in cluster mode needs checkpoint.store: redis (the members share its plan): %w",
			r.cfg.ID, config.ErrInvalid)
	}
	return ps, nil
}

// backfillCluster is the owner's part of a cluster backfill of plan.
func (r *Stream) backfillCluster(ctx context.Context, plan *backfillPlan) error {
	ps, err := r.planStore()
	if err != nil {
		return err
	}
	want := offsets.BackfillPlan{Stream: r.cfg.ID, Network: plan.network, From: plan.from, End: plan.end,
		Workers: max(r.cfg.Backfill.Workers, 1), CreatedAt: r.deps.Now().UTC()}
	for _, p := range plan.parts {
		want.Parts = append(want.Parts, offsets.PlanPart{From: p.From, To: p.To})
	}
	stored, err := ps.ClaimPlan(ctx, want)
	if err != nil {
		return fmt.Errorf("stream %s: storing the backfill plan: %w", r.cfg.ID, NoAnswer(StoreService(r.deps.Store), err))
	}
	if stored.CreatedAt != want.CreatedAt {
		r.log.Info("backfill: resuming the plan stored by an earlier owner", "from", stored.From, "to", stored.End,
			"partitions", len(stored.Parts), "workers", stored.Workers, "created_at", stored.CreatedAt)
	}
	plan.network, plan.from, plan.end = stored.Network, stored.From, stored.End
	r.deps.Health.Ready()
	total := plan.end - plan.from
	r.backfillStart = r.deps.Now()
	var done spanSet
	from := int64(-1)
	logged := time.Time{}
	for {
		var err error
		if from, err = r.scanBackfill(ctx, from, &done); err != nil {
			if Permanent(err) {
				return err
			}
			// A worker killed inside a step holds the control topic's last
			// stable offset until its successor fences it: wait.
			r.log.Debug("reading the cluster backfill's progress", "err", err)
		} else {
			left := uint64(0)
			for _, s := range subtractSpans(source.BlockSpan{From: plan.from, To: plan.end}, done.merged()) {
				left += s.Len()
			}
			r.backfillLeft.Store(left)
			r.deps.Metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(float64(left))
			if left == 0 {
				break
			}
			if now := r.deps.Now(); now.Sub(logged) >= r.deps.ProgressEvery {
				logged = now
				r.log.Info("backfill progress (cluster: the workers run on the members that own them)", "network", plan.network,
					"blocks_done", total-left, "blocks_total", total, "partitions", len(stored.Parts), "workers", stored.Workers)
			}
		}
		t := time.NewTimer(clusterPollEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	r.log.Info("backfill published by the cluster's workers", "network", plan.network, "from", plan.from, "to", plan.end,
		"took", r.deps.Now().Sub(r.backfillStart).Round(time.Millisecond))
	if r.cfg.Mode == config.ModeOnce {
		err = r.loadDone(plan, total)
	} else {
		err = r.handover(ctx, plan.network, plan.end)
	}
	if err != nil && !errors.Is(err, errLoadDone) {
		return err
	}
	if derr := ps.DropPlan(context.WithoutCancel(ctx), r.cfg.ID); derr != nil {
		r.log.Warn("dropping the backfill plan after the hand-over (the next start drops it)", "err", derr)
	}
	return err
}

// scanBackfill adds the blocks of the stream's committed backfill events
// after control offset from (-1: the whole topic, checked against the
// partition records) to done, and returns the offset to go on from.
func (r *Stream) scanBackfill(ctx context.Context, from int64, done *spanSet) (int64, error) {
	var recs []offsets.Partition
	if from < 0 {
		// Before the control topic: see backfillDone.
		var err error
		if recs, err = r.partitionRecords(ctx); err != nil {
			return from, err
		}
	}
	defer r.deps.Health.Track("kafka: reading the backfill's progress from the control topic")()
	ctl := r.control()
	b, err := ctl.Bounds(ctx)
	if err != nil {
		return from, fmt.Errorf("stream %s: reading the backfill's progress: %w", r.cfg.ID, err)
	}
	start := max(from, b.Start)
	if err := ctl.Scan(ctx, r.cfg.ID, start, b.End, func(h offsets.HistoryEvent) error {
		done.addBackfill(h.Event.Watermark)
		return nil
	}); err != nil {
		return from, fmt.Errorf("stream %s: reading the backfill's progress: %w", r.cfg.ID, err)
	}
	if from < 0 {
		if _, err := r.checkPartitionRecords(recs, done.merged()); err != nil {
			return from, err
		}
	}
	return b.End, nil
}

// dropStalePlan deletes the plan of a stream that has gone live (an owner
// that handed over and died before dropping it).
func (r *Stream) dropStalePlan(ctx context.Context) {
	ps, ok := r.deps.Store.(offsets.PlanStore)
	if !ok || !r.deps.ClusterBackfill {
		return
	}
	if _, err := ps.Plan(ctx, r.cfg.ID); err == nil {
		if err := ps.DropPlan(ctx, r.cfg.ID); err != nil {
			r.log.Warn("dropping the backfill plan of a stream that has gone live", "err", err)
		}
	}
}

// RunBackfillWorker runs backfill worker k of the stream in cluster mode
// (a cluster item of its own) until it has published its partitions of
// the stored plan, the stream has gone live (then it has nothing to do),
// or ctx ends. It waits for the owner to store the plan. Errors restart it
// as Run restarts a stream; a permanent one is returned.
func (r *Stream) RunBackfillWorker(ctx context.Context, k int) error {
	sup := supervisor{min: r.deps.RestartMin, max: r.deps.RestartMax, now: r.deps.Now,
		restarted: func(err error, pause time.Duration) {
			r.log.Warn("restarting backfill worker", "worker", k, "err", err, "in", pause)
		}}
	return sup.run(ctx, func(ctx context.Context) error {
		err := r.workerOnce(ctx, k)
		r.close(ctx)
		r.backfilling.Store(false)
		return err
	})
}

// workerOnce is one run of RunBackfillWorker.
func (r *Stream) workerOnce(ctx context.Context, k int) error {
	ps, err := r.planStore()
	if err != nil {
		return err
	}
	var stored offsets.BackfillPlan
	for {
		cp, err := r.deps.Store.Load(ctx, r.cfg.ID)
		switch {
		case err == nil && !isFresh(cp):
			r.log.Debug("backfill worker idle: the stream has gone live", "worker", k)
			r.goneLive.Store(true)
			return r.fenceWorker(ctx, k)
		case err != nil && !errors.Is(err, offsets.ErrNotFound):
			return fmt.Errorf("stream %s: backfill worker %d: loading the checkpoint: %w", r.cfg.ID, k, NoAnswer(StoreService(r.deps.Store), err))
		}
		stored, err = ps.Plan(ctx, r.cfg.ID)
		if err == nil {
			break
		}
		if !errors.Is(err, offsets.ErrNotFound) {
			return fmt.Errorf("stream %s: backfill worker %d: loading the plan: %w", r.cfg.ID, k, NoAnswer(StoreService(r.deps.Store), err))
		}
		t := time.NewTimer(clusterPollEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	if k >= stored.Workers {
		r.log.Info("backfill worker idle: the stored plan has fewer workers", "worker", k, "workers", stored.Workers)
		return r.fenceWorker(ctx, k)
	}
	r.backfilling.Store(true)
	if err := r.connectWorker(ctx, k, stored.Network); err != nil {
		return err
	}
	done, err := r.backfillDone(ctx)
	if err != nil {
		return err
	}
	plan := &backfillPlan{network: stored.Network, column: r.cfg.Backfill.Column, from: stored.From, end: stored.End, done: done}
	if plan.whole, err = r.wholeRange(); err != nil {
		return err
	}
	w, err := r.newBackfillWorker(plan, r.bfProds[0], k)
	if err != nil {
		return err
	}
	w.beforeStep = func(ctx context.Context) error {
		// The plan is the store's: one replaced (Redis lost it and a new
		// owner stored another) must not be published beside the new one.
		now, err := ps.Plan(ctx, r.cfg.ID)
		if err != nil && !errors.Is(err, offsets.ErrNotFound) {
			return fmt.Errorf("stream %s: backfill worker %d: checking the plan: %w", r.cfg.ID, k, NoAnswer(StoreService(r.deps.Store), err))
		}
		if err != nil || !now.CreatedAt.Equal(stored.CreatedAt) {
			return fmt.Errorf("stream %s: backfill worker %d: the stored plan changed under the worker (the checkpoint store lost it, or the stream handed over); starting again from the store", r.cfg.ID, k)
		}
		return nil
	}
	r.worker = true
	r.backfillStart = r.deps.Now()
	r.deps.Health.Ready()
	blocks := uint64(0)
	var mine []source.BlockSpan
	for i, p := range stored.Parts {
		if i%stored.Workers == k {
			span := source.BlockSpan{From: p.From, To: p.To}
			mine = append(mine, span)
			for _, s := range subtractSpans(span, done) {
				blocks += s.Len()
			}
		}
	}
	r.backfillLeft.Store(blocks)
	r.log.Info("backfill worker", "worker", k, "partitions", len(mine), "blocks_to_run", blocks)
	for _, span := range mine {
		if rest := subtractSpans(span, done); len(rest) > 0 {
			if err := w.partition(ctx, span, rest); err != nil {
				return err
			}
		}
	}
	r.log.Info("backfill worker published its partitions", "worker", k, "blocks", blocks,
		"took", r.deps.Now().Sub(r.backfillStart).Round(time.Millisecond))
	return nil
}

// fenceWorker initialises the transactional id of worker k, which has
// nothing to do, and closes its producer. The member that ran the worker
// before may have been killed inside a step: its transaction, left open,
// holds the control topic's last stable offset, and with it the start of
// every stream of the cluster, until the broker aborts it after
// kafka.transaction_timeout. A worker that publishes fences it when it
// connects (connectWorker); an idle one must too, since it is the item's
// owner now. (One process fences its workers at the stream's start:
// fenceBackfillWorkers.)
func (r *Stream) fenceWorker(ctx context.Context, k int) error {
	prod, err := sink.NewProducer(ctx, r.backfillKafka(), r.backfillWorkerID(k), r.sinkDeps())
	if err != nil {
		return fmt.Errorf("stream %s: fencing the transactional id of idle backfill worker %d: %w", r.cfg.ID, k,
			NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}
	return prod.Close(ctx)
}

// connectWorker prepares worker k: Amp's schema, the control topic, the
// worker's producer (which fences the member that ran it before), the
// reader and the data topic of network.
func (r *Stream) connectWorker(ctx context.Context, k int, network string) error {
	schema, err := r.deps.Amp.Schema(ctx, r.cfg.SQL)
	if err != nil {
		return fmt.Errorf("planning the stream's SQL at Amp: %w", NoAnswer(AmpService(r.deps.Amp), err))
	}
	if schema, err = r.bindLabels(schema); err != nil {
		return err
	}
	r.schema, r.fingerprint = schema, fingerprintOf(r.cfg.SQL, schema)
	r.topic, r.enc = "", nil
	if r.hanging, err = r.deps.Admin.PrepareHangingCheck(ctx, sink.TransactionalID(r.deps.Kafka.TransactionalIDPrefix, r.backfillWorkerID(k))); err != nil {
		return fmt.Errorf("stream %s: %w", r.cfg.ID, err)
	}
	prod, err := sink.NewProducer(ctx, r.backfillKafka(), r.backfillWorkerID(k), r.sinkDeps())
	if err != nil {
		return fmt.Errorf("stream %s: starting the producer of backfill worker %d: %w", r.cfg.ID, k, NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}
	r.bfProds = append(r.bfProds, prod)
	if err := r.hanging.Check(ctx, r.deps.ControlTopic); err != nil {
		return fmt.Errorf("stream %s: checking the control topic for transactions left open: %w", r.cfg.ID, err)
	}
	if r.reader, err = sink.NewReader(ctx, r.deps.Kafka, r.sinkDeps()); err != nil {
		return fmt.Errorf("starting the reader of stream %s: %w", r.cfg.ID, NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}
	return r.setupTopic(ctx, []string{network})
}
