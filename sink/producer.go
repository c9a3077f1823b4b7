package sink

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"
)

// HeaderOp is the record header whose value labels records_written_total
// when Record.Op is empty.
const HeaderOp = "amp-op"

// Header is one Kafka record header. It is franz-go's, so that records
// read back share the decoded headers instead of copying them.
type Header = kgo.RecordHeader

// Record is one record to produce. Key, Value and header values are opaque
// bytes (the encoder produced them); the sink does not retain them after the
// record's delivery is acknowledged.
type Record struct {
	// Topic is the destination topic (it must exist: see EnsureTopics).
	Topic string
	// Key is hashed (murmur2, as the Java client) to pick the partition, so
	// a batch id key keeps a batch, its retractions and its tombstone on one
	// partition. Nil keys are refused: every bridge record is keyed.
	Key []byte
	// Value is the payload; nil is a tombstone.
	Value   []byte
	Headers []Header
	// Group names the unit whose offset spans Commit reports (the batch id,
	// or a name for a control event whose offset the checkpoint needs).
	// Empty: not tracked (retractions, tombstones).
	Group string
	// Op labels records_written_total; empty means the amp-op header value,
	// or "none".
	Op string
	// Timestamp is the record's timestamp; zero means the producer's clock
	// at Produce. Set it once per batch, to the time the batch is produced:
	// franz-go would otherwise read the clock for every record, and counts
	// kafka.delivery_timeout from it.
	Timestamp time.Time
	// Owner, when set, is told once the sink no longer reads the record's
	// Key, Value and header values: after its acknowledgement, its failure,
	// or its drop by an abort, or at once when Produce refuses it. Release
	// is called exactly once per Produce call, on a franz-go goroutine or
	// the caller's, and must not block. It is compared (==) with the
	// previous record's, whose delivery callback a run of records of one
	// owner and group shares: use a pointer.
	Owner Releaser
}

// Releaser is the owner of a record's bytes (Record.Owner), told when the
// sink has done with them, so that they can be reused.
type Releaser interface {
	// Release says the sink no longer reads one record's bytes.
	Release()
}

// Span is a contiguous range of offsets [First, Last] of one partition that
// a group's records occupy. Spans of one group never include records of a
// later Produce call of another group on the same partition as long as the
// caller produces groups one after the other; if several producers share a
// topic, a span may include their records: filter read-back records by a
// header (amp-batch-id).
type Span struct {
	Topic     string
	Partition int32
	First     int64
	Last      int64
}

// String formats the span as topic/partition[first..last].
func (s Span) String() string {
	return fmt.Sprintf("%s/%d[%d..%d]", s.Topic, s.Partition, s.First, s.Last)
}

// GroupSpans is the offset spans of one group, sorted by topic and partition.
type GroupSpans struct {
	Group string
	Spans []Span
	// Records is the number of records of the group.
	Records int
}

// Committed is what a successful Commit made visible.
type Committed struct {
	// Groups are in the order of each group's first Produce.
	Groups []GroupSpans
	// Records counts every record of the transaction.
	Records int
	// Duration is from Begin to the end of the commit.
	Duration time.Duration
}

// Group returns the spans of the named group.
func (c Committed) Group(name string) (GroupSpans, bool) {
	for _, g := range c.Groups {
		if g.Group == name {
			return g, true
		}
	}
	return GroupSpans{}, false
}

// TxnStats describes the open transaction, for Budget decisions.
type TxnStats struct {
	Open    bool
	Records int
	Began   time.Time
	// Failed is set once a record of the transaction failed or a Produce
	// returned an error: the transaction can only abort (Commit aborts it).
	Failed bool
}

// Deps are the injected dependencies of the package's clients.
type Deps struct {
	// Logger receives the sink's logs and, through kslog, franz-go's. Nil
	// discards them. A producer adds its txn_id; give it a logger that
	// already carries the stream's id (the pipeline's stream logger does).
	Logger *slog.Logger
	// Registerer receives the sink's metrics and franz-go's kprom client
	// metrics. Nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Stream is the stream label of the producer's metrics; empty means
	// the producer's id. A stream's backfill partitions have producers of
	// their own ids that count under the stream; franz-go's client metrics
	// are exported only by the producer whose id is the stream.
	Stream string
}

func (d Deps) withDefaults() Deps {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return d
}

// Producer writes one stream's records in Kafka transactions (or, in
// at-least-once mode, idempotently without transactions).
//
// It is driven by one goroutine: Begin, Produce..., then Commit or Abort.
// Its methods are not safe for concurrent use, except that Close may follow
// from another goroutine once no call is in progress.
type Producer struct {
	cfg    Config
	id     string
	label  string // the stream label of its metrics
	txnID  string
	eos    bool
	cl     *kgo.Client
	log    *slog.Logger
	now    func() time.Time
	m      *metrics
	broken error // sticky ErrFenced / ErrUnknownOutcome
	txn    *txn

	// The headers of the previous record (a copy) and its op: the rows of
	// a batch share their headers, which are copied once and then shared
	// by the batch's records (franz-go only reads them).
	hdr   []Header
	hdrOp string
	// recs is a slab the records are taken from: one allocation per 256
	// records instead of one each. A slab (and the keys and values its
	// records point to) stays reachable until its last record is handed
	// out and delivered: at most 255 records' worth.
	recs []kgo.Record
	// prom is the delivery callback of the previous record, for its
	// transaction, group and owner: consecutive records of one group and
	// owner (an encoded batch's) share it instead of allocating one each.
	prom      func(*kgo.Record, error)
	promTxn   *txn
	promGroup *group
	promOwner Releaser

	// loaded holds the topics franz-go has published the partitions of
	// (awaitPartitions); lastTopic is the topic of the previous record
	// of the open transaction, so that a run of records to one topic
	// looks it up once.
	loaded    map[string]bool
	lastTopic string

	closeOnce sync.Once
	closed    atomic.Bool
}

