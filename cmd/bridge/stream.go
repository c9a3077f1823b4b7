package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// Header names written on every data record (design.md §4).
const (
	headerBatchID = "amp-batch-id"
	headerOp      = sink.HeaderOp
	headerNetwork = "amp-network"
	headerRange   = "amp-range"
	headerStream  = "amp-stream"
	controlGroup  = "\x00control"
)

// errRestart asks the stream's supervisor to rebuild the stream from its
// checkpoint and Kafka: a transaction's outcome is unknown, or state in
// memory can no longer be trusted.
var errRestart = errors.New("restarting the stream from its checkpoint")

// streamDeps are what a stream runner is built from; cmd wires them.
type streamDeps struct {
	log      *slog.Logger
	metrics  *bridgeMetrics
	amp      *source.Client
	kafka    sink.Config
	sinkDeps sink.Deps
	admin    *sink.Admin
	store    offsets.Store
	registry *encode.Registry // nil: single-object encoding
	control  *encode.ControlCodec
	version  string
	now      func() time.Time
	// kafkaControlTopic and kafkaReplication come from the kafka config.
	kafkaControlTopic string
	kafkaReplication  int
	// ready reports whether the stream is connected to Amp, Kafka, the
	// registry and its checkpoint (for /readyz); nil ignores it.
	ready func(stream string, ok bool)
	// restartMin and restartMax bound the pause before a stream restarts
	// after a transient error.
	restartMin, restartMax time.Duration
	// events receives a line per published or retracted batch (bridge demo);
	// nil means none.
	events func(streamEvent)
	// heads asks Amp how far a query's tables are synced, per network; nil
	// disables the head poller.
	heads func(ctx context.Context, sql string) (map[string]uint64, error)
	// fullEvery overrides the constant fullEvery (tests).
	fullEvery int
}

// streamEvent is a human-readable account of one thing a stream did.
type streamEvent struct {
	Stream  string
	Kind    string // "commit", "retract", "reorg", "reconnect"
	BatchID string
	Ranges  []reorg.BlockRange
	Rows    int
	Detail  string
}

// pendingBatch is a complete microbatch inside the open transaction.
type pendingBatch struct {
	wm   reorg.Event
	rows int
}

// streamRunner publishes one stream. It is driven by a single goroutine.
type streamRunner struct {
	cfg  config.StreamConfig
	deps streamDeps
	log  *slog.Logger

	schema      *arrow.Schema
	fingerprint string
	encCfg      encode.Config
	enc         *encode.Encoder
	retractor   *encode.Retractor
	topic       string
	out         encode.Batch
	ctlBuf      []byte

	prod    *sink.Producer
	reader  *sink.Reader
	machine *reorg.Machine
	stream  *source.Stream

	// committed is the last checkpoint the store accepted (its Version is
	// what the next commit must follow); its Batches are the committed
	// batch log that retractions read spans from.
	committed offsets.Checkpoint
	resume    reorg.Cursor
	// lastFull is the control offset of this run's newest watermark event
	// that carries the checkpoint (-1 before the first), and sinceFull the
	// commits since: the others carry only the state (fullEvery).
	lastFull  int64
	sinceFull int
	// backfillLeft counts the blocks the backfill's workers have still to
	// publish (for amp_bridge_backfill_blocks_remaining).
	backfillLeft atomic.Uint64
	// bfProds are the backfill workers' producers, created in setup.
	bfProds []*sink.Producer
	// committedCursor holds the committed cursor (a reorg.Cursor never
	// modified after it is stored) for the head poller's goroutine.
	committedCursor atomic.Value

	// The open transaction.
	txnOpen   bool
	txnBegan  time.Time
	txnRows   int
	pending   []pendingBatch
	dirty     bool // Data after the last pending watermark
	undo      []encode.Undo
	rowOffset map[string]int64
}

// fingerprintOf identifies a stream's SQL and Arrow schema.
func fingerprintOf(sql string, s *arrow.Schema) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(sql) + "\n" + s.String()))
	return hex.EncodeToString(sum[:16])
}

// permanent reports whether retrying cannot fix err: the data, the
// configuration or another instance is in the way, and an operator must act.
// Everything else (a broker or Redis restarting, Amp unavailable, an unknown
// transaction outcome) restarts the stream from its checkpoint and Kafka.
func permanent(err error) bool {
	var verr *encode.ValueError
	return errors.Is(err, reorg.ErrUnrecoverable) || errors.Is(err, reorg.ErrInvalidRanges) ||
		errors.Is(err, sink.ErrFenced) || errors.Is(err, offsets.ErrFenced) ||
		errors.Is(err, offsets.ErrStoreAhead) || errors.Is(err, offsets.ErrDiverged) ||
		errors.Is(err, offsets.ErrFingerprintChanged) || errors.Is(err, offsets.ErrInvalid) ||
		errors.Is(err, offsets.ErrUnsupportedFormat) || errors.Is(err, source.ErrPermanent) ||
		errors.Is(err, encode.ErrUnsupportedType) || errors.Is(err, encode.ErrNameCollision) ||
		errors.Is(err, encode.ErrIncompatible) || errors.As(err, &verr) || errors.Is(err, config.ErrInvalid)
}

