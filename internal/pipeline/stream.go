package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/labels"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source"
)

// controlGroup names the control events' group in a transaction, whose
// offset the checkpoint records.
const controlGroup = "\x00control"

// Deps are what a Stream is built from; cmd/bridge wires them. Every
// field is required unless its doc says otherwise.
type Deps struct {
	// Logger receives the stream's logs; New adds the stream id.
	Logger *slog.Logger
	// Metrics are the process's stream metrics (NewMetrics).
	Metrics *Metrics
	// Slabs keeps the encoded records' memory for reuse, shared by the
	// process's streams (NewSlabCache); nil gives the stream a cache of
	// its own.
	Slabs *SlabCache
	// Registerer receives the sink's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Amp is the Flight client.
	Amp *source.Client
	// Kafka configures the stream's producers and readers.
	Kafka sink.Config
	// Admin creates and checks topics.
	Admin *sink.Admin
	// Store holds the checkpoints and backfill partition records.
	Store Store
	// Registry is the schema registry; nil means single-object encoding.
	Registry *encode.Registry
	// Control encodes and decodes the control topic's events.
	Control *offsets.ControlCodec
	// ControlTopic is the control topic's name.
	ControlTopic string
	// ReplicationFactor of the topics the stream creates (-1: the broker's
	// default).
	ReplicationFactor int
	// Version is the bridge version written into every record's source.
	Version string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Health receives the stream's health (for /readyz, /livez and
	// amp_bridge_stream_up); nil ignores it.
	Health Health
	// StoreTimeout bounds each checkpoint store call (default 10s).
	StoreTimeout time.Duration
	// RestartMin and RestartMax bound the pause before a stream restarts
	// after a transient error.
	RestartMin, RestartMax time.Duration
	// Events receives a line per published or retracted batch (bridge
	// demo, tests); nil means none.
	Events func(Event)
	// Heads asks Amp how far a query's tables are synced, per network
	// (SyncedHeads), passing opts to the query (the stream's logger); nil
	// disables the head poller.
	Heads func(ctx context.Context, sql string, opts ...source.StreamOption) (map[string]uint64, error)
	// FullEvery is how often a watermark event carries the whole
	// checkpoint; 0 means every 64th (tests lower it).
	FullEvery int
	// ProgressEvery is how often a running backfill reports its progress
	// (blocks done of the total, rows/s, ETA); 0 means every 10s.
	ProgressEvery time.Duration
	// ClusterBackfill makes the backfill a cluster's (clusterbackfill.go):
	// its workers run as cluster items (RunBackfillWorker) on any member,
	// and the stream plans it, waits for their steps and hands over.
	ClusterBackfill bool
	// ProgressBar, when set (stderr is a terminal and the log is text),
	// receives a one-line progress bar redrawn at each report instead of
	// the "backfill progress" log lines. Never set it for the JSON format.
	ProgressBar io.Writer
}

// Event is a human-readable account of one thing a stream did.
type Event struct {
	// Stream is the stream's id.
	Stream string
	// Kind is "commit", "retract", "reorg", "reconnect", "backfill" or
	// "handover".
	Kind string
	// BatchID and Ranges name the batch, Rows its rows.
	BatchID string
	Ranges  []reorg.BlockRange
	Rows    int
	// Detail says more, for people.
	Detail string
}

// Health is where a stream reports its health; health.Stream implements it.
type Health interface {
	// Ready: connected to every service and publishing.
	Ready()
	// NotReady: a service was lost; reason says which and why.
	NotReady(reason string)
	// Failed: stopped on a permanent error.
	Failed(err error)
	// Stopped: ended without one.
	Stopped()
	// Done: a one-shot load published its blocks and ended; detail says
	// which.
	Done(detail string)
	// Track records a blocking call to a service until done is called.
	Track(what string) (done func())
}

// noHealth is the Health of a stream that reports to nobody.
type noHealth struct{}

func (noHealth) Ready()              {}
func (noHealth) NotReady(string)     {}
func (noHealth) Failed(error)        {}
func (noHealth) Stopped()            {}
func (noHealth) Done(string)         {}
func (noHealth) Track(string) func() { return func() {} }

// Store is where a stream's checkpoint and backfill partition records live.
type Store interface {
	offsets.Store
	offsets.PartitionStore
}

// New returns the stream of cfg; Run publishes it.
func New(cfg config.StreamConfig, deps Deps) *Stream {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.FullEvery <= 0 {
		deps.FullEvery = fullEvery
	}
	if deps.Health == nil {
		deps.Health = noHealth{}
	}
	if deps.StoreTimeout <= 0 {
		deps.StoreTimeout = 10 * time.Second
	}
	if deps.ProgressEvery <= 0 {
		deps.ProgressEvery = defaultProgressEvery
	}
	log := deps.Logger.With("stream", cfg.ID)
	deps.Logger = log
	if deps.Admin != nil {
		// The Admin is shared by every stream; its lines name this one.
		deps.Admin = deps.Admin.WithLogger(log.With("component", "sink"))
	}
	r := &Stream{cfg: cfg, deps: deps, log: log}
	r.slabs.maxFree = deps.Kafka.MaxBufferedBytes
	if deps.Slabs != nil {
		r.slabs.shared.Store(deps.Slabs)
	}
	return r
}

// ampOpts are the options of the stream's Amp queries: the Flight client
// is shared by every stream, so its reconnect warnings name this one only
// through the stream's logger.
func (r *Stream) ampOpts() []source.StreamOption {
	return []source.StreamOption{source.WithLogger(r.log.With("component", "source"))}
}

// publishingAmpOpts are ampOpts for the queries the stream publishes from
// (the live stream, the backfill's steps): the stream is not ready while
// Amp does not answer them, since a reconnect that fails before the new
// stream sends anything yields no KindReconnect envelope. The next commit
// makes it ready again.
func (r *Stream) publishingAmpOpts() []source.StreamOption {
	return append(r.ampOpts(), source.WithRetryHook(func(err error, attempt int) {
		r.deps.Health.NotReady(fmt.Sprintf("amp: %v; reconnecting, attempt %d", err, attempt))
	}))
}

// sinkDeps are the dependencies of the stream's producers and readers.
func (r *Stream) sinkDeps() sink.Deps {
	return sink.Deps{Logger: r.log.With("component", "sink"), Registerer: r.deps.Registerer, Now: r.deps.Now, Stream: r.cfg.ID}
}

// pendingBatch is a complete microbatch inside the open transaction.
type pendingBatch struct {
	wm   reorg.Event
	rows int
}