// txn is the state of the open transaction.
type txn struct {
	began time.Time
	// records counts the records handed to franz-go, each of which gets
	// its delivery callback exactly once.
	records int
	ops     map[string]*int
	groups  []*group
	byName  map[string]*group
	// The previous record's group and op counter: a batch's records share
	// them, so most records need no map lookup.
	lastGroup *group
	lastOp    string
	lastOpN   *int
	// unloaded lists the topics produced to whose partitions franz-go had
	// not published when their first record was produced: EndTransaction
	// waits for them (awaitPartitions).
	unloaded []string

	failed atomic.Pointer[error] // first failed record, for fast failure
	// acked counts the delivery callbacks that have run; waitFor is the
	// count a waiter waits for (-1: none), woken through wake.
	acked   atomic.Int64
	waitFor atomic.Int64
	wake    chan struct{}
	// aborting tracks the AbortBufferedRecords started by the first
	// failed record, so that no callback of this transaction runs after
	// a wait.
	aborting sync.WaitGroup

	mu sync.Mutex // guards the spans of every group (promises run on kgo goroutines)

	// ctx is the context of the transaction's records in franz-go, which
	// fails a partition's unsent records once the first one's context
	// ends. The caller's context is not it: a shutdown cancels that, and
	// then commits what was produced (a stream stopping at a watermark).
	// ctx ends only when a Produce blocked for room in the buffer gives
	// up because the watched caller's context ended (the transaction is
	// then aborted), or when the transaction is over.
	ctx    context.Context //nolint:containedctx // the records' context in franz-go, which lives as long as the transaction
	cancel context.CancelFunc
	// watched is the Done channel of the first cancelable context given
	// to Produce, and unwatch stops the function that runs when it
	// closes; inProduce is whether a Produce with that context is in
	// franz-go's Produce, which blocks while the buffer is full.
	watched   <-chan struct{}
	unwatch   func() bool
	inProduce atomic.Bool
}

// watch makes a Produce with ctx give up waiting for room in the buffer
// when ctx ends, for the first cancelable ctx of the transaction, and
// reports whether this Produce is one to give up. When ctx ends while such
// a Produce is in franz-go's, blocked or not, the transaction's records
// fail: that Produce returns ctx's error, so the transaction is aborted
// anyway.
func (t *txn) watch(ctx context.Context) bool {
	done := ctx.Done()
	if done == nil {
		return false
	}
	if t.unwatch == nil {
		t.watched = done
		t.unwatch = context.AfterFunc(ctx, func() {
			if t.inProduce.Load() {
				t.cancel()
			}
		})
	}
	return done == t.watched
}

// end releases the transaction's record context and its watch.
func (t *txn) end() {
	if t.unwatch != nil {
		t.unwatch()
	}
	t.cancel()
}

type group struct {
	name    string
	records int
	spans   map[topicPartition]*Span
	last    *Span // the span of the previous acknowledgement (under txn.mu)
}

type topicPartition struct {
	topic     string
	partition int32
}