// run publishes the stream until ctx ends or a permanent error. Any other
// error rebuilds everything from the checkpoint and Kafka, after a capped,
// growing pause.
func (r *streamRunner) run(ctx context.Context) error {
	pause := r.deps.restartMin
	for {
		began := r.deps.now()
		err := r.runOnce(ctx)
		r.setReady(false)
		r.close(ctx)
		if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || !permanent(err)) {
			return nil
		}
		if err == nil || permanent(err) {
			return err
		}
		if r.deps.now().Sub(began) > 10*r.deps.restartMax {
			pause = r.deps.restartMin // it ran well for a while: start the backoff over
		}
		r.log.Warn("restarting the stream from its checkpoint", "err", err, "in", pause)
		r.deps.metrics.restarts.WithLabelValues(r.cfg.ID).Inc()
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		pause = min(2*pause, r.deps.restartMax)
	}
}

func (r *streamRunner) close(ctx context.Context) {
	if r.stream != nil {
		_ = r.stream.Close()
		r.stream = nil
	}
	if r.prod != nil {
		if err := r.prod.Close(context.WithoutCancel(ctx)); err != nil {
			r.log.Warn("closing producer", "err", err)
		}
		r.prod = nil
	}
	if r.reader != nil {
		r.reader.Close()
		r.reader = nil
	}
	r.closeBackfillWorkers(ctx)
	r.txnOpen, r.pending, r.undo, r.dirty, r.txnRows = false, nil, nil, false, 0
	r.out.Reset()
}

// setup prepares the control topic, the producer (which fences a previous
// instance and aborts its open transaction), the checkpoint and the reorg
// state, and the data topic when its name is known (see setupTopic).
func (r *streamRunner) setup(ctx context.Context) error {
	schema, err := r.deps.amp.Schema(ctx, r.cfg.SQL)
	if err != nil {
		return fmt.Errorf("planning the stream's SQL at Amp: %w", err)
	}
	r.schema = schema
	r.fingerprint = fingerprintOf(r.cfg.SQL, schema)
	r.topic, r.enc = "", nil
	if _, err := r.deps.admin.EnsureTopics(ctx, sink.TopicSpec{Name: r.deps.controlTopic(), Kind: sink.TopicControl,
		Partitions: 1, ReplicationFactor: int16(r.deps.replicationFactor())}); err != nil {
		return fmt.Errorf("preparing the control topic of stream %s: %w", r.cfg.ID, err)
	}

	// The producer first: initialising the transactional id fences a
	// previous instance and aborts its open transaction, so the control
	// topic's last stable offset moves past it before we read.
	if r.prod, err = sink.NewProducer(ctx, r.deps.kafka, r.cfg.ID, r.deps.sinkDeps); err != nil {
		return fmt.Errorf("starting the producer of stream %s: %w", r.cfg.ID, err)
	}
	// The backfill's workers too: a previous instance killed inside its
	// backfill leaves their transactions open, and the control topic's
	// last stable offset would wait for them until they time out.
	if r.cfg.Backfill.Enabled {
		if err := r.fenceBackfillWorkers(ctx); err != nil {
			return err
		}
	}
	if r.reader, err = sink.NewReader(ctx, r.deps.kafka, r.deps.sinkDeps); err != nil {
		return fmt.Errorf("starting the reader of stream %s: %w", r.cfg.ID, err)
	}
	// Create every series at zero, so increase() sees the first event.
	for _, o := range offsets.Outcomes() {
		r.deps.metrics.reconciliations.WithLabelValues(r.cfg.ID, o.String())
	}
	for _, c := range []*prometheus.CounterVec{r.deps.metrics.polled, r.deps.metrics.batchesCommitted, r.deps.metrics.reorgs,
		r.deps.metrics.retractions, r.deps.metrics.reconnects, r.deps.metrics.restarts, r.deps.metrics.checkpointErrors} {
		c.WithLabelValues(r.cfg.ID)
	}
	dec, err := offsets.Recover(ctx, r.deps.store, &controlReader{reader: r.reader, codec: r.deps.control, topic: r.deps.controlTopic()},
		r.cfg.ID, r.fingerprint, r.deps.now())
	r.deps.metrics.reconciliations.WithLabelValues(r.cfg.ID, dec.Outcome.String()).Inc()
	if err != nil {
		return fmt.Errorf("reconciling the checkpoint of stream %s with Kafka: %w", r.cfg.ID, err)
	}
	r.committed = dec.Checkpoint
	r.lastFull, r.sinceFull = -1, 0
	r.log.Info("checkpoint reconciled", "outcome", dec.Outcome.String(), "version", r.committed.Version,
		"cursor", cursorText(r.committed.Cursor()), "retained_batches", len(r.committed.Batches))
	if r.cfg.Backfill.Enabled {
		if isFresh(r.committed) {
			if err := r.backfill(ctx); err != nil {
				return err
			}
		} else {
			r.deps.metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(0)
			r.log.Debug("backfill not run: the stream has gone live", "cursor", cursorText(r.committed.Cursor()))
		}
		r.closeBackfillWorkers(ctx)
	}
	rcfg := reorg.DefaultConfig()
	rcfg.Retention = r.cfg.RetentionBlocks
	if r.machine, err = reorg.New(rcfg, r.committed.Snapshot); err != nil {
		return fmt.Errorf("restoring the reorg state of stream %s: %w", r.cfg.ID, err)
	}
	for _, ev := range r.machine.Start() {
		// A Rewind covers only events after the last committed watermark:
		// they were in aborted or never-committed transactions, invisible
		// to read_committed consumers, so nothing needs retracting.
		r.log.Info("rewinding uncommitted events after a restart", "first_seq", ev.First, "last_seq", ev.Last)
	}
	r.resume = r.committed.Cursor()
	for net, p := range r.resume {
		r.deps.metrics.committedBlock.WithLabelValues(r.cfg.ID, net).Set(float64(p.Number))
	}
	r.committedCursor.Store(r.resume)
	r.rowOffset = map[string]int64{}
	if r.enc != nil { // prepared by the backfill
		return nil
	}
	// The data topic: now when its name does not depend on the network or
	// the checkpoint names the network; else at the first block range.
	if !strings.Contains(r.cfg.Topic, "{network}") {
		return r.setupTopic(ctx, nil)
	}
	if nets := r.committed.Cursor().Networks(); len(nets) > 0 {
		return r.setupTopic(ctx, nets)
	}
	return nil
}