// Stream publishes one stream: the per-stream supervisor (Run) and its
// run loop. It is driven by a single goroutine.
type Stream struct {
	cfg  config.StreamConfig
	deps Deps
	log  *slog.Logger

	schema      *arrow.Schema
	fingerprint string
	encCfg      encode.Config
	enc         *encode.Encoder
	retractor   *encode.Retractor
	// retractBuf is the free tail of the chunk retractions are written
	// into (retractInto): records hold parts of chunks until acknowledged,
	// and a chunk is never written twice, so it needs no owner.
	retractBuf []byte
	// labels are the stream's label files, read at its first start; join
	// binds them to Amp's schema (nil without labels: labels.go).
	labels *labels.Set
	join   *labels.Joiner
	topic  string
	// slabs recycle the encoded records of Arrow batches as the producers
	// acknowledge them (the stream's and the backfill workers').
	slabs slabPool
	// limit bounds a record's size: the smaller of kafka.batch_max_bytes
	// and the data topic's max.message.bytes (recordLimit).
	limit recordLimit

	prod    *sink.Producer
	reader  *sink.Reader
	machine *reorg.Machine
	stream  *source.Stream

	// committed is the last checkpoint the store accepted (its Version is
	// what the next commit must follow); its Batches are the committed
	// batch log that retractions read spans from.
	committed offsets.Checkpoint
	// storeUnsure is set after a checkpoint write whose outcome is unknown
	// (it failed, and may have landed with its reply lost), until one is
	// confirmed.
	storeUnsure bool
	resume      reorg.Cursor
	// topicID is the data topic's id at start ("": no ids); topicEnd is,
	// per partition, the offset after the last record known committed to
	// it (topiclost.go).
	topicID  string
	topicEnd map[int32]int64
	// lastFull is the control offset of this run's newest watermark event
	// that carries the checkpoint (-1 before the first), and sinceFull the
	// commits since: the others carry only the state (fullEvery).
	lastFull  int64
	sinceFull int
	// backfillLeft counts the blocks the backfill's workers have still to
	// publish (for amp_bridge_backfill_blocks_remaining).
	backfillLeft atomic.Uint64
	// backfillRows counts the rows this run of the backfill published.
	backfillRows atomic.Uint64
	// backfillStart is when this run of the backfill started.
	backfillStart time.Time
	// backfilling is set while the backfill runs (Backfilling).
	backfilling atomic.Bool
	// goneLive is set once this run has seen the stream past its backfill
	// (GoneLive).
	goneLive atomic.Bool
	// worker is set on a cluster backfill worker (RunBackfillWorker).
	worker bool
	// bfProds are the backfill workers' producers, created in setup.
	bfProds []*sink.Producer
	// hanging checks the topics the producers write for transactions the
	// broker left open (set in connect; nil checks nothing).
	hanging *sink.HangingCheck
	// committedCursor holds the committed cursor (a reorg.Cursor never
	// modified after it is stored) for the head poller's goroutine.
	committedCursor atomic.Value

	// txn is what the open transaction holds beyond its records, which
	// the producer holds.
	txn txnLog
	// loaded says what a one-shot load published once it is done ("": not
	// done).
	loaded string
	// job is the commit in flight (nil: none), bound the last one started,
	// until the next transaction's first record (pipelined.go).
	job, bound *commitJob
	// held are the encoded batches of the open transaction waiting for
	// job's Kafka commit, heldBytes their size.
	held      []heldBatch
	heldBytes int
	// commitErr is the error of a commit of this run that failed (joinCommit
	// reports it once): the run loop's state no longer matches Kafka (the
	// reorg state was committed past the failed transaction before its Kafka
	// commit, its held batches were dropped), so this run commits nothing
	// more, a shutdown's commit included; the next run rebuilds it from the
	// checkpoint. Reset by close.
	commitErr error

	// changed is the recorded fingerprint when the stream's SQL or schema
	// changed under its id and schema_evolution let it through
	// reconciliation (evolve.go); "" when unchanged.
	changed string
}

// txnLog is what the open transaction holds beyond its Kafka records (the
// producer owns those, and whether a transaction is open): the complete
// microbatches whose watermark it will commit, the undo events of the
// retractions it carries and the rows produced so far per batch. Every end
// of a transaction (commit, abort, restart) empties it with reset, the one
// place that does.
type txnLog struct {
	// began is when the transaction's time budget started: its first
	// record, or a microbatch without rows.
	began time.Time
	// rows counts the data rows produced.
	rows    int
	pending []pendingBatch
	// dirty means data after the last pending watermark: the transaction
	// cannot commit before the next watermark.
	dirty bool
	// lastProduced is when its last record was produced.
	lastProduced time.Time
	undo         []offsets.Undo
	rowOffset    map[string]int64
	// ampWait is how long the run loop waited for Amp since the first
	// retraction of the transaction (urgent): the part of a reorg's
	// latency that is Amp delivering the replacement microbatch.
	ampWait time.Duration
}

// reset empties the log.
func (t *txnLog) reset() {
	ro := t.rowOffset
	clear(ro)
	if ro == nil {
		ro = map[string]int64{}
	}
	*t = txnLog{rowOffset: ro}
}

// due reports whether the transaction ends at a watermark and its budget
// is used up, or it carries a reorg's retractions (urgent).
func (t *txnLog) due(b sink.Budget, now time.Time) bool {
	return len(t.pending) > 0 && !t.dirty && (t.urgent() || b.Due(t.rows, t.began, now))
}

// urgent reports whether the transaction carries a reorg's retractions: it
// commits at its first complete watermark, without waiting for the rest of
// its budget (which only coalesces microbatches into fewer transactions),
// so that consumers see the retractions and the replacement rows as soon
// as the replacement microbatch is complete.
func (t *txnLog) urgent() bool {
	return len(t.undo) > 0
}

// fingerprintOf identifies a stream's SQL and Arrow schema.
func fingerprintOf(sql string, s *arrow.Schema) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(sql) + "\n" + s.String()))
	return hex.EncodeToString(sum[:16])
}

// Permanent reports whether retrying cannot fix err: the data, the
// configuration or another instance is in the way, and an operator must act
// (among them Redis refusing the password, an ACL permission or the TLS
// handshake: offsets.ErrRedisAuth, ErrRedisPermission, ErrRedisTLS; Kafka
// refusing the SASL password or presenting an untrusted certificate:
// sink.ErrAuthentication, sink.ErrUntrustedCertificate).
// Everything else (a broker or Redis restarting or refusing connections, Amp
// unavailable, an unknown transaction outcome) restarts the stream from its
// checkpoint and Kafka.
func Permanent(err error) bool {
	var verr *encode.ValueError
	for _, p := range []error{reorg.ErrUnrecoverable, reorg.ErrInvalidRanges,
		sink.ErrFenced, sink.ErrTopicInvalid, sink.ErrRecordsMissing, sink.ErrRecordTooLarge, sink.ErrTransactionTimeout,
		sink.ErrOrphanedTransaction, sink.ErrDataTopicLost, sink.ErrAuthentication, sink.ErrUntrustedCertificate,
		sink.ErrNotAuthorized, sink.ErrSASLMechanism, sink.ErrClientCertificate,
		offsets.ErrFenced, offsets.ErrStoreAhead, offsets.ErrDiverged, offsets.ErrFingerprintChanged, offsets.ErrInvalid,
		offsets.ErrUnsupportedFormat, offsets.ErrMalformedEvent, offsets.ErrRollForward, offsets.ErrControlTruncated, offsets.ErrRedisAuth, offsets.ErrRedisPermission, offsets.ErrRedisTLS,
		source.ErrPermanent,
		encode.ErrUnsupportedType, encode.ErrNameCollision, encode.ErrIncompatible, encode.ErrKeyColumn, encode.ErrSchemaChanged,
		encode.ErrRegistryAuth, encode.ErrRegistryPermission, encode.ErrRegistryTLS,
		config.ErrInvalid, labels.ErrInvalid, labels.ErrSchemaChanged} {
		if errors.Is(err, p) {
			return true
		}
	}
	return errors.As(err, &verr)
}

// Run publishes the stream until ctx ends or a permanent error. Any other
// error rebuilds everything from the checkpoint and Kafka, after a capped,
// growing pause (supervisor).
func (r *Stream) Run(ctx context.Context) error {
	sup := supervisor{min: r.deps.RestartMin, max: r.deps.RestartMax, now: r.deps.Now,
		restarted: func(err error, pause time.Duration) {
			r.deps.Health.NotReady(fmt.Sprintf("restarting in %s after: %v", pause, err))
			r.log.Warn("restarting the stream from its checkpoint", "err", err, "in", pause)
			r.deps.Metrics.restarts.WithLabelValues(r.cfg.ID).Inc()
		}}
	err := sup.run(ctx, func(ctx context.Context) error {
		err := r.runOnce(ctx)
		r.close(ctx)
		return err
	})
	if err != nil {
		r.deps.Health.Failed(err)
		return err
	}
	if r.loaded != "" {
		r.deps.Health.Done(r.loaded)
		return nil
	}
	r.deps.Health.Stopped()
	return nil
}

func (r *Stream) close(ctx context.Context) {
	if err := r.joinCommit(); err != nil && ctx.Err() == nil {
		r.log.Debug("the commit in flight failed", "err", err)
	}
	r.dropHeld()
	r.bound = nil
	if r.stream != nil {
		_ = r.stream.Close()
		r.stream = nil
	}
	if r.prod != nil {
		closeProducer(ctx, r.prod, r.log)
		r.prod = nil
	}
	if r.reader != nil {
		r.reader.Close()
		r.reader = nil
	}
	r.closeBackfillWorkers(ctx)
	r.txn.reset()
	r.commitErr = nil
}