// NewProducer connects and, in exactly-once mode, initializes the producer
// id of transactional id "{prefix}.{id}" (id is the stream name, or e.g.
// "stream.backfill-3" for a backfill worker). Initializing the id fences any
// older instance with the same id and aborts its open transaction, so a
// restarted bridge never waits for the transaction timeout.
//
// ctx bounds only the connection and initialization.
func NewProducer(ctx context.Context, cfg Config, id string, deps Deps) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating kafka config: %w", err)
	}
	if !legalName(id, 200) {
		return nil, fmt.Errorf("creating producer: id %q must match [a-zA-Z0-9._-]+ (it becomes part of the transactional id)", id)
	}
	deps = deps.withDefaults()
	p := &Producer{
		cfg:    cfg,
		id:     id,
		label:  cmp.Or(deps.Stream, id),
		txnID:  TransactionalID(cfg.TransactionalIDPrefix, id),
		eos:    cfg.Delivery == DeliveryExactlyOnce,
		now:    deps.Now,
		loaded: make(map[string]bool),
	}
	p.log = deps.Logger.With("txn_id", p.txnID, "delivery", string(cfg.Delivery))

	opts, err := cfg.clientOpts(p.log)
	if err != nil {
		return nil, err
	}
	codec, _ := cfg.Compression.codec() // validated above
	opts = append(opts,
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytes(cfg.BatchMaxBytes),
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		kgo.RecordDeliveryTimeout(cfg.DeliveryTimeout),
		// Losing acknowledged data must stop the stream, not be skipped.
		kgo.StopProducerOnDataLossDetected(),
	)
	if cfg.compressor != nil {
		// After ProducerBatchCompression: the shared compressor replaces
		// the client's own (ShareCompression).
		opts = append(opts, kgo.WithCompressor(cfg.compressor))
	}
	if p.eos {
		opts = append(opts,
			kgo.TransactionalID(p.txnID),
			kgo.TransactionTimeout(cfg.TransactionTimeout),
		)
	}
	if deps.Registerer != nil {
		if p.m, err = newMetrics(deps.Registerer, cfg.MetricsNamespace); err != nil {
			return nil, err
		}
		if p.label == id { // a backfill partition's client is not the stream's
			opts = append(opts, kgo.WithHooks(kprom.NewMetrics(cfg.MetricsNamespace,
				kprom.Registerer(lenientRegisterer{Registerer: deps.Registerer, log: p.log}),
				kprom.Subsystem("kafka"),
				kprom.WithStaticLabel(prometheus.Labels{"stream": p.label}),
				// Batches and records beside the bytes: records per batch
				// (produce_records_total / produce_batches_total) is what
				// linger and batch_max_bytes are tuned by.
				kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.UncompressedBytes, kprom.Batches, kprom.Records),
			)))
		}
	}
	if cfg.SASL.Mechanism == SASLPlain && !cfg.TLS.Enabled {
		p.log.Warn("SASL PLAIN without TLS sends the password in clear text; enable kafka.tls")
	}
	if cfg.TLS.InsecureSkipVerify {
		p.log.Warn("TLS InsecureSkipVerify is on (tests only): broker certificates are not verified")
	}

	p.cl, err = kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka producer client: %w", err)
	}
	// Ping first: a wrong address, TLS or SASL setting fails here at once,
	// while the producer id load would retry until ctx ends.
	if err := p.cl.Ping(ctx); err != nil {
		p.cl.Close()
		return nil, connectError(ctx, cfg, err)
	}
	if _, _, err := p.cl.ProducerID(ctx); err != nil {
		p.cl.Close()
		return nil, p.initError(err)
	}
	p.log.Info("kafka producer ready")
	return p, nil
}

func (p *Producer) initError(err error) error {
	switch {
	case isAuthorization(err):
		return fmt.Errorf("initializing producer id for %s: %w", p.txnID,
			p.cfg.authError(err, "initializing the producer id", OpWrite, p.txnID, "<each of the stream's topics>"))
	case isFenced(err):
		return fmt.Errorf("%w: initializing producer id for %s: %w", ErrFenced, p.txnID, err)
	case errors.Is(err, kerr.InvalidTransactionTimeout):
		return fmt.Errorf("%w: initializing producer id for %s: kafka.transaction_timeout is %s; lower it or raise the broker's transaction.max.timeout.ms: %w",
			ErrTransactionTimeout, p.txnID, p.cfg.TransactionTimeout, err)
	default:
		return fmt.Errorf("initializing producer id for %s: %w", p.txnID, err)
	}
}

// TransactionalID returns the producer's transactional id (also in
// at-least-once mode, where it is only a name).
func (p *Producer) TransactionalID() string { return p.txnID }

// Stats describes the open transaction.
func (p *Producer) Stats() TxnStats {
	if p.txn == nil {
		return TxnStats{}
	}
	return TxnStats{Open: true, Records: p.txn.records, Began: p.txn.began, Failed: p.txn.failed.Load() != nil}
}

func (p *Producer) usable() error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.broken != nil {
		return fmt.Errorf("producer %s is unusable after an earlier error: %w", p.txnID, p.broken)
	}
	return nil
}

// Begin opens a transaction. It fails if one is open.
func (p *Producer) Begin() error {
	if err := p.usable(); err != nil {
		return err
	}
	if p.txn != nil {
		return fmt.Errorf("beginning transaction on %s: a transaction is already open; call Commit or Abort first", p.txnID)
	}
	if p.eos {
		if err := p.cl.BeginTransaction(); err != nil {
			if isAuthorization(err) {
				err = p.cfg.authError(err, "beginning a transaction", OpWrite, p.txnID)
				p.broken = err
				return fmt.Errorf("beginning transaction on %s: %w", p.txnID, err)
			}
			if isFenced(err) {
				p.broken = ErrFenced
				return fmt.Errorf("%w: beginning transaction on %s: %w", ErrFenced, p.txnID, err)
			}
			// kgo refuses to begin only when its producer id failed for
			// good: this client cannot recover, a restarted one can.
			p.broken = ErrUnknownOutcome
			return fmt.Errorf("%w: beginning transaction on %s: %w", ErrUnknownOutcome, p.txnID, err)
		}
	}
	p.txn = &txn{
		began:  p.now(),
		ops:    make(map[string]*int),
		byName: make(map[string]*group),
		wake:   make(chan struct{}, 1),
	}
	p.txn.ctx, p.txn.cancel = context.WithCancel(context.Background())
	p.txn.waitFor.Store(-1)
	p.lastTopic = ""
	return nil
}