// setupTopic compiles the encoder, registers the schemas and prepares the
// data topic for the stream's networks.
func (r *streamRunner) setupTopic(ctx context.Context, networks []string) error {
	topic, err := r.cfg.TopicName(networks)
	if err != nil {
		return err
	}
	encCfg, err := r.cfg.EncodeConfig(topic, r.deps.version)
	if err != nil {
		return err
	}
	enc, err := encode.NewEncoder(encCfg, r.schema)
	if err != nil {
		return fmt.Errorf("compiling the Avro encoder of stream %s: %w", r.cfg.ID, err)
	}
	if r.deps.registry != nil {
		if err := r.deps.registry.Prepare(ctx, topic, enc); err != nil {
			return fmt.Errorf("registering the schemas of stream %s: %w", r.cfg.ID, err)
		}
	} else {
		vf, err := encode.SingleObjectFraming(enc.Schemas().Value)
		if err != nil {
			return err
		}
		var kf encode.Framing
		if enc.Schemas().Key != "" {
			if kf, err = encode.SingleObjectFraming(enc.Schemas().Key); err != nil {
				return err
			}
		}
		enc.SetFraming(vf, kf)
	}
	r.retractor = encode.NewRetractor()
	if err := r.retractor.Add(enc.ValueFraming(), enc.Schemas().Value); err != nil {
		return err
	}
	keyMode := sink.KeyBatch
	if r.cfg.Key == config.KeyRow {
		keyMode = sink.KeyRow
	}
	states, err := r.deps.admin.EnsureTopics(ctx,
		sink.TopicSpec{Name: topic, Kind: sink.TopicData, KeyMode: keyMode, Partitions: int32(r.cfg.Partitions),
			ReplicationFactor: int16(r.deps.replicationFactor()), CleanupPolicy: sink.CleanupDelete})
	if err != nil {
		return fmt.Errorf("preparing the data topic of stream %s: %w", r.cfg.ID, err)
	}
	r.topic, r.enc, r.encCfg = topic, enc, encCfg
	return r.checkPartitions(states)
}

// checkPartitions checks, in batch-key mode, that every retained batch's
// records sit on the partition its key hashes to with the data topic's
// current partition count: a count changed under a running stream would
// send retractions to other partitions than the rows they retract.
func (r *streamRunner) checkPartitions(states []sink.TopicState) error {
	if r.cfg.Key == config.KeyRow {
		return nil
	}
	var n int32
	for _, st := range states {
		if st.Name == r.topic {
			n = st.Partitions
		}
	}
	if n > 1 {
		// Said once per start: consumers that key rows by a column need
		// to know (README, "Order across batches").
		r.log.Info("the data topic is keyed by batch id over several partitions: a reorg's replacement rows can be read "+
			"before the retraction of the rows they replace, so key downstream tables by (source.batch_id, source.row), "+
			"or run the stream with key: row and key_columns naming the table's key",
			"topic", r.topic, "partitions", n)
	}
	for _, b := range r.committed.Batches {
		for _, sp := range b.Spans {
			if sp.Topic != r.topic {
				continue
			}
			if want := sink.KeyPartition([]byte(b.ID), n); sp.Partition != want {
				return fmt.Errorf("stream %s: data topic %s has %d partitions, but batch %s was written to partition %d (it would now hash to %d): "+
					"the partition count changed under a running stream, so retractions would land on other partitions than the rows they retract; "+
					"restore the partition count, or publish to a new topic under a new stream id: %w",
					r.cfg.ID, r.topic, n, b.ID, sp.Partition, want, config.ErrInvalid)
			}
		}
	}
	return nil
}

func (d streamDeps) controlTopic() string   { return d.kafkaControlTopic }
func (d streamDeps) replicationFactor() int { return d.kafkaReplication }

func cursorText(c reorg.Cursor) string {
	if len(c) == 0 {
		return "(start)"
	}
	s, err := c.Header()
	if err != nil {
		return err.Error()
	}
	return s
}

func (r *streamRunner) runOnce(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		return err
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	r.setReady(true)
	if r.cfg.HeadPollInterval > 0 && r.deps.heads != nil {
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.pollHead(pctx)
		}()
		defer func() { cancel(); <-done }()
	}
	for {
		env, err := r.next(ctx)
		if errors.Is(err, errCommitDue) {
			if err := r.commit(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return r.shutdown(ctx)
			}
			return fmt.Errorf("reading stream %s from Amp: %w", r.cfg.ID, err)
		}
		if err := r.handle(ctx, env); err != nil {
			if ctx.Err() != nil {
				return r.shutdown(ctx)
			}
			return err
		}
	}
}

// fullEvery is how often a watermark event carries the whole checkpoint
// (about 570 bytes per retained batch: 73 KB at 128 single-block batches);
// the others carry the batches they commit and the retained sequence
// numbers, from which offsets.RollForward rebuilds it. A run's first
// watermark always carries it.
const fullEvery = 64

// errCommitDue is returned by next when the open transaction's budget ran
// out while waiting for Amp: a quiet chain must not hold committed-looking
// work back until the next block.
var errCommitDue = errors.New("transaction budget used up")