// connect prepares the control topic, the producer (which fences a
// previous instance and aborts its open transaction), the reader and the
// reconciled checkpoint. It publishes nothing.
func (r *Stream) connect(ctx context.Context) error {
	r.deps.Metrics.Init(r.cfg.ID)
	schema, err := r.deps.Amp.Schema(ctx, r.cfg.SQL)
	if err != nil {
		return fmt.Errorf("planning the stream's SQL at Amp: %w", NoAnswer(AmpService(r.deps.Amp), err))
	}
	if schema, err = r.bindLabels(schema); err != nil {
		return err
	}
	r.schema = schema
	r.fingerprint = fingerprintOf(r.cfg.SQL, schema)
	r.topic, r.enc, r.topicID, r.topicEnd = "", nil, "", nil
	if _, err := r.deps.Admin.EnsureTopics(ctx, sink.TopicSpec{Name: r.deps.ControlTopic, Kind: sink.TopicControl,
		Partitions: 1, ReplicationFactor: int16(r.deps.ReplicationFactor)}); err != nil {
		return fmt.Errorf("preparing the control topic of stream %s: %w", r.cfg.ID, NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}

	// What the coordinator decided for the producers' last transactions,
	// before their initialisation replaces it (HangingCheck).
	if r.hanging, err = r.deps.Admin.PrepareHangingCheck(ctx, r.txnIDs()...); err != nil {
		return fmt.Errorf("stream %s: %w", r.cfg.ID, err)
	}
	// A transaction stays open for a complete microbatch, up to
	// kafka.transaction_timeout: the broker must allow that long.
	if r.deps.Kafka.Delivery == sink.DeliveryExactlyOnce {
		if err := r.deps.Admin.CheckTransactionTimeout(ctx, r.deps.Kafka.TransactionTimeout); err != nil {
			return fmt.Errorf("stream %s: %w", r.cfg.ID, err)
		}
	}
	// The producer first: initialising the transactional id fences a
	// previous instance and aborts its open transaction, so the control
	// topic's last stable offset moves past it before we read.
	if r.prod, err = sink.NewProducer(ctx, r.deps.Kafka, r.cfg.ID, r.sinkDeps()); err != nil {
		return fmt.Errorf("starting the producer of stream %s: %w", r.cfg.ID, NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}
	// The backfill's workers too: a previous instance killed inside its
	// backfill leaves their transactions open, and the control topic's
	// last stable offset would wait for them until they time out.
	if r.cfg.Backfill.Enabled && !r.deps.ClusterBackfill {
		if err := r.fenceBackfillWorkers(ctx); err != nil {
			return err
		}
	}
	// A transaction of these producers that the broker left open although
	// its coordinator completed it (the README's known issue) would be
	// decided by their next marker on the partition: refuse to produce.
	// The data topic is checked when it is known (setupTopic).
	if err := r.hanging.Check(ctx, r.deps.ControlTopic); err != nil {
		return fmt.Errorf("stream %s: checking the control topic for transactions left open: %w", r.cfg.ID, err)
	}
	if r.reader, err = sink.NewReader(ctx, r.deps.Kafka, r.sinkDeps()); err != nil {
		return fmt.Errorf("starting the reader of stream %s: %w", r.cfg.ID, NoAnswer(KafkaService(r.deps.Kafka.Brokers), err))
	}
	// The read of the control topic waits for every transaction open on it
	// to end: one left by a member or process killed inside it holds it
	// until its producer is initialised again or the broker aborts it
	// (kafka.transaction_timeout).
	reconciling, began := r.deps.Health.Track("reconciling the checkpoint with the control topic"), r.deps.Now()
	dec, err := r.recoverCheckpoint(ctx)
	reconciling()
	r.deps.Metrics.reconciliations.WithLabelValues(r.cfg.ID, dec.Outcome.String()).Inc()
	if err != nil {
		// Both the store and the control topic are read: either may be the
		// one that did not answer.
		return fmt.Errorf("reconciling the checkpoint of stream %s with Kafka: %w", r.cfg.ID,
			NoAnswer(StoreService(r.deps.Store)+" or "+KafkaService(r.deps.Kafka.Brokers), err))
	}
	r.committed, r.changed = dec.Checkpoint, dec.Changed
	r.lastFull, r.sinceFull = -1, 0
	r.log.Info("checkpoint reconciled", "outcome", dec.Outcome.String(), "version", r.committed.Version,
		"cursor", cursorText(r.committed.Cursor()), "retained_batches", len(r.committed.Batches),
		"took", r.deps.Now().Sub(began).Round(time.Millisecond))
	return nil
}

// setup connects (connect), runs the backfill of a fresh stream that has
// one and commits its hand-over, and restores the reorg state and the data
// topic for the run loop.
func (r *Stream) setup(ctx context.Context) error {
	// Tracked for health, but not the backfill, which may run for hours
	// (it reports Ready itself once it publishes).
	done := r.deps.Health.Track("connecting to Amp, Kafka and the checkpoint store")
	err := r.connect(ctx)
	done()
	if err != nil {
		return err
	}
	if r.cfg.Backfill.Enabled {
		if isFresh(r.committed) {
			if err := r.backfill(ctx); err != nil {
				return err
			}
		} else if r.cfg.Mode == config.ModeOnce {
			return fmt.Errorf("config streams (%s).mode: once, but the stream has gone live (cursor %s): a one-shot load "+
				"publishes blocks of a stream that has published nothing live; load them under a new stream id: %w",
				r.cfg.ID, cursorText(r.committed.Cursor()), config.ErrInvalid)
		} else {
			r.deps.Metrics.backfillLeft.WithLabelValues(r.cfg.ID).Set(0)
			r.log.Debug("backfill not run: the stream has gone live", "cursor", cursorText(r.committed.Cursor()))
			r.dropStalePlan(ctx)
		}
		r.goneLive.Store(true)
		r.closeBackfillWorkers(ctx)
	} else if r.cfg.Start != config.StartEarliest && r.cfg.Start != "" {
		if isFresh(r.committed) {
			if err := r.startAt(ctx); err != nil {
				return err
			}
		} else {
			r.log.Info("streams[].start is ignored: the stream has a checkpoint and resumes from its cursor",
				"start", string(r.cfg.Start), "cursor", cursorText(r.committed.Cursor()))
		}
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
		r.deps.Metrics.committedBlock.WithLabelValues(r.cfg.ID, net).Set(float64(p.Number))
	}
	r.committedCursor.Store(r.resume)
	r.txn.reset()
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
func (r *Stream) setupTopic(ctx context.Context, networks []string) error {
	topic, err := r.cfg.TopicName(networks)
	if err != nil {
		return err
	}
	encCfg, err := r.cfg.EncodeConfig(topic, r.deps.Version)
	if err != nil {
		return err
	}
	enc, err := encode.NewEncoder(encCfg, r.schema)
	if err != nil {
		return fmt.Errorf("compiling the Avro encoder of stream %s: %w", r.cfg.ID, err)
	}
	if r.deps.Registry != nil {
		if err := r.registerSchemas(ctx, topic, enc); err != nil {
			return err
		}
	} else {
		if err := r.refuseUnregistered(); err != nil {
			return err
		}
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
	if r.deps.Registry == nil {
		// The records earlier bridges wrote carry the fingerprint they
		// computed: a reorg may retract them.
		for _, f := range encode.EarlierSingleObjectFramings(enc.Schemas().Value) {
			if err := r.retractor.Add(f, enc.Schemas().Value); err != nil {
				return err
			}
		}
	}
	if err := r.learnSchemas(ctx); err != nil {
		return err
	}
	keyMode := sink.KeyBatch
	if r.cfg.Key == config.KeyRow {
		keyMode = sink.KeyRow
	}
	spec := r.dataTopicSpec(sink.TopicSpec{Name: topic, Kind: sink.TopicData, KeyMode: keyMode, Partitions: int32(r.cfg.Partitions),
		ReplicationFactor: int16(r.deps.ReplicationFactor), CleanupPolicy: sink.CleanupDelete})
	states, err := r.deps.Admin.EnsureTopics(ctx, spec)
	if err != nil {
		return fmt.Errorf("preparing the data topic of stream %s: %w", r.cfg.ID, err)
	}
	r.useDataTopic(states[0], spec)
	if err := r.hanging.Check(ctx, topic); err != nil {
		return fmt.Errorf("stream %s: checking data topic %s for transactions left open: %w", r.cfg.ID, topic, err)
	}
	r.topic, r.enc, r.encCfg = topic, enc, encCfg
	r.limit = recordLimit{topic: topic, batchMax: int64(r.deps.Kafka.BatchMaxBytes)}
	for _, st := range states {
		if st.Name == topic {
			r.limit.topicMax = st.MaxMessageBytes
		}
	}
	return r.checkPartitions(states)
}

// txnIDs are the transactional ids of the stream's producers: its own and,
// with a backfill, its workers'. None in at-least-once delivery.
func (r *Stream) txnIDs() []string {
	if r.deps.Kafka.Delivery != sink.DeliveryExactlyOnce {
		return nil
	}
	ids := []string{sink.TransactionalID(r.deps.Kafka.TransactionalIDPrefix, r.cfg.ID)}
	if r.cfg.Backfill.Enabled && !r.deps.ClusterBackfill { // else each worker checks its own
		for k := range r.cfg.Backfill.Workers {
			ids = append(ids, sink.TransactionalID(r.deps.Kafka.TransactionalIDPrefix, r.backfillWorkerID(k)))
		}
	}
	return ids
}

// checkPartitions checks, in batch-key mode, that every retained batch's
// records sit on the partition its key hashes to with the data topic's
// current partition count: a count changed under a running stream would
// send retractions to other partitions than the rows they retract.
func (r *Stream) checkPartitions(states []sink.TopicState) error {
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

func (r *Stream) runOnce(ctx context.Context) error {
	if err := r.setup(ctx); err != nil {
		if errors.Is(err, errLoadDone) {
			return nil // a one-shot load ends here
		}
		return err
	}
	if err := r.open(ctx); err != nil {
		return err
	}
	r.deps.Health.Ready()
	if r.cfg.HeadPollInterval > 0 && r.deps.Heads != nil {
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.pollHead(pctx)
		}()
		defer func() { cancel(); <-done }()
	}
	for {
		at := r.deps.Now()
		env, err := r.next(ctx)
		if r.txn.urgent() {
			r.txn.ampWait += r.deps.Now().Sub(at)
		}
		if errors.Is(err, errCommitEnded) {
			if err := r.settle(ctx); err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, errCommitDue) {
			if err := r.commit(ctx); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return r.shutdown(ctx, nil)
			}
			return fmt.Errorf("reading stream %s from Amp: %w", r.cfg.ID, err)
		}
		done := r.deps.Health.Track("publishing a batch")
		err = r.handle(ctx, env)
		done()
		if err != nil {
			if ctx.Err() != nil {
				return r.shutdown(ctx, err)
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

// errCommitEnded is returned by next when the commit in flight ended
// while waiting for Amp: its outcome is applied (settle) at once, so that a
// quiet chain does not hold back the checkpoint, the metrics and the
// events of the last commit.
var errCommitEnded = errors.New("the commit in flight ended")

// next waits for the next envelope, but no longer than the open
// transaction's remaining time budget when it ends at a watermark, nor
// than the commit in flight.
func (r *Stream) next(ctx context.Context) (source.Envelope, error) {
	if j := r.job; j != nil {
		jctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			select {
			case <-j.done:
				cancel(errCommitEnded)
			case <-jctx.Done():
			}
		}()
		env, err := r.nextWithin(jctx)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(jctx), errCommitEnded) {
			return source.Envelope{}, errCommitEnded
		}
		return env, err
	}
	return r.nextWithin(ctx)
}

// nextWithin is next bounded by the open transaction's time budget.
func (r *Stream) nextWithin(ctx context.Context) (source.Envelope, error) {
	if len(r.txn.pending) == 0 || r.txn.dirty {
		return r.stream.Next(ctx)
	}
	wait := r.budget().Remaining(r.txn.began, r.deps.Now())
	if wait <= 0 || r.txn.urgent() {
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
func (r *Stream) open(ctx context.Context) error {
	if r.stream != nil {
		_ = r.stream.Close()
	}
	r.log.Info("opening the Amp stream", "cursor", cursorText(r.resume))
	s, err := r.deps.Amp.Stream(ctx, r.cfg.SQL, func() reorg.Cursor { return r.resume }, r.publishingAmpOpts()...)
	if err != nil {
		return fmt.Errorf("opening stream %s at Amp: %w", r.cfg.ID, err)
	}
	r.stream = s
	return nil
}

func (r *Stream) handle(ctx context.Context, env source.Envelope) error {
	defer env.Release()
	if env.Kind == source.KindReconnect {
		r.deps.Health.NotReady(fmt.Sprintf("amp: the stream ended (%v); reconnecting, attempt %d", env.Cause, env.Attempt))
		r.deps.Metrics.reconnects.WithLabelValues(r.cfg.ID).Inc()
		r.emit(Event{Kind: "reconnect", Detail: fmt.Sprint(env.Cause)})
		// The source resumes from r.resume; everything not committed is
		// replayed, so drop it.
		if err := r.rollback(ctx, "amp stream reconnected"); err != nil {
			return err
		}
		return nil
	}
	rows := 0
	if env.Batch != nil {
		r.deps.Metrics.polled.WithLabelValues(r.cfg.ID).Add(float64(env.Batch.NumRows()))
		if err := r.joinLabels(&env); err != nil {
			return err
		}
		rows = int(env.Batch.NumRows())
	}
	if r.enc == nil && len(env.Ranges) > 0 {
		if err := r.settle(ctx); err != nil {
			return err
		}
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
	if reconnect != nil || slices.ContainsFunc(events, func(ev reorg.Event) bool { return ev.Kind == reorg.KindUndo }) {
		// A reorg reads the committed batch log and may abort the open
		// transaction: after the commit in flight.
		if err := r.settle(ctx); err != nil {
			return err
		}
	}
	for _, ev := range events {
		switch ev.Kind {
		case reorg.KindData:
			if err := r.data(ctx, ev, &env); err != nil {
				return err
			}
		case reorg.KindWatermark:
			if r.txn.began.IsZero() {
				// A microbatch without rows: the budget runs from now.
				r.txn.began = r.deps.Now()
			}
			r.txn.pending = append(r.txn.pending, pendingBatch{wm: ev, rows: int(r.txn.rowOffset[ev.BatchID])})
			delete(r.txn.rowOffset, ev.BatchID)
			r.txn.dirty = false
			if r.txn.urgent() {
				r.log.Debug("replacement complete", "batch_id", ev.BatchID, "rows", r.txn.rows, "waited_for_amp", r.txn.ampWait)
			}
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
	if r.txn.due(r.budget(), r.deps.Now()) {
		return r.commit(ctx)
	}
	return nil
}

func (r *Stream) budget() sink.Budget {
	return sink.Budget{MaxRows: r.cfg.Transaction.MaxRows, MaxAge: r.cfg.Transaction.MaxAge}
}

// begin opens a transaction unless one is open, for a first record ready
// at readyAt (observeBoundary).
func (r *Stream) begin(readyAt time.Time) error {
	if r.prod.Stats().Open {
		return nil
	}
	if err := r.prod.Begin(); err != nil {
		return r.txnError("beginning a transaction", err)
	}
	if r.txn.began.IsZero() {
		r.txn.began = r.deps.Now()
	}
	r.observeBoundary(readyAt)
	return nil
}

// txnError names the stream in a transaction error, and says what to do
// when another instance fenced it (a permanent error: see Permanent).
func (r *Stream) txnError(what string, err error) error {
	if errors.Is(err, sink.ErrFenced) {
		return fmt.Errorf("stream %s: %s: %w (another instance runs this stream; stop one of them)", r.cfg.ID, what, err)
	}
	return fmt.Errorf("stream %s: %s: %w", r.cfg.ID, what, err)
}

// data encodes the rows of a data event into a slab, releases the Arrow
// batch, and produces the records; the slab is reused once the producer
// has acknowledged them all, so memory follows what the producer holds,
// not the open transaction.
func (r *Stream) data(ctx context.Context, ev reorg.Event, env *source.Envelope) error {
	if env.Batch == nil || env.Batch.NumRows() == 0 {
		return nil
	}
	now := r.deps.Now()
	meta := encode.BatchMeta{Op: encode.OpCreate, Ranges: ev.Ranges, BatchID: ev.BatchID,
		TsMs: now.UnixMilli(), RowOffset: r.txn.rowOffset[ev.BatchID]}
	if r.txn.began.IsZero() {
		r.txn.began = now
	}
	headers := recordHeaders(r.cfg.ID, ev.BatchID, "c", ev.Ranges)
	encoding, err := r.slabs.encodeSlabs(ctx, r.enc, env.Batch, meta, r.produceHeldNow, func(s *slab, rowOffset int64) error {
		n := s.out.Len()
		r.txn.rowOffset[ev.BatchID] += int64(n)
		r.txn.rows += n
		r.txn.dirty = true
		out := produceBatch{topic: r.topic, batchID: ev.BatchID, op: "c", rowKey: r.cfg.Key == config.KeyRow,
			headers: headers, rowOffset: rowOffset, ts: now}
		// Produced now, or once the commit in flight has ended in Kafka.
		return r.hold(ctx, heldBatch{slab: s, out: out, readyAt: now})
	})
	if encoding {
		return r.schemaMoved(ctx, fmt.Errorf("stream %s: encoding batch %s: %w", r.cfg.ID, ev.BatchID, err))
	}
	if err != nil {
		return err
	}
	env.Release() // the records are encoded: the Arrow memory goes back now
	return nil
}

// produceError names the stream in an error of produceBatch.produce.
func (r *Stream) produceError(err error) error {
	if errors.Is(err, sink.ErrRecordTooLarge) {
		return fmt.Errorf("stream %s: %w", r.cfg.ID, err)
	}
	return r.txnError("producing records", err)
}

// produceBatch is how the records of one encoded Arrow batch are produced.
type produceBatch struct {
	topic, batchID, op string
	// rowKey: the records' keys are the encoded row keys, not the batch id.
	rowKey    bool
	headers   []sink.Header
	rowOffset int64     // the microbatch's row index of the first record
	ts        time.Time // every record's timestamp
}

// produce checks and produces every record of slab s (the caller holds it)
// with s as their owner, in group batchID, and returns how many there
// were. A record too large for the topic is an error wrapping
// sink.ErrRecordTooLarge; other errors are the producer's.
func (b produceBatch) produce(ctx context.Context, prod *sink.Producer, limit recordLimit, s *slab) (int, error) {
	key := []byte(b.batchID)
	n := s.out.Len()
	// One reference per record, taken at once; those of the records not
	// produced are given back. Produce releases the record it is given,
	// also when it refuses it.
	s.handN(n)
	for i := range n {
		k := key
		if b.rowKey {
			k = s.out.Key(i)
		}
		if err := limit.check(b.batchID, b.rowOffset+int64(i), k, s.out.Value(i), b.headers); err != nil {
			s.unhand(n - i)
			return i, err
		}
		if err := prod.Produce(ctx, sink.Record{Topic: b.topic, Key: k, Value: s.out.Value(i), Headers: b.headers,
			Group: b.batchID, Op: b.op, Timestamp: b.ts, Owner: s}); err != nil {
			s.unhand(n - i - 1)
			return i, err
		}
	}
	return n, nil
}

func recordHeaders(stream, batchID, op string, ranges []reorg.BlockRange) []sink.Header {
	network, span := encode.FormatRangeHeaders(ranges)
	return []sink.Header{
		{Key: encode.HeaderBatchID, Value: []byte(batchID)},
		{Key: encode.HeaderOp, Value: []byte(op)},
		{Key: encode.HeaderNetwork, Value: []byte(network)},
		{Key: encode.HeaderRange, Value: []byte(span)},
		{Key: encode.HeaderStream, Value: []byte(stream)},
	}
}

// undoEvent handles an Undo; it reports whether the stream was reopened and
// the rest of the Apply must be dropped.
func (r *Stream) undoEvent(ctx context.Context, ev reorg.Event) (bool, error) {
	if ev.Cause == reorg.CauseRewind {
		return false, nil
	}
	depth := uint64(0)
	for _, inv := range ev.Invalidations {
		depth = max(depth, inv.End-inv.Start+1)
	}
	r.deps.Metrics.reorgs.WithLabelValues(r.cfg.ID).Inc()
	r.deps.Metrics.reorgDepth.WithLabelValues(r.cfg.ID).Observe(float64(depth))
	r.log.Info("reorg", "invalidations", fmt.Sprint(ev.Invalidations), "first_seq", ev.First, "last_seq", ev.Last,
		"retract", len(ev.Retract), "abort", ev.Abort, "replay", ev.Replay)
	r.emit(Event{Kind: "reorg", Detail: fmt.Sprintf("%v: %d committed batch(es) to retract", ev.Invalidations, len(ev.Retract))})
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
	if err := r.begin(r.deps.Now()); err != nil {
		return false, err
	}
	u := offsets.Undo{Stream: r.cfg.ID, Sequence: ev.Seq, TsMs: r.deps.Now().UnixMilli(), Cause: ev.Cause.String(),
		FirstSequence: ev.First, LastSequence: ev.Last}
	for _, inv := range ev.Invalidations {
		u.Ranges = append(u.Ranges, offsets.InvalidatedRange{Network: inv.Network, Start: inv.Start, End: inv.End})
	}
	batches := make([]offsets.Batch, 0, len(ev.Retract))
	for _, wm := range ev.Retract {
		b, ok := r.batch(wm.Seq)
		if !ok {
			return false, fmt.Errorf("stream %s: the checkpoint's batch log has no batch for watermark %d (%v)",
				r.cfg.ID, wm.Seq, wm.Ranges)
		}
		batches = append(batches, b)
	}
	if err := r.retractAll(ctx, batches, u.Cause, func(b offsets.Batch, n int) {
		u.BatchIDs = append(u.BatchIDs, b.ID)
		r.emit(Event{Kind: "retract", BatchID: b.ID, Ranges: b.Ranges, Rows: n})
	}); err != nil {
		return false, err
	}
	r.txn.undo = append(r.txn.undo, u)
	return false, nil
}

// batch finds a committed batch in the checkpoint's log by watermark seq.
func (r *Stream) batch(seq uint64) (offsets.Batch, bool) {
	for _, b := range r.committed.Batches {
		if b.Seq == seq {
			return b, true
		}
	}
	return offsets.Batch{}, false
}

// retractChunkRecords bounds the records one read-back of retracted
// batches holds: the batches of a deep reorg are read back together, a
// chunk of batches at a time (one round of offset requests and one fetch
// per partition instead of one per batch), but never more than this many
// records at once unless one batch alone has more.
const retractChunkRecords = 50_000

// retractAll reads the committed batches back from Kafka, a chunk at a
// time, and writes their retractions and tombstones into the open
// transaction, telling done of each batch with its retracted rows, in
// order. cause ("reorg" or "rewind") goes to each retraction's
// source.cause.
func (r *Stream) retractAll(ctx context.Context, batches []offsets.Batch, cause string, done func(b offsets.Batch, rows int)) error {
	for len(batches) > 0 {
		var spans []sink.Span
		var ends []int // per batch of the chunk, the end of its spans
		records := int64(0)
		k := 0
		for ; k < len(batches); k++ {
			b := batches[k]
			n := int64(0)
			for _, s := range b.Spans {
				n += s.Last - s.First + 1
			}
			if k > 0 && records+n > retractChunkRecords {
				break
			}
			records += n
			for _, s := range b.Spans {
				spans = append(spans, sink.Span{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last})
			}
			ends = append(ends, len(spans))
		}
		chunk := batches[:k]
		batches = batches[k:]
		var read [][]sink.ReadRecord
		if len(spans) > 0 {
			var err error
			at := r.deps.Now()
			done := r.deps.Health.Track(fmt.Sprintf("kafka: reading back %d records to retract them", records))
			read, err = r.reader.ReadSpans(ctx, spans)
			done()
			if errors.Is(err, sink.ErrRecordsMissing) {
				return r.lostRecords(ctx, fmt.Errorf("reading back batches %s..%s to retract them: %w", chunk[0].ID, chunk[len(chunk)-1].ID, err))
			}
			if err != nil {
				return fmt.Errorf("stream %s: reading back batches %s..%s to retract them: %w", r.cfg.ID, chunk[0].ID, chunk[len(chunk)-1].ID, err)
			}
			r.log.Debug("read back", "batches", len(chunk), "spans", len(spans), "records", records, "took", r.deps.Now().Sub(at))
		}
		from := 0
		for i, b := range chunk {
			n, err := r.retract(ctx, b, read[from:ends[i]], cause)
			if err != nil {
				return err
			}
			from = ends[i]
			done(b, n)
		}
	}
	return nil
}

// retract writes the retractions and tombstones of a committed batch,
// whose records read holds (one slice per span), into the open
// transaction, with cause as their source.cause.
func (r *Stream) retract(ctx context.Context, b offsets.Batch, read [][]sink.ReadRecord, cause string) (int, error) {
	if len(b.Spans) == 0 {
		return 0, nil
	}
	headers := recordHeaders(r.cfg.ID, b.ID, "d", b.Ranges)
	retract, tombstone := r.cfg.Retraction.Events(), r.cfg.Retraction.Tombstones()
	// One timestamp for the batch's records, as on the data path.
	at := r.deps.Now()
	now := at.UnixMilli()
	n := 0
	for _, recs := range read {
		for _, rec := range recs {
			if id, _ := rec.Header(encode.HeaderBatchID); string(id) != b.ID || rec.Value == nil {
				continue
			}
			if op, _ := rec.Header(encode.HeaderOp); string(op) == "d" {
				continue
			}
			n++
			if retract {
				// In the schema the row was written with (its own id),
				// on the topic it was written to (a stream moved to a
				// new topic keeps retracting its old rows in the old one).
				if err := r.knowSchema(ctx, rec.Value); err != nil {
					return n, fmt.Errorf("stream %s: loading the schema of %s/%d@%d to retract it: %w", r.cfg.ID, rec.Topic, rec.Partition, rec.Offset, err)
				}
				v, err := r.retractInto(rec.Value, now, cause)
				if err != nil {
					return n, fmt.Errorf("stream %s: building the retraction of %s/%d@%d: %w", r.cfg.ID, rec.Topic, rec.Partition, rec.Offset, err)
				}
				if err := r.prod.Produce(ctx, sink.Record{Topic: rec.Topic, Key: rec.Key, Value: v, Headers: headers, Op: "d", Timestamp: at}); err != nil {
					return n, r.txnError("producing retractions", err)
				}
			}
			if tombstone && r.cfg.Key == config.KeyRow {
				if err := r.prod.Produce(ctx, sink.Record{Topic: rec.Topic, Key: rec.Key, Headers: headers, Op: "tombstone", Timestamp: at}); err != nil {
					return n, r.txnError("producing tombstones", err)
				}
			}
		}
	}
	if tombstone && r.cfg.Key != config.KeyRow && n > 0 {
		if err := r.prod.Produce(ctx, sink.Record{Topic: b.Spans[0].Topic, Key: []byte(b.ID), Headers: headers, Op: "tombstone", Timestamp: at}); err != nil {
			return n, r.txnError("producing a tombstone", err)
		}
	}
	r.deps.Metrics.retractions.WithLabelValues(r.cfg.ID).Add(float64(n))
	return n, nil
}

// retractChunk is the size of the chunks retractions are written into.
const retractChunk = 256 << 10

// retractInto writes the retraction of orig (at tsMs, for cause) into the
// stream's chunk and returns it: one allocation per chunk, not one per
// record, for what the producer holds until it is acknowledged.
func (r *Stream) retractInto(orig []byte, tsMs int64, cause string) ([]byte, error) {
	// A retraction is its original's size but for op, ts_ms and the
	// source's cause.
	need := len(orig) + 64
	if cap(r.retractBuf) < need {
		r.retractBuf = make([]byte, 0, max(retractChunk, need))
	}
	v, err := r.retractor.Retract(r.retractBuf, orig, tsMs, cause)
	if err != nil {
		return nil, err
	}
	v = v[:len(v):len(v)]
	if len(v) <= cap(r.retractBuf) {
		r.retractBuf = r.retractBuf[len(v):len(v)]
	} else {
		r.retractBuf = nil // Retract grew past the chunk: v has its own array
	}
	return v, nil
}

// commit closes the open transaction at a watermark: control events with
// the new checkpoint, the Kafka commit, then the checkpoint store. It waits
// for the previous commit to end (settle: commits and checkpoints stay in
// order, one at a time), then starts this one on its own goroutine
// (startCommit) and returns: the run loop reads, decodes and encodes the
// next microbatch meanwhile, and produces it only once this transaction
// is committed in Kafka. The commit's outcome is taken by the next settle.
func (r *Stream) commit(ctx context.Context) error {
	if err := r.settle(ctx); err != nil {
		return err
	}
	if r.commitErr != nil {
		// A shutdown after the failure was reported (runOnce stops a
		// stream whose context ended, whatever the error): the pending
		// batches' state includes the failed transaction's, and their
		// rows may have been dropped with the held batches.
		return fmt.Errorf("stream %s: not committing after a failed commit (the next start resumes from the checkpoint): %w",
			r.cfg.ID, r.commitErr)
	}
	pending := r.txn.pending
	last := pending[len(pending)-1].wm
	if err := r.machine.Commit(last.Seq); err != nil {
		return fmt.Errorf("stream %s: committing the reorg state: %w", r.cfg.ID, err)
	}
	snap := r.machine.Snapshot()
	// The checkpoint rides in the first watermark of a run and then in
	// every FullEvery-th; the others carry the state it is rebuilt from.
	full := r.lastFull < 0 || r.sinceFull+1 >= r.deps.FullEvery
	j := &commitJob{pending: pending, snap: snap, full: full, from: r.txn.lastProduced}
	if j.from.IsZero() {
		j.from = r.deps.Now()
	}
	undos := r.txn.undo
	// What follows runs on the commit's goroutine: it reads only what the
	// run loop leaves alone until the next settle (the committed
	// checkpoint, the data topic, lastFull).
	j.build = func(ctx context.Context, flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error) {
		// The data topic is still the one the checkpoint points into: an
		// error aborts the transaction.
		var err error
		if j.ends, err = r.checkSpans(flushed); err != nil {
			return offsets.Watermark{}, nil, err
		}
		if full {
			if err := r.checkTopicID(ctx); err != nil {
				return offsets.Watermark{}, nil, err
			}
		}
		cp := r.nextCheckpoint(snap, r.nextBatchLog(snap, pending, flushed))
		state := &offsets.StreamState{Next: snap.Next, Incomplete: snap.Incomplete, BaseOffset: r.lastFull,
			Retained: make([]uint64, len(snap.Watermarks))}
		for i, w := range snap.Watermarks {
			state.Retained[i] = w.Seq
		}
		wm := offsets.Watermark{Stream: r.cfg.ID, Sequence: last.Seq, TsMs: r.deps.Now().UnixMilli(), Cursor: snap.Cursor(), State: state}
		if full {
			b, err := offsets.Marshal(cp)
			if err != nil {
				return wm, nil, fmt.Errorf("encoding the checkpoint: %w", err)
			}
			wm.Checkpoint, state.BaseOffset = b, -1
		}
		for _, p := range pending {
			wm.Batches = append(wm.Batches, offsets.CommittedBatch{BatchID: p.wm.BatchID, Sequence: p.wm.Seq, Ranges: p.wm.Ranges,
				Rows: uint64(p.rows), Spans: groupSpans(flushed, p.wm.BatchID)})
			wm.Rows += uint64(p.rows)
		}
		return wm, &cp, nil
	}
	r.txn.reset()
	r.startCommit(ctx, j, undos)
	return nil
}

// finishCommit applies a commit that ended well to the run loop's state,
// on its goroutine (settle).
func (r *Stream) finishCommit(j *commitJob) {
	pending, last := j.pending, j.pending[len(j.pending)-1].wm
	r.noteSpans(j.ends)
	r.deps.Metrics.batchesCommitted.WithLabelValues(r.cfg.ID).Add(float64(len(pending)))
	if j.full {
		r.lastFull, r.sinceFull = j.res.ControlOffset, 0
	} else {
		r.sinceFull++
	}
	now := r.deps.Now()
	for _, rg := range last.Ranges {
		r.deps.Metrics.committedBlock.WithLabelValues(r.cfg.ID, rg.Network).Set(float64(rg.End))
		if rg.Timestamp != 0 {
			r.deps.Metrics.behindSource.WithLabelValues(r.cfg.ID, rg.Network).Set(now.Sub(time.Unix(int64(rg.Timestamp), 0)).Seconds())
		}
	}
	r.resume = j.snap.Cursor()
	r.committedCursor.Store(r.resume)
	rows := 0
	for _, p := range pending {
		rows += p.rows
		r.emit(Event{Kind: "commit", BatchID: p.wm.BatchID, Ranges: p.wm.Ranges, Rows: p.rows})
	}
	r.log.Debug("committed", "version", r.committed.Version, "batches", len(pending), "rows", rows,
		"from", fmt.Sprint(pending[0].wm.Ranges), "to", fmt.Sprint(last.Ranges), "cursor", cursorText(r.resume), "full", j.full)
}

// nextCheckpoint is the checkpoint that follows the committed one.
func (r *Stream) nextCheckpoint(snap reorg.Snapshot, batches []offsets.Batch) offsets.Checkpoint {
	return offsets.Checkpoint{Stream: r.cfg.ID, Version: r.committed.Version + 1, Fingerprint: r.fingerprint,
		CommittedAt: r.deps.Now().UTC(), ControlOffset: r.committed.ControlOffset, Snapshot: snap, Batches: batches,
		TopicIDs: r.topicIDs()}
}

// groupSpans returns the offset spans of a group of a transaction.
func groupSpans(c sink.Committed, group string) []offsets.Span {
	g, ok := c.Group(group)
	if !ok {
		return nil
	}
	out := make([]offsets.Span, len(g.Spans))
	for i, s := range g.Spans {
		out[i] = offsets.Span{Topic: s.Topic, Partition: s.Partition, First: s.First, Last: s.Last}
	}
	return out
}

// commitResult is what commitWith made visible.
type commitResult struct {
	// ControlOffset is the control-topic offset of the watermark event.
	ControlOffset int64
}

// commitWith is the one commit path of the live stream, the backfill's
// steps, the hand-over and rewind: in prod's open transaction (begun if
// none is), after the records already produced, it writes the undo events
// and the watermark event that build returns for the flushed records'
// offsets, commits, and, when build returned a checkpoint, stores it with
// the watermark's control offset (storeCheckpoint) and makes it the
// committed one. The live stream's commits run its two halves, commitKafka
// and storeCommitted, on a goroutine of their own (startCommit).
func (r *Stream) commitWith(ctx context.Context, prod *sink.Producer, undos []offsets.Undo,
	build func(flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error)) (commitResult, error) {
	res, cp, err := r.commitKafka(ctx, prod, undos, build)
	if err != nil {
		return res, err
	}
	return res, r.storeCommitted(ctx, cp)
}

// commitKafka is commitWith's Kafka transaction: it returns the checkpoint
// build made, with the watermark's control offset, not yet stored.
func (r *Stream) commitKafka(ctx context.Context, prod *sink.Producer, undos []offsets.Undo,
	build func(flushed sink.Committed) (offsets.Watermark, *offsets.Checkpoint, error)) (commitResult, *offsets.Checkpoint, error) {
	var cp *offsets.Checkpoint
	done := r.deps.Health.Track("kafka: committing transaction " + prod.TransactionalID())
	committed, err := prod.CommitWith(ctx, func(flushed sink.Committed) ([]sink.Record, error) {
		recs := make([]sink.Record, 0, len(undos)+1)
		key := []byte(r.cfg.ID)
		for _, u := range undos {
			v, err := r.deps.Control.AppendUndo(nil, u)
			if err != nil {
				return nil, fmt.Errorf("encoding an undo event: %w", err)
			}
			recs = append(recs, sink.Record{Topic: r.deps.ControlTopic, Key: key, Value: v, Op: "undo"})
		}
		wm, c, err := build(flushed)
		if err != nil {
			return nil, err
		}
		v, err := r.deps.Control.AppendWatermark(nil, wm)
		if err != nil {
			return nil, fmt.Errorf("encoding a watermark event: %w", err)
		}
		cp = c
		return append(recs, sink.Record{Topic: r.deps.ControlTopic, Key: key, Value: v, Group: controlGroup, Op: "watermark"}), nil
	})
	done()
	if err != nil {
		if errors.Is(err, sink.ErrFenced) {
			return commitResult{}, nil, fmt.Errorf("stream %s: committing transaction %s: %w (another instance runs this stream; stop one of them)",
				r.cfg.ID, prod.TransactionalID(), err)
		}
		return commitResult{}, nil, fmt.Errorf("stream %s: committing transaction %s: %w", r.cfg.ID, prod.TransactionalID(), err)
	}
	res := commitResult{ControlOffset: offsets.NoOffset}
	if g, ok := committed.Group(controlGroup); ok && len(g.Spans) > 0 {
		res.ControlOffset = g.Spans[0].Last
	}
	if cp != nil {
		cp.ControlOffset = res.ControlOffset
	}
	return res, cp, nil
}

// storeCommitted stores the checkpoint of a committed transaction (nil:
// none) and makes it the committed one.
func (r *Stream) storeCommitted(ctx context.Context, cp *offsets.Checkpoint) error {
	if cp == nil {
		return nil
	}
	if err := r.storeCheckpoint(ctx, cp); err != nil {
		return err
	}
	r.committed = *cp
	return nil
}

// storeCheckpoint writes cp to the checkpoint store after its transaction
// committed. The write is attempted even when the stream is shutting down,
// or a clean stop would leave the store behind Kafka. A failed write keeps
// the previous version in cp (the next commit follows it): Kafka holds the
// truth and the next start repairs the store. A fenced write is fatal.
func (r *Stream) storeCheckpoint(ctx context.Context, cp *offsets.Checkpoint) error {
	err := r.commitStore(ctx, *cp)
	var stale *offsets.StaleError
	if r.storeUnsure && errors.As(err, &stale) && stale.Stored > stale.Expected {
		// A write whose reply was lost may have landed: the store then
		// holds a version this stream wrote itself.
		if v, ok := r.ownLostWrite(ctx, *cp); ok {
			r.log.Info("a checkpoint write whose reply was lost had landed; writing the next version on top of it", "stored_version", v)
			cp.Version = v + 1
			err = r.commitStore(ctx, *cp)
		}
	}
	if err == nil {
		r.storeUnsure = false
		r.deps.Metrics.checkpointTime.WithLabelValues(r.cfg.ID).Set(float64(cp.CommittedAt.UnixMilli()) / 1000)
		r.deps.Health.Ready()
		return nil
	}
	if errors.Is(err, offsets.ErrFenced) {
		return fmt.Errorf("stream %s: storing the checkpoint: %w (another instance runs this stream; stop one of them)", r.cfg.ID, err)
	}
	// The outcome is unknown: the write may have landed with its reply
	// lost (storeUnsure makes the next write check).
	r.storeUnsure = true
	r.deps.Metrics.checkpointErrors.WithLabelValues(r.cfg.ID).Inc()
	r.deps.Health.NotReady(fmt.Sprintf("checkpoint store: writing the checkpoint: %v", err))
	r.log.Warn("storing the checkpoint failed; Kafka has it and the next start repairs the store", "err", err)
	cp.Version = r.committed.Version
	return nil
}

// commitStore writes cp to the checkpoint store, bounded by StoreTimeout.
func (r *Stream) commitStore(ctx context.Context, cp offsets.Checkpoint) error {
	done := r.deps.Health.Track("checkpoint store: writing the checkpoint")
	defer done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.deps.StoreTimeout)
	defer cancel()
	return r.deps.Store.Commit(sctx, cp)
}

// ownLostWrite reports whether the stored checkpoint is one this stream
// wrote after its last confirmed write, whose reply was lost (its version
// when it is): the same fingerprint, and a control offset not beyond cp's.
// Another instance's would be beyond it: an instance that took the stream
// over fenced this one in Kafka, and committed after it.
func (r *Stream) ownLostWrite(ctx context.Context, cp offsets.Checkpoint) (uint64, bool) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.deps.StoreTimeout)
	defer cancel()
	stored, err := r.deps.Store.Load(sctx, cp.Stream)
	if err != nil || stored.Fingerprint != cp.Fingerprint || stored.ControlOffset > cp.ControlOffset ||
		stored.Version < cp.Version {
		return 0, false
	}
	return stored.Version, true
}

// nextBatchLog is the retained batch log after a commit: every batch whose
// watermark the committed snapshot still retains.
func (r *Stream) nextBatchLog(snap reorg.Snapshot, pending []pendingBatch, flushed sink.Committed) []offsets.Batch {
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
	for _, p := range pending {
		if keep[p.wm.Seq] {
			out = append(out, offsets.Batch{Seq: p.wm.Seq, ID: p.wm.BatchID, Ranges: p.wm.Ranges, Spans: groupSpans(flushed, p.wm.BatchID),
				SchemaID: r.valueSchemaID()})
		}
	}
	return out
}

// abort aborts the open transaction, if any, and empties its log.
func (r *Stream) abort(ctx context.Context, why string) error {
	if err := r.joinCommit(); err != nil {
		return err
	}
	r.dropHeld()
	open := r.prod.Stats().Open
	rows := r.txn.rows
	r.txn.reset()
	if !open {
		return nil
	}
	r.log.Info("aborting the open transaction", "reason", why, "rows", rows)
	if err := r.prod.Abort(ctx); err != nil {
		return r.txnError("aborting a transaction", err)
	}
	return nil
}

// rollback aborts the open transaction and returns the reorg state to the
// last commit; the source resumes from the committed cursor.
func (r *Stream) rollback(ctx context.Context, why string) error {
	if err := r.abort(ctx, why); err != nil {
		return err
	}
	r.machine.Rollback()
	r.resume = r.committed.Cursor()
	r.log.Info("rolled back to the last commit", "reason", why, "cursor", cursorText(r.resume))
	return nil
}

// lost reports whether ctx ended because another owner took the stream
// over: its cause is a sink.ErrFenced (cluster.ErrLost).
func lost(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), sink.ErrFenced)
}

// closeProducer closes p: it aborts an open transaction, unless the stream
// was lost to another owner (lost), whose producer aborts it.
func closeProducer(ctx context.Context, p *sink.Producer, log *slog.Logger) {
	if lost(ctx) {
		p.Abandon()
		return
	}
	if err := p.Close(context.WithoutCancel(ctx)); err != nil {
		log.Warn("closing producer", "txn_id", p.TransactionalID(), "err", err)
	}
}

// shutdown finishes on SIGINT/SIGTERM: commit the open transaction when it
// ends at a watermark and all of its records were produced, abort it
// otherwise; the checkpoint follows a commit. interrupted is the error of
// the event the stop interrupted (nil: none was being handled): part of
// that event's work may be missing from the open transaction (a batch's
// records not produced, retractions half written), so it is aborted.
// A stream whose context was canceled with a cause that is sink.ErrFenced
// (a cluster member whose session ended: another member owns the stream
// now and fences this producer) only waits for the commit already in
// flight: it neither commits nor aborts the open transaction, which the
// new owner's producer aborts when it starts, so that it stops at once.
func (r *Stream) shutdown(ctx context.Context, interrupted error) error {
	if lost(ctx) {
		cause := context.Cause(ctx)
		err := r.joinCommit()
		r.dropHeld()
		rows := r.txn.rows
		r.txn.reset()
		r.log.Info("stream stopped without committing: another owner took it over", "reason", cause,
			"open_transaction_rows", rows, "cursor", cursorText(r.committed.Cursor()))
		if err != nil && !errors.Is(err, sink.ErrFenced) && !errors.Is(err, offsets.ErrFenced) {
			return fmt.Errorf("the commit in flight when the stream was lost: %w", err)
		}
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.settle(dctx); err != nil {
		return fmt.Errorf("committing the last transaction at shutdown: %w", err)
	}
	switch {
	case interrupted != nil || (r.prod != nil && r.prod.Stats().Failed):
		// The stop interrupted an event, or a Produce failed: records of
		// the open transaction's batches may be missing from it.
		why := "shutting down after a record of the open transaction failed"
		if interrupted != nil {
			why = fmt.Sprintf("shutting down in the middle of an event (%v)", interrupted)
		}
		if err := r.abort(dctx, why); err != nil {
			return err
		}
	case len(r.txn.pending) > 0 && !r.txn.dirty:
		if err := r.commit(dctx); err != nil {
			return fmt.Errorf("committing the last transaction at shutdown: %w", err)
		}
		if err := r.joinCommit(); err != nil {
			return fmt.Errorf("committing the last transaction at shutdown: %w", err)
		}
	default:
		if err := r.abort(dctx, "shutting down"); err != nil {
			return err
		}
	}
	r.log.Info("stream stopped", "cursor", cursorText(r.committed.Cursor()), "version", r.committed.Version)
	return nil
}

// pollHead sets amp_bridge_behind_head_blocks every HeadPollInterval until
// ctx ends. Of the run loop's state it reads only committedCursor, which
// the loop publishes atomically after every commit.
func (r *Stream) pollHead(ctx context.Context) {
	t := time.NewTicker(r.cfg.HeadPollInterval)
	defer t.Stop()
	for {
		heads, err := r.deps.Heads(ctx, r.cfg.SQL, r.ampOpts()...)
		if err != nil && ctx.Err() == nil {
			r.log.Debug("polling Amp's synced head", "err", err)
		}
		if c, _ := r.committedCursor.Load().(reorg.Cursor); c != nil {
			for net, head := range heads {
				if p, ok := c[net]; ok {
					r.deps.Metrics.behindHead.WithLabelValues(r.cfg.ID, net).Set(max(0, float64(head)-float64(p.Number)))
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

func (r *Stream) emit(e Event) {
	if r.deps.Events == nil {
		return
	}
	e.Stream = r.cfg.ID
	r.deps.Events(e)
}

// controlLog reads the control topic through the sink's reader for
// offsets.Control.
type controlLog struct {
	reader *sink.Reader
	topic  string
}

var _ offsets.ControlLog = controlLog{}

// Bounds implements offsets.ControlLog.
func (c controlLog) Bounds(ctx context.Context) (offsets.ControlBounds, error) {
	b, err := c.reader.ControlBounds(ctx, c.topic)
	return offsets.ControlBounds{Start: b.Start, End: b.End}, err
}

// Scan implements offsets.ControlLog: one chunk per fetch response.
func (c controlLog) Scan(ctx context.Context, from, until int64, fn func([]offsets.ControlRecord) error) error {
	var chunk []offsets.ControlRecord
	return c.reader.ScanControl(ctx, c.topic, from, until, func(recs []sink.ReadRecord) error {
		chunk = chunk[:0]
		for _, rec := range recs {
			chunk = append(chunk, offsets.ControlRecord{Offset: rec.Offset, Key: rec.Key, Value: rec.Value})
		}
		return fn(chunk)
	})
}

// NewControl returns the control topic read through reader.
func NewControl(reader *sink.Reader, codec *offsets.ControlCodec, topic string) *offsets.Control {
	return offsets.NewControl(controlLog{reader: reader, topic: topic}, codec, topic)
}

// control returns the stream's control topic, read through its reader.
func (r *Stream) control() *offsets.Control {
	return NewControl(r.reader, r.deps.Control, r.deps.ControlTopic)
}

// recordLimit is the largest record a data topic takes.
type recordLimit struct {
	topic    string
	batchMax int64 // kafka.batch_max_bytes
	topicMax int64 // the topic's max.message.bytes; 0: unknown
}

// recordBatchOverhead is a record batch's header (Kafka's v2 format);
// recordOverhead bounds a record's own framing (length, attributes,
// timestamp and offset deltas, and the lengths of key, value and headers).
const recordBatchOverhead, recordOverhead = 61, 5 * 5

// check refuses a record that no batch of the topic can carry, naming the
// batch, the row, the size and both limits: it would fail for ever.
func (l recordLimit) check(batchID string, row int64, key, value []byte, headers []sink.Header) error {
	if l.batchMax <= 0 {
		return nil
	}
	size := int64(len(key) + len(value) + recordOverhead)
	for _, h := range headers {
		size += int64(len(h.Key) + len(h.Value) + 10)
	}
	limit := l.batchMax
	if l.topicMax > 0 {
		limit = min(limit, l.topicMax)
	}
	if size+recordBatchOverhead <= limit {
		return nil
	}
	topicMax := "unknown"
	if l.topicMax > 0 {
		topicMax = fmt.Sprintf("%d bytes", l.topicMax)
	}
	return fmt.Errorf("%w: batch %s row %d is a record of about %d bytes, and a record batch may have at most %d bytes "+
		"(kafka.batch_max_bytes %d bytes, max.message.bytes of topic %s %s): raise the topic's max.message.bytes and "+
		"kafka.batch_max_bytes above the largest row, or select fewer or smaller columns", sink.ErrRecordTooLarge,
		batchID, row, size+recordBatchOverhead, limit, l.batchMax, l.topic, topicMax)
}