// Produce buffers rec in the open transaction and returns; delivery is
// asynchronous. It blocks while the producer buffer is full (MaxBufferedBytes):
// that is the backpressure to the caller, bounded by ctx. Once Produce has
// returned nil, the record belongs to the transaction: ctx ending later
// does not fail it, so that what was produced can still be committed after
// a shutdown began.
//
// A non-nil error means the transaction cannot commit (an earlier record
// failed, ctx ended during the call, the record was refused, or no
// transaction is open): the caller stops with records it meant for the
// transaction left out, so the transaction is marked failed (TxnStats.Failed)
// and Commit aborts it and returns the classified error; or call Abort.
func (p *Producer) Produce(ctx context.Context, rec Record) error {
	handed := false
	if rec.Owner != nil {
		defer func() {
			if !handed {
				rec.Owner.Release()
			}
		}()
	}
	if err := p.usable(); err != nil {
		return err
	}
	t := p.txn
	if t == nil {
		return fmt.Errorf("producing to %s: no open transaction; call Begin first", rec.Topic)
	}
	if f := t.failed.Load(); f != nil {
		return fmt.Errorf("producing to %s: an earlier record of this transaction failed: %w", rec.Topic, classifyRecordErr(*f))
	}
	if rec.Key == nil {
		return t.fail(fmt.Errorf("producing to %s: record has a nil key; every bridge record is keyed (batch id or row key)", rec.Topic))
	}
	if rec.Topic != p.lastTopic {
		if p.eos && !p.loaded[rec.Topic] && !slices.Contains(t.unloaded, rec.Topic) {
			t.unloaded = append(t.unloaded, rec.Topic)
		}
		p.lastTopic = rec.Topic
	}
	if len(p.recs) == 0 {
		p.recs = make([]kgo.Record, 256)
	}
	kr := &p.recs[0] // fresh: zero but for what is set here
	p.recs = p.recs[1:]
	kr.Topic, kr.Key, kr.Value, kr.Timestamp = rec.Topic, rec.Key, rec.Value, rec.Timestamp
	if kr.Timestamp.IsZero() {
		kr.Timestamp = p.now()
	}
	op := rec.Op
	if len(rec.Headers) > 0 {
		var hop string
		kr.Headers, hop = p.headers(rec.Headers)
		if op == "" {
			op = hop
		}
	}
	if op == "" {
		op = "none"
	}
	t.records++
	if op != t.lastOp || t.lastOpN == nil {
		n := t.ops[op]
		if n == nil {
			n = new(int)
			t.ops[op] = n
		}
		t.lastOp, t.lastOpN = op, n
	}
	*t.lastOpN++
	var g *group
	if rec.Group != "" {
		if g = t.lastGroup; g == nil || g.name != rec.Group {
			if g = t.byName[rec.Group]; g == nil {
				g = &group{name: rec.Group, spans: make(map[topicPartition]*Span)}
				t.byName[rec.Group] = g
				t.groups = append(t.groups, g)
			}
			t.lastGroup = g
		}
		g.records++
	}
	if p.prom == nil || p.promTxn != t || p.promGroup != g || p.promOwner != rec.Owner {
		p.prom, p.promTxn, p.promGroup, p.promOwner = p.promise(t, g, rec.Owner), t, g, rec.Owner
	}
	handed = true
	watched := t.watch(ctx)
	if watched {
		t.inProduce.Store(true)
	}
	p.cl.Produce(t.ctx, kr, p.prom)
	if watched {
		t.inProduce.Store(false)
	}
	if err := ctx.Err(); err != nil {
		// The caller stops here, so records it meant for this transaction
		// are missing from it: it must not commit.
		return t.fail(fmt.Errorf("producing to %s: %w", rec.Topic, err))
	}
	return nil
}

// fail marks t as failed by err (unless a record failed first), so that
// Commit aborts it, and returns err: a Produce that returns an error leaves
// its caller's records out of the transaction, which then must not commit.
func (t *txn) fail(err error) error {
	e := err
	t.failed.CompareAndSwap(nil, &e)
	return err
}

// awaitPartitions waits until franz-go has published the partitions of
// every topic the transaction produced to, which EndTransaction must find.
//
// franz-go (v1.22.3) publishes a topic's partitions only after handing its
// first buffered records to them, and those can be sent, acknowledged and
// flushed before it does. EndTransaction then finds no partition added to
// the transaction and, under KIP-890 part 2, turns TryCommit into an abort
// and returns nil: the records are aborted while Commit reports them
// committed. It also leaves the partition's sequence unreset, so the next
// transaction fails with OUT_OF_ORDER_SEQUENCE_NUMBER. Only a topic's first
// records in a client are exposed: a topic is published once, whole, so
// one loaded partition means all are.
func (p *Producer) awaitPartitions(ctx context.Context, t *txn) error {
	var tick *time.Ticker
	for _, topic := range t.unloaded {
		for {
			if leader, epoch, err := p.cl.PartitionLeader(topic, 0); leader != -1 || epoch != -1 || err != nil {
				p.loaded[topic] = true
				break
			}
			if tick == nil {
				tick = time.NewTicker(100 * time.Microsecond)
				defer tick.Stop()
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("ending transaction %s: the Kafka client has not loaded the partitions of topic %q it produced to: %w", p.txnID, topic, ctx.Err())
			}
		}
	}
	t.unloaded = nil
	return nil
}