// next waits for the next envelope, but no longer than the open
// transaction's remaining time budget when it ends at a watermark.
func (r *streamRunner) next(ctx context.Context) (source.Envelope, error) {
	if len(r.pending) == 0 || r.dirty {
		return r.stream.Next(ctx)
	}
	wait := r.budget().Remaining(r.txnBegan, r.deps.now())
	if wait <= 0 {
		return source.Envelope{}, errCommitDue
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	env, err := r.stream.Next(wctx)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return source.Envelope{}, errCommitDue
	}
	return env, err
}

// open (re)opens the Amp stream from r.resume.
func (r *streamRunner) open(ctx context.Context) error {
	if r.stream != nil {
		_ = r.stream.Close()
	}
	r.log.Info("opening the Amp stream", "cursor", cursorText(r.resume))
	s, err := r.deps.amp.Stream(ctx, r.cfg.SQL, func() reorg.Cursor { return r.resume })
	if err != nil {
		return fmt.Errorf("opening stream %s at Amp: %w", r.cfg.ID, err)
	}
	r.stream = s
	return nil
}

func (r *streamRunner) handle(ctx context.Context, env source.Envelope) error {
	defer env.Release()
	if env.Kind == source.KindReconnect {
		r.deps.metrics.reconnects.WithLabelValues(r.cfg.ID).Inc()
		r.emit(streamEvent{Kind: "reconnect", Detail: fmt.Sprint(env.Cause)})
		// The source resumes from r.resume; everything not committed is
		// replayed, so drop it.
		if err := r.rollback(ctx, "amp stream reconnected"); err != nil {
			return err
		}
		return nil
	}
	rows := 0
	if env.Batch != nil {
		rows = int(env.Batch.NumRows())
		r.deps.metrics.polled.WithLabelValues(r.cfg.ID).Add(float64(rows))
	}
	if r.enc == nil && len(env.Ranges) > 0 {
		nets := make([]string, len(env.Ranges))
		for i, rg := range env.Ranges {
			nets[i] = rg.Network
		}
		if err := r.setupTopic(ctx, nets); err != nil {
			return err
		}
	}
	events, err := r.machine.Apply(env.Ranges, env.Complete, rows)
	var reconnect *reorg.ReconnectError
	if err != nil && !errors.As(err, &reconnect) {
		return fmt.Errorf("stream %s: %w", r.cfg.ID, err)
	}
	for _, ev := range events {
		switch ev.Kind {
		case reorg.KindData:
			if err := r.data(ctx, ev, env); err != nil {
				return err
			}
		case reorg.KindWatermark:
			if !r.txnOpen && len(r.pending) == 0 {
				// A microbatch without rows: the budget runs from now.
				r.txnBegan = r.deps.now()
			}
			r.pending = append(r.pending, pendingBatch{wm: ev, rows: int(r.rowOffset[ev.BatchID])})
			delete(r.rowOffset, ev.BatchID)
			r.dirty = false
		case reorg.KindUndo:
			replayed, err := r.undoEvent(ctx, ev)
			if err != nil {
				return err
			}
			if replayed {
				return nil // the rest of this Apply is void; the stream reopened
			}
		}
	}
	if reconnect != nil {
		r.resume = reconnect.Cursor
		r.log.Info("reconnecting to Amp before a reorg's fork point", "cursor", cursorText(reconnect.Cursor))
		return r.open(ctx)
	}
	if len(r.pending) > 0 && !r.dirty && r.budget().Due(r.txnRows, r.txnBegan, r.deps.now()) {
		return r.commit(ctx)
	}
	return nil
}

func (r *streamRunner) budget() sink.Budget {
	return sink.Budget{MaxRows: r.cfg.Transaction.MaxRows, MaxAge: r.cfg.Transaction.MaxAge}
}

func (r *streamRunner) begin() error {
	if r.txnOpen {
		return nil
	}
	if err := r.prod.Begin(); err != nil {
		return r.txnError("beginning a transaction", err)
	}
	r.txnOpen, r.txnBegan, r.txnRows = true, r.deps.now(), 0
	return nil
}

// txnError classifies a transaction error: fencing stops the stream,
// anything else restarts it from the checkpoint and Kafka.
func (r *streamRunner) txnError(what string, err error) error {
	if errors.Is(err, sink.ErrFenced) {
		return fmt.Errorf("stream %s: %s: %w (another instance runs this stream; stop one of them)", r.cfg.ID, what, err)
	}
	return fmt.Errorf("stream %s: %s: %w: %w", r.cfg.ID, what, err, errRestart)
}

func (r *streamRunner) data(ctx context.Context, ev reorg.Event, env source.Envelope) error {
	if env.Batch == nil || env.Batch.NumRows() == 0 {
		return nil
	}
	if err := r.begin(); err != nil {
		return err
	}
	before := r.out.Len()
	meta := encode.BatchMeta{Op: encode.OpCreate, Ranges: ev.Ranges, BatchID: ev.BatchID,
		TsMs: r.deps.now().UnixMilli(), RowOffset: r.rowOffset[ev.BatchID]}
	if err := r.enc.Encode(env.Batch, meta, &r.out); err != nil {
		return fmt.Errorf("stream %s: encoding batch %s: %w", r.cfg.ID, ev.BatchID, err)
	}
	n := r.out.Len() - before
	headers := recordHeaders(r.cfg.ID, ev.BatchID, "c", ev.Ranges)
	key := []byte(ev.BatchID)
	for i := before; i < r.out.Len(); i++ {
		k := key
		if r.cfg.Key == config.KeyRow {
			k = r.out.Key(i)
		}
		if err := r.prod.Produce(ctx, sink.Record{Topic: r.topic, Key: k, Value: r.out.Value(i), Headers: headers, Group: ev.BatchID, Op: "c"}); err != nil {
			return r.txnError("producing records", err)
		}
	}
	r.rowOffset[ev.BatchID] += int64(n)
	r.txnRows += n
	r.dirty = true
	return nil
}