// promise returns the delivery callback of records of transaction t, group
// g (nil: untracked) and owner (nil: none).
func (p *Producer) promise(t *txn, g *group, owner Releaser) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if isAuthorization(err) {
			err = p.cfg.authError(err, fmt.Sprintf("producing to topic %q", r.Topic), OpWrite, p.txnID, r.Topic)
		}
		if err != nil {
			e := err // only a failure's error goes to the heap
			if t.failed.CompareAndSwap(nil, &e) {
				// Fail what is still buffered at once, rather than
				// after each record's own retries (what
				// kgo.AbortingFirstErrPromise does).
				t.aborting.Add(1)
				go func() {
					defer t.aborting.Done()
					if aerr := p.cl.AbortBufferedRecords(context.Background()); aerr != nil {
						p.log.Warn("aborting buffered records after a failed record", "err", aerr)
					}
				}()
			}
		} else if g != nil {
			t.observe(g, r)
		}
		// franz-go has written the record into its request and has its
		// answer: the bytes are the owner's again.
		if owner != nil {
			owner.Release()
		}
		t.ack()
	}
}

// ack counts one delivery callback and wakes a waiter waiting for it.
func (t *txn) ack() {
	if t.acked.Add(1) == t.waitFor.Load() {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// wait waits until every record handed to franz-go so far has had its
// delivery callback (and an abort started by a failed record has ended),
// and returns the first record error; it returns false when ctx ends
// first. Only the producing goroutine calls it.
func (t *txn) wait(ctx context.Context) (bool, error) {
	want := int64(t.records)
	t.waitFor.Store(want)
	defer t.waitFor.Store(-1)
	// ack adds, then loads waitFor; this stores waitFor, then loads acked:
	// one of them sees the other's write, so the last ack is not missed.
	for t.acked.Load() < want {
		select {
		case <-t.wake: // possibly stale: check again
		case <-ctx.Done():
			return false, nil
		}
	}
	f := t.failed.Load()
	if f == nil {
		return true, nil
	}
	done := make(chan struct{})
	go func() { t.aborting.Wait(); close(done) }()
	select {
	case <-done:
		return true, *f
	case <-ctx.Done():
		return false, nil
	}
}

// headers returns a copy of hs (the caller may reuse hs) and the value of
// its amp-op header: the previous record's when hs has the same keys and
// values. Equal headers in other memory (the next Flight message of a batch
// Amp split carries the batch's headers anew) are taken on as the copy, so
// that the records after this one match by their pointers and not by
// their bytes.
func (p *Producer) headers(hs []Header) ([]Header, string) {
	equal, same := compareHeaders(hs, p.hdr)
	if same {
		return p.hdr, p.hdrOp
	}
	op := p.hdrOp
	if !equal {
		op = ""
		for _, h := range hs {
			if op == "" && h.Key == HeaderOp {
				op = string(h.Value)
			}
		}
	}
	// The copy is of the slice, not of the value bytes, which records
	// reference as before.
	p.hdr, p.hdrOp = slices.Clone(hs), op
	return p.hdr, op
}

// compareHeaders reports whether a and b have the same keys and values
// (equal), and whether each of them is the very same memory in both
// (same), on every record: a loop of its own, which runs in less than half
// the time of slices.EqualFunc with a closure. A header whose key and value
// are the same memory as b's (what the records of one batch pass, since
// p.hdr copies the caller's slice but not its keys and values) is matched
// by its pointers and lengths, without the call to the runtime's memequal
// that == on a string or bytes.Equal makes; only other memory has its
// bytes compared. BenchmarkHeaders, the bridge's five headers: 12.5 ns per
// record when they are the same memory, and 12.7 when the records pass
// equal headers in new memory, which headers takes on (55.0 when it kept
// comparing their bytes; -cpu 1, medians of five alternated runs, load
// average 0.7-1.4).
func compareHeaders(a, b []Header) (equal, same bool) {
	if len(a) != len(b) {
		return false, false
	}
	same = true
	for i := range a {
		ka, kb, va, vb := a[i].Key, b[i].Key, a[i].Value, b[i].Value
		if len(ka) != len(kb) || len(va) != len(vb) {
			return false, false
		}
		if unsafe.StringData(ka) == unsafe.StringData(kb) && unsafe.SliceData(va) == unsafe.SliceData(vb) {
			continue
		}
		same = false
		if ka != kb || !bytes.Equal(va, vb) {
			return false, false
		}
	}
	return true, same
}

func (t *txn) observe(g *group, r *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := g.last
	if s == nil || s.Partition != r.Partition || s.Topic != r.Topic {
		tp := topicPartition{r.Topic, r.Partition}
		if s = g.spans[tp]; s == nil {
			s = &Span{Topic: r.Topic, Partition: r.Partition, First: r.Offset, Last: r.Offset}
			g.spans[tp] = s
		}
		g.last = s
	}
	s.First = min(s.First, r.Offset)
	s.Last = max(s.Last, r.Offset)
}

// Commit flushes the open transaction and commits it. On success it returns
// the offset spans of every group. Errors, by class (errors.Is):
//
//   - ErrAborted: a record failed, ctx ended before the flush finished, or
//     the broker did not attempt the commit (OperationNotAttempted,
//     TransactionAbortable); the transaction was aborted (TryAbort) and
//     nothing is visible. Retry from the checkpoint.
//   - ErrFenced: another instance owns the transactional id. Exit non-zero.
//   - ErrUnknownOutcome: EndTransaction failed without a definite answer.
//     Restart and re-derive the state from the control topic.
//   - ErrDeliveryFailed (at-least-once mode): some records may be visible.
//
// After ErrFenced or ErrUnknownOutcome the Producer refuses further work;
// Close it.
func (p *Producer) Commit(ctx context.Context) (Committed, error) {
	if err := p.usable(); err != nil {
		return Committed{}, err
	}
	t := p.txn
	if t == nil {
		return Committed{}, fmt.Errorf("committing on %s: no open transaction", p.txnID)
	}
	start := p.now()
	fctx, cancel := context.WithTimeout(ctx, p.cfg.DeliveryTimeout)
	err := p.cl.Flush(fctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("%w: the brokers did not acknowledge the transaction's records within kafka.delivery_timeout (%s)", err, p.cfg.DeliveryTimeout)
		}
		return Committed{}, p.abort(ctx, "canceled", fmt.Errorf("flushing: %w", err))
	}
	// After a successful flush every promise has run or is about to; the
	// bound only matters when a failed record's background abort hangs.
	wctx, wcancel := p.detached(ctx)
	waited, err := t.wait(wctx)
	wcancel()
	if !waited {
		err = fmt.Errorf("waiting for record acknowledgements: %w", context.DeadlineExceeded)
	}
	if err != nil {
		return Committed{}, p.abort(ctx, "produce_error", fmt.Errorf("producing: %w", err))
	}
	if p.eos {
		ectx, cancel := p.detached(ctx)
		if err := p.awaitPartitions(ectx, t); err != nil {
			cancel()
			return Committed{}, p.abort(ctx, "not_attempted", err)
		}
		err := p.cl.EndTransaction(ectx, kgo.TryCommit)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, kerr.OperationNotAttempted), errors.Is(err, kerr.TransactionAbortable):
			return Committed{}, p.abort(ctx, "not_attempted", fmt.Errorf("ending transaction (commit not attempted): %w", err))
		case isAuthorization(err):
			// The coordinator refused the EndTxn: nothing was committed,
			// and the transaction stays open until its timeout.
			p.finish(t, "unauthorized")
			err = p.cfg.authError(err, "committing a transaction", OpWrite, p.txnID)
			p.broken = err
			return Committed{}, fmt.Errorf("committing transaction %s (nothing was committed): %w", p.txnID, err)
		case p.expiredEpoch(t, err):
			p.finish(t, "expired")
			p.broken = ErrUnknownOutcome
			return Committed{}, p.expiredErr(t, "committing", err)
		case isFenced(err):
			p.finish(t, "fenced")
			p.broken = ErrFenced
			return Committed{}, fmt.Errorf("%w: committing transaction %s: %w", ErrFenced, p.txnID, err)
		default:
			p.finish(t, "unknown")
			p.broken = ErrUnknownOutcome
			p.log.Error("transaction commit outcome unknown", "err", err)
			return Committed{}, fmt.Errorf("%w: committing transaction %s: %w", ErrUnknownOutcome, p.txnID, err)
		}
	}
	end := p.now()
	out := t.spans(end)
	if p.m != nil {
		p.m.txnCommits.WithLabelValues(p.label).Inc()
		for op, n := range t.ops {
			p.m.recordsWritten.WithLabelValues(p.label, op).Add(float64(*n))
		}
		p.m.commitDuration.WithLabelValues(p.label).Observe(end.Sub(start).Seconds())
	}
	p.finish(t, "committed")
	return out, nil
}