func recordHeaders(stream, batchID, op string, ranges []reorg.BlockRange) []sink.Header {
	nets := make([]string, len(ranges))
	spans := make([]string, len(ranges))
	for i, rg := range ranges {
		nets[i] = rg.Network
		spans[i] = strconv.FormatUint(rg.Start, 10) + "-" + strconv.FormatUint(rg.End, 10)
	}
	return []sink.Header{
		{Key: headerBatchID, Value: []byte(batchID)},
		{Key: headerOp, Value: []byte(op)},
		{Key: headerNetwork, Value: []byte(strings.Join(nets, "|"))},
		{Key: headerRange, Value: []byte(strings.Join(spans, "|"))},
		{Key: headerStream, Value: []byte(stream)},
	}
}

// undoEvent handles an Undo; it reports whether the stream was reopened and
// the rest of the Apply must be dropped.
func (r *streamRunner) undoEvent(ctx context.Context, ev reorg.Event) (bool, error) {
	if ev.Cause == reorg.CauseRewind {
		return false, nil
	}
	depth := uint64(0)
	for _, inv := range ev.Invalidations {
		depth = max(depth, inv.End-inv.Start+1)
	}
	r.deps.metrics.reorgs.WithLabelValues(r.cfg.ID).Inc()
	r.deps.metrics.reorgDepth.WithLabelValues(r.cfg.ID).Observe(float64(depth))
	r.log.Info("reorg", "invalidations", fmt.Sprint(ev.Invalidations), "first_seq", ev.First, "last_seq", ev.Last,
		"retract", len(ev.Retract), "abort", ev.Abort, "replay", ev.Replay)
	r.emit(streamEvent{Kind: "reorg", Detail: fmt.Sprintf("%v: %d committed batch(es) to retract", ev.Invalidations, len(ev.Retract))})
	if ev.Replay {
		if err := r.rollback(ctx, "reorg inside the open transaction"); err != nil {
			return false, err
		}
		return true, r.open(ctx)
	}
	if ev.Abort {
		if err := r.abort(ctx, "reorg invalidated the open transaction"); err != nil {
			return false, err
		}
	}
	if len(ev.Retract) == 0 {
		return false, nil
	}
	if err := r.begin(); err != nil {
		return false, err
	}
	u := encode.Undo{Stream: r.cfg.ID, Sequence: ev.Seq, TsMs: r.deps.now().UnixMilli(), Cause: ev.Cause.String(),
		FirstSequence: ev.First, LastSequence: ev.Last}
	for _, inv := range ev.Invalidations {
		u.Ranges = append(u.Ranges, encode.InvalidatedRange{Network: inv.Network, Start: inv.Start, End: inv.End})
	}
	for _, wm := range ev.Retract {
		b, ok := r.batch(wm.Seq)
		if !ok {
			return false, fmt.Errorf("stream %s: the checkpoint's batch log has no batch for watermark %d (%v): %w",
				r.cfg.ID, wm.Seq, wm.Ranges, errRestart)
		}
		n, err := r.retract(ctx, b)
		if err != nil {
			return false, err
		}
		u.BatchIDs = append(u.BatchIDs, b.ID)
		r.emit(streamEvent{Kind: "retract", BatchID: b.ID, Ranges: b.Ranges, Rows: n})
	}
	r.undo = append(r.undo, u)
	return false, nil
}

// batch finds a committed batch in the checkpoint's log by watermark seq.
func (r *streamRunner) batch(seq uint64) (offsets.Batch, bool) {
	for _, b := range r.committed.Batches {
		if b.Seq == seq {
			return b, true
		}
	}
	return offsets.Batch{}, false
}

// retract reads a committed batch's records back from Kafka and writes its
// retractions and tombstones into the open transaction.
func (r *streamRunner) retract(ctx context.Context, b offsets.Batch) (int, error) {
	if len(b.Spans) == 0 {
		return 0, nil
	}
	spans := make([]sink.Span, len(b.Spans))
	for i, s := range b.Spans {
		spans[i] = sink.Span{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last}
	}
	read, err := r.reader.ReadSpans(ctx, spans)
	if err != nil {
		return 0, fmt.Errorf("stream %s: reading back batch %s to retract it: %w", r.cfg.ID, b.ID, err)
	}
	headers := recordHeaders(r.cfg.ID, b.ID, "d", b.Ranges)
	retract := r.cfg.Retraction != "tombstone"
	tombstone := r.cfg.Retraction != "retract"
	now := r.deps.now().UnixMilli()
	n := 0
	for _, recs := range read {
		for _, rec := range recs {
			if id, _ := rec.Header(headerBatchID); string(id) != b.ID || rec.Value == nil {
				continue
			}
			if op, _ := rec.Header(headerOp); string(op) == "d" {
				continue
			}
			n++
			if retract {
				v, err := r.retractor.Retract(nil, rec.Value, now, "reorg")
				if err != nil {
					return n, fmt.Errorf("stream %s: building the retraction of %s/%d@%d: %w", r.cfg.ID, rec.Topic, rec.Partition, rec.Offset, err)
				}
				if err := r.prod.Produce(ctx, sink.Record{Topic: r.topic, Key: rec.Key, Value: v, Headers: headers, Op: "d"}); err != nil {
					return n, r.txnError("producing retractions", err)
				}
			}
			if tombstone && r.cfg.Key == config.KeyRow {
				if err := r.prod.Produce(ctx, sink.Record{Topic: r.topic, Key: rec.Key, Headers: headers, Op: "tombstone"}); err != nil {
					return n, r.txnError("producing tombstones", err)
				}
			}
		}
	}
	if tombstone && r.cfg.Key != config.KeyRow && n > 0 {
		if err := r.prod.Produce(ctx, sink.Record{Topic: r.topic, Key: []byte(b.ID), Headers: headers, Op: "tombstone"}); err != nil {
			return n, r.txnError("producing a tombstone", err)
		}
	}
	r.deps.metrics.retractions.WithLabelValues(r.cfg.ID).Add(float64(n))
	return n, nil
}