// Abort aborts the open transaction (a no-op without one): buffered
// records are dropped and, in exactly-once mode, EndTransaction(TryAbort)
// makes everything produced invisible. It returns nil when the abort is
// confirmed, ErrFenced when the producer was fenced, and ErrUnknownOutcome
// when the abort could not be confirmed (nothing was committed, but the
// producer must be recreated). ctx cancellation does not interrupt the
// abort; EndTxnTimeout bounds it.
func (p *Producer) Abort(ctx context.Context) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.txn == nil {
		return nil
	}
	return p.abort(ctx, "requested", nil)
}

// abort aborts the open transaction because of cause (nil: requested) and
// returns the classified error.
func (p *Producer) abort(ctx context.Context, reason string, cause error) error {
	cause = classifyRecordErr(cause)
	t := p.txn
	actx, cancel := p.detached(ctx)
	defer cancel()
	if err := p.cl.AbortBufferedRecords(actx); err != nil {
		p.log.Warn("aborting buffered records", "err", err)
	}
	// Wait for every promise, so no callback of this transaction runs later.
	// Records failed by the abort itself (ErrAborting) are expected; only a
	// fencing error among them changes the outcome. A produce request that
	// never gets an answer keeps its promise pending: bounded by actx, and
	// then the producer's state is unknown.
	waited, recErr := t.wait(actx)
	if !waited {
		p.finish(t, "unknown")
		p.broken = ErrUnknownOutcome
		return fmt.Errorf("%w: aborting transaction %s: records still in flight after %s (nothing was committed, but the producer state is unknown): %w",
			ErrUnknownOutcome, p.txnID, p.cfg.EndTxnTimeout, errors.Join(cause, actx.Err()))
	}
	var endErr error
	if p.eos {
		// Bounded short: a topic whose records all failed before
		// franz-go loaded its metadata may never be published, and
		// an acknowledged record's topic is published at once.
		wctx, wcancel := context.WithTimeout(actx, time.Second)
		if err := p.awaitPartitions(wctx, t); err != nil {
			p.log.Info("aborting the transaction regardless", "err", err)
		}
		wcancel()
		endErr = p.cl.EndTransaction(actx, kgo.TryAbort)
	}
	fenced := isFenced(cause) || isFenced(recErr) || isFenced(endErr)
	if fenced && cause == nil && isFenced(recErr) {
		cause = fmt.Errorf("producing: %w", recErr)
	}
	switch {
	case isAuthorization(endErr):
		// The coordinator refused the abort: nothing was committed, and the
		// transaction stays open until its timeout.
		p.finish(t, "unauthorized")
		endErr = p.cfg.authError(endErr, "aborting a transaction", OpWrite, p.txnID)
		p.broken = endErr
		return fmt.Errorf("aborting transaction %s (nothing was committed): %w", p.txnID, errors.Join(cause, endErr))
	case fenced && p.expiredEpoch(t, cause, recErr, endErr):
		p.finish(t, "expired")
		p.broken = ErrUnknownOutcome
		return p.expiredErr(t, "aborting", errors.Join(cause, recErr, endErr))
	case fenced:
		p.finish(t, "fenced")
		p.broken = ErrFenced
		return fmt.Errorf("%w: aborting transaction %s: %w", ErrFenced, p.txnID, errors.Join(cause, endErr))
	case endErr != nil:
		p.finish(t, "unknown")
		p.broken = ErrUnknownOutcome
		return fmt.Errorf("%w: aborting transaction %s (nothing was committed, but the producer state is unknown): %w",
			ErrUnknownOutcome, p.txnID, errors.Join(cause, endErr))
	}
	p.finish(t, "aborted")
	if p.m != nil {
		p.m.txnAborts.WithLabelValues(p.label, reason).Inc()
	}
	if cause == nil {
		p.log.Debug("transaction aborted", "reason", reason)
		return nil
	}
	if !p.eos {
		return fmt.Errorf("%w: %s: %w", ErrDeliveryFailed, p.txnID, cause)
	}
	p.log.Warn("transaction aborted", "reason", reason, "err", cause)
	return fmt.Errorf("%w: %s (%s): %w", ErrAborted, p.txnID, reason, cause)
}