// commit closes the open transaction at a watermark: control events with
// the new checkpoint, the Kafka commit, then the checkpoint store.
func (r *streamRunner) commit(ctx context.Context) error {
	if err := r.begin(); err != nil {
		return err
	}
	flushed, err := r.prod.Flush(ctx)
	if err != nil {
		return r.txnError("flushing the transaction", err)
	}
	last := r.pending[len(r.pending)-1].wm
	if err := r.machine.Commit(last.Seq); err != nil {
		return fmt.Errorf("stream %s: committing the reorg state: %w", r.cfg.ID, err)
	}
	snap := r.machine.Snapshot()
	batches := r.nextBatchLog(snap, flushed)
	cp := offsets.Checkpoint{Stream: r.cfg.ID, Version: r.committed.Version + 1, Fingerprint: r.fingerprint,
		CommittedAt: r.deps.now().UTC(), ControlOffset: r.committed.ControlOffset, Snapshot: snap, Batches: batches}
	cpBytes, err := offsets.Marshal(cp)
	if err != nil {
		return fmt.Errorf("stream %s: encoding the checkpoint: %w", r.cfg.ID, err)
	}
	for _, u := range r.undo {
		if r.ctlBuf, err = r.deps.control.AppendUndo(r.ctlBuf[:0], u); err != nil {
			return fmt.Errorf("stream %s: encoding an undo event: %w", r.cfg.ID, err)
		}
		if err := r.prod.Produce(ctx, sink.Record{Topic: r.deps.controlTopic(), Key: []byte(r.cfg.ID), Value: slices.Clone(r.ctlBuf), Op: "undo"}); err != nil {
			return r.txnError("producing an undo event", err)
		}
	}
	// The checkpoint rides in the first watermark of a run and then in
	// every fullEvery-th; the others carry the state it is rebuilt from.
	full := r.lastFull < 0 || r.sinceFull+1 >= cmp.Or(r.deps.fullEvery, fullEvery)
	state := &encode.StreamState{Next: snap.Next, Incomplete: snap.Incomplete, BaseOffset: r.lastFull,
		Retained: make([]uint64, len(snap.Watermarks))}
	for i, w := range snap.Watermarks {
		state.Retained[i] = w.Seq
	}
	wm := encode.Watermark{Stream: r.cfg.ID, Sequence: last.Seq, TsMs: r.deps.now().UnixMilli(), Cursor: snap.Cursor(), State: state}
	if full {
		wm.Checkpoint, state.BaseOffset = cpBytes, -1
	}
	for _, p := range r.pending {
		cb := encode.CommittedBatch{BatchID: p.wm.BatchID, Sequence: p.wm.Seq, Ranges: p.wm.Ranges, Rows: uint64(p.rows)}
		if g, ok := flushed.Group(p.wm.BatchID); ok {
			for _, s := range g.Spans {
				cb.Spans = append(cb.Spans, encode.OffsetSpan{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last})
			}
		}
		wm.Batches = append(wm.Batches, cb)
		wm.Rows += uint64(p.rows)
	}
	if r.ctlBuf, err = r.deps.control.AppendWatermark(r.ctlBuf[:0], wm); err != nil {
		return fmt.Errorf("stream %s: encoding a watermark event: %w", r.cfg.ID, err)
	}
	if err := r.prod.Produce(ctx, sink.Record{Topic: r.deps.controlTopic(), Key: []byte(r.cfg.ID), Value: slices.Clone(r.ctlBuf), Group: controlGroup, Op: "watermark"}); err != nil {
		return r.txnError("producing a watermark event", err)
	}
	committed, err := r.prod.Commit(ctx)
	if err != nil {
		return r.txnError("committing the transaction", err)
	}
	r.deps.metrics.batchesCommitted.WithLabelValues(r.cfg.ID).Add(float64(len(r.pending)))
	if g, ok := committed.Group(controlGroup); ok && len(g.Spans) > 0 {
		cp.ControlOffset = g.Spans[0].Last
	}
	if full {
		r.lastFull, r.sinceFull = cp.ControlOffset, 0
	} else {
		r.sinceFull++
	}
	now := r.deps.now()
	for _, rg := range last.Ranges {
		r.deps.metrics.committedBlock.WithLabelValues(r.cfg.ID, rg.Network).Set(float64(rg.End))
		if rg.Timestamp != 0 {
			r.deps.metrics.behindSource.WithLabelValues(r.cfg.ID, rg.Network).Set(now.Sub(time.Unix(int64(rg.Timestamp), 0)).Seconds())
		}
	}
	published := r.pending
	r.txnOpen, r.pending, r.undo, r.txnRows = false, nil, nil, 0
	r.out.Reset()
	r.resume = snap.Cursor()
	r.committedCursor.Store(snap.Cursor())
	if err := r.storeCheckpoint(ctx, &cp); err != nil {
		return err
	}
	r.committed = cp
	rows := 0
	for _, p := range published {
		rows += p.rows
		r.emit(streamEvent{Kind: "commit", BatchID: p.wm.BatchID, Ranges: p.wm.Ranges, Rows: p.rows})
	}
	r.log.Debug("committed", "version", cp.Version, "batches", len(published), "rows", rows,
		"from", fmt.Sprint(published[0].wm.Ranges), "to", fmt.Sprint(last.Ranges), "cursor", cursorText(r.resume), "full", full)
	return nil
}

// storeCheckpoint writes cp to the checkpoint store after its transaction
// committed. The write is attempted even when the stream is shutting down,
// or a clean stop would leave the store behind Kafka. A failed write keeps
// the previous version in cp (the next commit follows it): Kafka holds the
// truth and the next start repairs the store. A fenced write is fatal.
func (r *streamRunner) storeCheckpoint(ctx context.Context, cp *offsets.Checkpoint) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := r.deps.store.Commit(sctx, *cp)
	cancel()
	if err == nil {
		r.deps.metrics.checkpointTime.WithLabelValues(r.cfg.ID).Set(float64(cp.CommittedAt.UnixMilli()) / 1000)
		return nil
	}
	if errors.Is(err, offsets.ErrFenced) {
		return fmt.Errorf("stream %s: storing the checkpoint: %w (another instance runs this stream; stop one of them)", r.cfg.ID, err)
	}
	r.deps.metrics.checkpointErrors.WithLabelValues(r.cfg.ID).Inc()
	r.log.Warn("storing the checkpoint failed; Kafka has it and the next start repairs the store", "err", err)
	cp.Version = r.committed.Version
	return nil
}

// nextBatchLog is the retained batch log after a commit: every batch whose
// watermark the committed snapshot still retains.
func (r *streamRunner) nextBatchLog(snap reorg.Snapshot, flushed sink.Committed) []offsets.Batch {
	keep := make(map[uint64]bool, len(snap.Watermarks))
	for _, w := range snap.Watermarks {
		keep[w.Seq] = true
	}
	var out []offsets.Batch
	for _, b := range r.committed.Batches {
		if keep[b.Seq] {
			out = append(out, b)
		}
	}
	for _, p := range r.pending {
		if !keep[p.wm.Seq] {
			continue
		}
		b := offsets.Batch{Seq: p.wm.Seq, ID: p.wm.BatchID, Ranges: p.wm.Ranges}
		if g, ok := flushed.Group(p.wm.BatchID); ok {
			for _, s := range g.Spans {
				b.Spans = append(b.Spans, offsets.Span{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last})
			}
		}
		out = append(out, b)
	}
	return out
}

func (r *streamRunner) abort(ctx context.Context, why string) error {
	if !r.txnOpen {
		r.pending, r.undo, r.dirty = nil, nil, false
		return nil
	}
	r.log.Info("aborting the open transaction", "reason", why, "rows", r.txnRows)
	r.txnOpen, r.pending, r.undo, r.dirty, r.txnRows = false, nil, nil, false, 0
	clear(r.rowOffset)
	err := r.prod.Abort(ctx)
	r.out.Reset()
	if err != nil {
		return r.txnError("aborting a transaction", err)
	}
	return nil
}

// rollback aborts the open transaction and returns the reorg state to the
// last commit; the source resumes from the committed cursor.
func (r *streamRunner) rollback(ctx context.Context, why string) error {
	if err := r.abort(ctx, why); err != nil {
		return err
	}
	r.machine.Rollback()
	r.resume = r.committed.Cursor()
	r.log.Info("rolled back to the last commit", "reason", why, "cursor", cursorText(r.resume))
	return nil
}

// shutdown finishes on SIGINT/SIGTERM: commit the open transaction when it
// ends at a watermark, abort it otherwise; the checkpoint follows a commit.
func (r *streamRunner) shutdown(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if r.txnOpen && len(r.pending) > 0 && !r.dirty {
		if err := r.commit(dctx); err != nil {
			return fmt.Errorf("committing the last transaction at shutdown: %w", err)
		}
	} else if err := r.abort(dctx, "shutting down"); err != nil {
		return err
	}
	r.log.Info("stream stopped", "cursor", cursorText(r.committed.Cursor()), "version", r.committed.Version)
	return nil
}