// spans returns what t has acknowledged so far: the spans of every group.
func (t *txn) spans(now time.Time) Committed {
	out := Committed{Records: t.records, Duration: now.Sub(t.began)}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.groups {
		gs := GroupSpans{Group: g.name, Records: g.records, Spans: make([]Span, 0, len(g.spans))}
		for _, s := range g.spans {
			gs.Spans = append(gs.Spans, *s)
		}
		slices.SortFunc(gs.Spans, func(a, b Span) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
		})
		out.Groups = append(out.Groups, gs)
	}
	return out
}

// Flush waits until every record produced so far in the open transaction is
// acknowledged and returns the offset spans of every group so far, without
// committing: the transaction stays open. The run loop uses it to learn the
// offsets of a transaction's data records before it writes the control
// event that records them, in the same transaction. Errors abort the
// transaction exactly as Commit's do (ErrAborted); nothing is visible.
func (p *Producer) Flush(ctx context.Context) (Committed, error) {
	if err := p.usable(); err != nil {
		return Committed{}, err
	}
	t := p.txn
	if t == nil {
		return Committed{}, fmt.Errorf("flushing on %s: no open transaction", p.txnID)
	}
	// A record is acknowledged within DeliveryTimeout or fails; a flush
	// that outlasts it waits on brokers that do not answer.
	fctx, cancel := context.WithTimeout(ctx, p.cfg.DeliveryTimeout)
	err := p.cl.Flush(fctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			err = fmt.Errorf("%w: the brokers did not acknowledge the transaction's records within kafka.delivery_timeout (%s)", err, p.cfg.DeliveryTimeout)
		}
		return Committed{}, p.abort(ctx, "canceled", fmt.Errorf("flushing: %w", err))
	}
	wctx, wcancel := p.detached(ctx)
	waited, err := t.wait(wctx)
	wcancel()
	if !waited {
		err = fmt.Errorf("waiting for record acknowledgements: %w", context.DeadlineExceeded)
	}
	if err != nil {
		return Committed{}, p.abort(ctx, "produce_error", fmt.Errorf("producing: %w", err))
	}
	return t.spans(p.now()), nil
}