// pollHead sets amp_bridge_behind_head_blocks every HeadPollInterval until
// ctx ends. Of the run loop's state it reads only committedCursor, which
// the loop publishes atomically after every commit.
func (r *streamRunner) pollHead(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeadPollInterval)
	defer t.Stop()
	for {
		heads, err := r.deps.heads(ctx, r.cfg.SQL)
		if err != nil && ctx.Err() == nil {
			r.log.Debug("polling Amp's synced head", "err", err)
		}
		if c, _ := r.committedCursor.Load().(reorg.Cursor); c != nil {
			for net, head := range heads {
				if p, ok := c[net]; ok {
					r.deps.metrics.behindHead.WithLabelValues(r.cfg.ID, net).Set(max(0, float64(head)-float64(p.Number)))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *streamRunner) setReady(ok bool) {
	if r.deps.ready != nil {
		r.deps.ready(r.cfg.ID, ok)
	}
}

func (r *streamRunner) emit(e streamEvent) {
	if r.deps.events == nil {
		return
	}
	e.Stream = r.cfg.ID
	r.deps.events(e)
}

// controlReader reads the control topic for offsets.Recover.
type controlReader struct {
	reader *sink.Reader
	codec  *encode.ControlCodec
	topic  string
}

var _ offsets.ControlReader = (*controlReader)(nil)

// NewestState returns the stream's state after its newest committed live
// watermark at or after offset from: the checkpoint that event carries, or,
// for an event that carries only its state, the checkpoint of the event at
// its base offset rolled forward through the watermarks since
// (offsets.RollForward). Backfill watermarks are not the live stream's.
func (c *controlReader) NewestState(ctx context.Context, stream string, from int64) (*offsets.ControlState, error) {
	start := from
	if start == offsets.NoOffset {
		start = 0
	}
	hist, err := c.history(ctx, stream, start)
	if err != nil {
		return nil, err
	}
	for i := len(hist) - 1; i >= 0; i-- {
		w := hist[i].ev.Watermark
		if w == nil || w.Backfill != nil || (len(w.Checkpoint) == 0 && w.State == nil) {
			continue
		}
		if len(w.Checkpoint) == 0 && w.State.BaseOffset < start {
			// The checkpoint is older than from: read from there.
			if hist, err = c.history(ctx, stream, w.State.BaseOffset); err != nil {
				return nil, err
			}
			if i = lastLiveWatermark(hist); i < 0 {
				return nil, fmt.Errorf("control topic %s: the stream's events vanished between two reads", c.topic)
			}
		}
		st, err := stateAt(hist, i)
		if err != nil {
			return nil, fmt.Errorf("control topic %s: %w", c.topic, err)
		}
		return &st, nil
	}
	return nil, nil
}

// history returns the stream's committed control events at offsets at or
// after from, oldest first.
func (c *controlReader) history(ctx context.Context, stream string, from int64) ([]controlHistory, error) {
	hist, _, err := c.historyRead(ctx, stream, from)
	return hist, err
}

// historyRead is history that also returns the read's bounds (its Records
// are not kept).
func (c *controlReader) historyRead(ctx context.Context, stream string, from int64) ([]controlHistory, sink.ControlRead, error) {
	read, err := c.reader.ReadControl(ctx, c.topic, from)
	if err != nil {
		return nil, read, fmt.Errorf("reading control topic %s: %w", c.topic, err)
	}
	hist, err := c.decodeHistory(stream, read)
	read.Records = nil
	return hist, read, err
}

func (c *controlReader) decodeHistory(stream string, read sink.ControlRead) ([]controlHistory, error) {
	var hist []controlHistory
	for _, rec := range read.Records {
		if string(rec.Key) != stream || rec.Value == nil {
			continue
		}
		ev, err := c.codec.Decode(rec.Value)
		if err != nil {
			return nil, fmt.Errorf("decoding control event at %s/%d@%d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
		if (ev.Watermark != nil && ev.Watermark.Stream != stream) || (ev.Undo != nil && ev.Undo.Stream != stream) {
			continue
		}
		hist = append(hist, controlHistory{offset: rec.Offset, ev: ev})
	}
	return hist, nil
}

// lastLiveWatermark returns the index of the newest live watermark that
// carries a checkpoint or a state, or -1.
func lastLiveWatermark(hist []controlHistory) int {
	for i := len(hist) - 1; i >= 0; i-- {
		if w := hist[i].ev.Watermark; w != nil && w.Backfill == nil && (len(w.Checkpoint) > 0 || w.State != nil) {
			return i
		}
	}
	return -1
}

// stateAt returns the stream's state after the live watermark hist[i]: its
// checkpoint, or the checkpoint of the event at its base offset rolled
// forward through the live watermarks up to it.
func stateAt(hist []controlHistory, i int) (offsets.ControlState, error) {
	w := hist[i].ev.Watermark
	if len(w.Checkpoint) > 0 {
		st, err := offsets.ControlStateOf(w.Checkpoint, hist[i].offset)
		if err != nil {
			return offsets.ControlState{}, err
		}
		return *st, nil
	}
	b := slices.IndexFunc(hist[:i], func(h controlHistory) bool { return h.offset == w.State.BaseOffset })
	if b < 0 || hist[b].ev.Watermark == nil || len(hist[b].ev.Watermark.Checkpoint) == 0 {
		return offsets.ControlState{}, fmt.Errorf("the watermark at offset %d refers to the checkpoint at offset %d, "+
			"which is not a committed watermark of the stream with a checkpoint: the control topic was truncated or rewritten",
			hist[i].offset, w.State.BaseOffset)
	}
	base, err := offsets.ControlStateOf(hist[b].ev.Watermark.Checkpoint, hist[b].offset)
	if err != nil {
		return offsets.ControlState{}, err
	}
	var deltas []offsets.Delta
	for _, h := range hist[b+1 : i+1] {
		d := h.ev.Watermark
		if d == nil || d.Backfill != nil || d.State == nil {
			continue
		}
		delta := offsets.Delta{Offset: h.offset, Retained: d.State.Retained, Next: d.State.Next, Incomplete: d.State.Incomplete}
		for _, cb := range d.Batches {
			delta.Batches = append(delta.Batches, offsetsBatch(cb))
		}
		deltas = append(deltas, delta)
	}
	return offsets.RollForward(*base, deltas)
}

// offsetsBatch converts a watermark event's batch to the checkpoint's form.
func offsetsBatch(cb encode.CommittedBatch) offsets.Batch {
	b := offsets.Batch{Seq: cb.Sequence, ID: cb.BatchID, Ranges: cb.Ranges}
	for _, s := range cb.Spans {
		b.Spans = append(b.Spans, offsets.Span{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last})
	}
	return b
}