// CommitWith is the one path by which a transaction's records become
// visible together with the control records that describe them: it begins
// a transaction when none is open, flushes the records produced so far,
// calls control with their offset spans, produces the records control
// returns into the same transaction, and commits. The spans control sees
// are final: its records (the control events) are the transaction's last.
// Errors are Flush's, Produce's and Commit's; an error from control aborts
// the transaction and is returned as it is.
func (p *Producer) CommitWith(ctx context.Context, control func(flushed Committed) ([]Record, error)) (Committed, error) {
	if p.txn == nil {
		if err := p.Begin(); err != nil {
			return Committed{}, err
		}
	}
	flushed, err := p.Flush(ctx)
	if err != nil {
		return Committed{}, err
	}
	recs, err := control(flushed)
	if err != nil {
		if aerr := p.Abort(ctx); aerr != nil {
			return Committed{}, errors.Join(err, aerr)
		}
		return Committed{}, err
	}
	for _, rec := range recs {
		if err := p.Produce(ctx, rec); err != nil {
			return Committed{}, err
		}
	}
	return p.Commit(ctx)
}

// finish closes the bookkeeping of t with an outcome label.
func (p *Producer) finish(t *txn, outcome string) {
	t.end()
	p.txn = nil
	p.prom, p.promTxn, p.promGroup, p.promOwner = nil, nil, nil, nil
	if p.m == nil {
		return
	}
	p.m.txnDuration.WithLabelValues(p.label, outcome).Observe(p.now().Sub(t.began).Seconds())
	switch outcome {
	case "fenced", "unknown":
		p.m.txnAborts.WithLabelValues(p.label, outcome).Inc()
	}
}

// detached returns a context that keeps ctx's values but not its
// cancellation, bounded by EndTxnTimeout: canceling EndTransaction in flight
// would turn a clean commit or abort into an unknown outcome.
func (p *Producer) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), p.cfg.EndTxnTimeout)
}

// Close aborts an open transaction (bounded by ctx and EndTxnTimeout) and
// closes the client. It is idempotent; later calls return nil.
func (p *Producer) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		if p.txn != nil && p.broken == nil {
			err = p.abort(ctx, "closing", nil)
		}
		p.closed.Store(true)
		p.cl.Close()
	})
	return err
}

// Abandon closes the producer without ending its open transaction, for a
// stream another owner has taken over (a cluster member whose session
// ended): that owner's producer aborts the transaction when it starts, and
// an abort here would only wait for records in flight to a coordinator
// that has fenced this producer. Buffered and in-flight records fail with
// kgo.ErrClientClosed. Close and Abandon are each a no-op after either.
func (p *Producer) Abandon() {
	p.closeOnce.Do(func() {
		if t := p.txn; t != nil {
			p.log.Info("closing the producer without ending its open transaction: another owner aborts it",
				"txn_id", p.txnID, "records", t.records)
			p.finish(t, "abandoned")
		}
		p.closed.Store(true)
		p.cl.Close()
	})
}

// expiredEpoch reports whether the fencing errors errs are the broker's
// abort of transaction t for outliving kafka.transaction_timeout: an
// INVALID_PRODUCER_EPOCH (the coordinator bumps the epoch when it aborts a
// timed-out transaction, KIP-890), no PRODUCER_FENCED or authorization
// error, and t open for at least the timeout. Another instance's
// InitProducerID answers PRODUCER_FENCED to this one's EndTxn; a transaction
// that outlived its timeout is aborted whoever else runs, so restarting with
// a new producer (which fences any other instance) is right either way.
func (p *Producer) expiredEpoch(t *txn, errs ...error) bool {
	if p.now().Sub(t.began) < p.cfg.TransactionTimeout {
		return false
	}
	epoch := false
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
			errors.Is(err, kerr.ClusterAuthorizationFailed):
			return false
		case errors.Is(err, kerr.InvalidProducerEpoch):
			epoch = true
		}
	}
	return epoch
}

// expiredErr is the ErrUnknownOutcome of a transaction the broker aborted
// for outliving its timeout: nothing of it is visible, and the producer's
// epoch is stale, so a new producer must resume from the checkpoint.
func (p *Producer) expiredErr(t *txn, doing string, err error) error {
	p.log.Warn("the transaction outlived kafka.transaction_timeout and the broker aborted it; restarting with a new producer",
		"open_for", p.now().Sub(t.began).Round(time.Millisecond), "transaction_timeout", p.cfg.TransactionTimeout, "err", err)
	return fmt.Errorf("%w: %s transaction %s: it was open for %s, longer than kafka.transaction_timeout (%s), and the broker aborted it "+
		"(nothing of it is visible; a new producer resumes from the checkpoint): %w",
		ErrUnknownOutcome, doing, p.txnID, p.now().Sub(t.began).Round(time.Millisecond), p.cfg.TransactionTimeout, err)
}

// isFenced reports whether err means another producer took the
// transactional id over. A missing ACL is not that (isAuthorization): it
// says which ACL to grant instead of blaming another instance.
func isFenced(err error) bool {
	return err != nil && (errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch))
}

// classifyRecordErr marks a record error no retry can fix: a record above
// the producer's or the broker's size limit.
func classifyRecordErr(err error) error {
	if err != nil && !errors.Is(err, ErrRecordTooLarge) && (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) {
		return fmt.Errorf("%w (raise the topic's max.message.bytes and kafka.batch_max_bytes, or publish smaller rows): %w", ErrRecordTooLarge, err)
	}
	return err
}
