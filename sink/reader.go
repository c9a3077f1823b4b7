package sink

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ReadRecord is one committed record read back from Kafka.
type ReadRecord struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte // nil for a tombstone
	Headers   []Header
	Timestamp time.Time
}

// Header returns the value of the first header named key.
func (r ReadRecord) Header(key string) ([]byte, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}

// ControlRead is the result of ReadControl.
type ControlRead struct {
	// Records are the committed records from max(from, Start) up to End,
	// in offset order.
	Records []ReadRecord
	// Start is the partition's log start offset when read.
	Start int64
	// End is the last stable offset the read went up to: the next offset
	// to read from next time.
	End int64
	// Truncated is true when from was below Start: retention (or
	// DeleteRecords) removed events the caller asked for.
	Truncated bool
}

// Reader reads committed records back from Kafka (read_committed) by exact
// offsets, for retractions and for the reconciliation read of the control
// topic. It issues its own fetch requests to the partition leaders, so it
// knows exactly how far it has read even across aborted records and
// transaction markers, which a consumer hides. One Reader serves one caller
// at a time.
type Reader struct {
	cfg Config
	cl  *kgo.Client
	adm *kadm.Client
	log *slog.Logger
	dec kgo.Decompressor
	// chunk is the slice process hands records to its callback in.
	chunk []ReadRecord
	// slowWait is how long a read waits for a partition to become stable
	// before it logs the transaction that holds it (slowStableWait).
	slowWait time.Duration
}

// slowStableWait is how long a read waits for a transaction open on a
// partition before it says, once, which transaction that is: a stream's
// start after a takeover waits so for a transaction its killed or paused
// owner left open on the control topic.
const slowStableWait = 5 * time.Second

// NewReader creates a Reader. ctx bounds the first connection.
func NewReader(ctx context.Context, cfg Config, deps Deps) (*Reader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validating kafka config: %w", err)
	}
	deps = deps.withDefaults()
	opts, err := cfg.clientOpts(deps.Logger)
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("creating kafka reader client: %w", err)
	}
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, connectError(ctx, cfg, err)
	}
	return &Reader{cfg: cfg, cl: cl, adm: kadm.NewClient(cl), log: deps.Logger, dec: kgo.DefaultDecompressor(),
		slowWait: slowStableWait}, nil
}

// Close closes the client.
func (r *Reader) Close() { r.cl.Close() }

// EndOffsets returns the last stable offset per partition of topic (what a
// read_committed consumer reads up to).
func (r *Reader) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	out, err := listOffsets(ctx, r.adm.ListCommittedOffsets, topic)
	return out, r.authError(err, topic)
}

// authError classifies a refusal of a read of topic: the Reader needs Read
// on it (which implies the Describe that listing offsets needs).
func (r *Reader) authError(err error, topic string) error {
	return r.cfg.authError(err, fmt.Sprintf("reading topic %q", topic), OpRead, "", topic)
}

// Brokers returns the seed brokers the reader connects to (for messages).
func (r *Reader) Brokers() []string { return r.cfg.Brokers }

// StartOffsets returns the log start offset per partition of topic.
func (r *Reader) StartOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	out, err := listOffsets(ctx, r.adm.ListStartOffsets, topic)
	return out, r.authError(err, topic)
}

// highWatermarks returns the high watermark (end of the log, committed or
// not) per partition of topic.
func (r *Reader) highWatermarks(ctx context.Context, topic string) (map[int32]int64, error) {
	out, err := listOffsets(ctx, r.adm.ListEndOffsets, topic)
	return out, r.authError(err, topic)
}

// waitStable waits until the last stable offset of topic/partition reaches
// target and returns it. Kafka writes commit markers after EndTransaction
// returns, and an open transaction of any producer holds the last stable
// offset back until it ends (at worst transaction.timeout.ms). When ctx ends
// first, the error is a *HangingTransactionError that names the open
// transaction and says whether it will end by itself. ctx is the read's
// (bounded by Config.ReadTimeout), outer the caller's: the look-up of the
// transaction after ctx's deadline has a little time of its own, but ends
// when outer is canceled.
func (r *Reader) waitStable(outer, ctx context.Context, topic string, partition int32, target int64) (int64, error) {
	wait := 5 * time.Millisecond
	began, logged := time.Now(), false
	lso := int64(-1) // the last stable offset of the last poll that answered
	// timedOut describes the transaction that held the read back.
	timedOut := func(err error) error {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hangingDescribeTimeout)
		defer cancel()
		if errors.Is(outer.Err(), context.Canceled) {
			return fmt.Errorf("waiting for %s/%d to become stable up to offset %d: %w", topic, partition, target, outer.Err())
		}
		stop := context.AfterFunc(outer, func() {
			if errors.Is(outer.Err(), context.Canceled) {
				cancel()
			}
		})
		defer stop()
		return r.describeHanging(dctx, topic, partition, target, lso, err)
	}
	for {
		lsos, err := r.EndOffsets(ctx, topic)
		if err != nil {
			// A read that times out during a poll, after one answered
			// short of target, was held back as much as one that times
			// out between polls: on a slow broker the deadline lands
			// mid-request as often as not.
			if lso >= 0 && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				return 0, timedOut(err)
			}
			return 0, err
		}
		lso = lsos[partition]
		if lso >= target {
			return lso, nil
		}
		if !logged && time.Since(began) >= r.slowWait {
			logged = true
			r.logHolder(ctx, topic, partition, target, lso, time.Since(began))
		}
		if err := sleepCtx(ctx, wait); err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				return 0, fmt.Errorf("waiting for %s/%d to become stable up to offset %d: %w", topic, partition, target, err)
			}
			return 0, timedOut(err)
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// logHolder logs, at INFO, the oldest transaction open on topic/partition,
// which a read has waited for for waited: its transactional id, when it
// started and the coordinator's state of it.
func (r *Reader) logHolder(ctx context.Context, topic string, partition int32, target, lso int64, waited time.Duration) {
	dctx, cancel := context.WithTimeout(ctx, hangingDescribeTimeout)
	defer cancel()
	var he *HangingTransactionError
	if !errors.As(r.describeHanging(dctx, topic, partition, target, lso, nil), &he) || errors.Is(he.DescribeErr, errHangingEnded) {
		return
	}
	attrs := []any{"topic", topic, "partition", partition, "last_stable", lso, "target", target,
		"waited", waited.Round(time.Millisecond)}
	if he.DescribeErr != nil {
		attrs = append(attrs, "describe_err", he.DescribeErr)
	} else {
		attrs = append(attrs, "transactional_id", he.TransactionalID, "producer_id", he.ProducerID,
			"producer_epoch", he.ProducerEpoch, "start_offset", he.StartOffset, "coordinator_state", he.CoordinatorState,
			"other_open", he.OtherOpen)
		if !he.TxnStarted.IsZero() {
			attrs = append(attrs, "txn_started", he.TxnStarted.UTC().Format(time.RFC3339Nano), "txn_timeout", he.TxnTimeout)
		}
	}
	r.log.Info("a read waits for a transaction open on the partition to end (it ends when its producer is "+
		"initialised again or at its transaction timeout)", attrs...)
}

// hangingDescribeTimeout bounds the look-up of the transaction that held a
// read back.
const hangingDescribeTimeout = 10 * time.Second

// describeHanging builds the error of a read that gave up waiting for
// topic/partition to become stable up to target: it finds the oldest open
// transaction on the partition (DescribeProducers), its transactional id
// (ListTransactions by producer id) and the coordinator's state of it
// (DescribeTransactions), and judges it the way kafka-transactions.sh
// find-hanging does: a transaction whose coordinator lists the partition in
// its current transaction will end; one whose coordinator does not (it has
// completed it, or does not know the producer id) never will.
func (r *Reader) describeHanging(ctx context.Context, topic string, partition int32, target, lso int64, cause error) error {
	e := &HangingTransactionError{Topic: topic, Partition: partition, Target: target, LastStable: lso,
		Bootstrap: strings.Join(r.cfg.Brokers, ","), Err: cause}
	s := kadm.TopicsSet{}
	s.Add(topic, partition)
	prods, err := r.adm.DescribeProducers(ctx, s)
	if err == nil {
		if dp, ok := prods[topic].Partitions[partition]; ok && dp.Err != nil {
			err = dp.Err
		}
	}
	if err != nil {
		e.DescribeErr = fmt.Errorf("describing the producers of %s/%d: %w", topic, partition, err)
		return e
	}
	var open []kadm.DescribedProducer
	for _, p := range prods[topic].Partitions[partition].ActiveProducers.Sorted() {
		if p.CurrentTxnStartOffset >= 0 {
			open = append(open, p)
		}
	}
	if len(open) == 0 {
		e.DescribeErr = errHangingEnded
		return e
	}
	p := slices.MinFunc(open, func(a, b kadm.DescribedProducer) int {
		return cmp.Compare(a.CurrentTxnStartOffset, b.CurrentTxnStartOffset)
	})
	e.Found, e.OtherOpen = true, len(open)-1
	e.ProducerID, e.ProducerEpoch, e.StartOffset = p.ProducerID, p.ProducerEpoch, p.CurrentTxnStartOffset
	e.CoordinatorEpoch = p.CoordinatorEpoch
	if p.LastTimestamp >= 0 {
		e.LastWrite = time.UnixMilli(p.LastTimestamp)
	}

	listed, err := r.adm.ListTransactions(ctx, []int64{p.ProducerID}, nil)
	if err != nil {
		e.DescribeErr = fmt.Errorf("listing the transactional id of producer id %d: %w", p.ProducerID, err)
		return e
	}
	for _, l := range listed.Sorted() {
		if l.ProducerID == p.ProducerID {
			e.TransactionalID = l.TxnID
		}
	}
	if e.TransactionalID == "" {
		// Kafka's find-hanging takes this for a hanging transaction too; it
		// may also mean these credentials may not describe the id.
		e.Verdict = HangingOrphaned
		return e
	}
	txns, err := r.adm.DescribeTransactions(ctx, e.TransactionalID)
	var d kadm.DescribedTransaction
	if err == nil {
		d, err = txns.On(e.TransactionalID, nil)
	}
	if err == nil {
		err = d.Err
	}
	if err != nil {
		e.DescribeErr = fmt.Errorf("describing transactional id %q: %w", e.TransactionalID, err)
		return e
	}
	e.CoordinatorState = d.State
	if d.StartTimestamp > 0 {
		e.TxnStarted = time.UnixMilli(d.StartTimestamp)
	}
	e.TxnTimeout = time.Duration(d.TimeoutMillis) * time.Millisecond
	// The coordinator lists the partitions of its current transaction, and
	// while it prepares a commit or abort those still without a marker.
	if d.Topics.Lookup(topic, partition) && d.ProducerID == p.ProducerID {
		e.Verdict = HangingOngoing
		return e
	}
	// The coordinator is done with it. Its marker may have landed since
	// DescribeProducers: only a transaction still open now is orphaned.
	if still, err := r.openTxn(ctx, topic, partition, p); err != nil {
		e.DescribeErr = err
	} else if !still {
		e.DescribeErr = errHangingEnded
	} else {
		e.Verdict = HangingOrphaned
	}
	return e
}

// errHangingEnded is the DescribeErr of a transaction that ended while the
// read gave up or was being described: a retry of the read goes through.
var errHangingEnded = errors.New("the open transaction has ended since the read gave up")

// openTxn reports whether the transaction of producer p is still open on
// topic/partition, from the same start offset.
func (r *Reader) openTxn(ctx context.Context, topic string, partition int32, p kadm.DescribedProducer) (bool, error) {
	s := kadm.TopicsSet{}
	s.Add(topic, partition)
	prods, err := r.adm.DescribeProducers(ctx, s)
	if err != nil {
		return false, fmt.Errorf("describing the producers of %s/%d again: %w", topic, partition, err)
	}
	for _, q := range prods[topic].Partitions[partition].ActiveProducers.Sorted() {
		if q.ProducerID == p.ProducerID && q.ProducerEpoch == p.ProducerEpoch && q.CurrentTxnStartOffset == p.CurrentTxnStartOffset {
			return true, nil
		}
	}
	return false, nil
}

// ReadSpans reads exactly the committed records of every span (bounded by
// ctx and Config.ReadTimeout). The result has one slice per span, in offset
// order. Aborted records and transaction markers are skipped; if other
// producers share the topic their committed records inside a span are
// returned too (filter by the amp-batch-id header).
//
// A span whose records Kafka no longer holds gives a *MissingRecordsError
// (errors.Is ErrRecordsMissing): its first offset is below the log start
// (retention or DeleteRecords deleted it: the data topic's retention must
// exceed the reorg retention window), it reaches past the end of the
// partition (never written: the checkpoint does not match the topic), or its
// first or last record is absent (compaction removed it). Records that exist
// but are not yet stable (commit markers still being written, or another
// producer's transaction open on the partition) are waited for, within the
// timeout. Spans on one partition are read in one pass, from the lowest
// first to the highest last offset: a metadata request and the fetches
// when the first fetch response shows the range retained and stable (the
// usual case), and a listing of the partition's offsets first otherwise.
func (r *Reader) ReadSpans(ctx context.Context, spans []Span) ([][]ReadRecord, error) {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
	defer cancel()
	type rng struct{ from, until int64 }
	ranges := make(map[topicPartition]rng)
	var order []topicPartition
	for _, s := range spans {
		if s.First < 0 || s.Last < s.First {
			return nil, fmt.Errorf("reading back %s: invalid span (first must be >= 0 and <= last)", s)
		}
		tp := topicPartition{s.Topic, s.Partition}
		if cur, ok := ranges[tp]; ok {
			ranges[tp] = rng{min(cur.from, s.First), max(cur.until, s.Last+1)}
		} else {
			ranges[tp] = rng{s.First, s.Last + 1}
			order = append(order, tp)
		}
	}
	type read struct {
		recs          []ReadRecord
		logStart, hwm int64 // the partition's log start and high watermark
	}
	fetched := make(map[topicPartition]read, len(ranges))
	// The bounds of a topic's partitions, listed once per topic and only
	// for a partition the direct read could not serve.
	starts := make(map[string]map[int32]int64)
	ends := make(map[string]map[int32]int64)
	for _, tp := range order {
		rg := ranges[tp]
		// One pass per partition, from its lowest first to its highest
		// last offset, not one per span (a deep reorg has a span per batch).
		recs, logStart, hwm, ok := r.readStable(ctx, tp.topic, tp.partition, rg.from, rg.until)
		if ok {
			fetched[tp] = read{recs, logStart, hwm}
			continue
		}
		// The direct read found the range not all there, or not yet
		// stable: list the partition's bounds, name what is missing, and
		// wait for the range to become stable (the commit markers are
		// written after EndTransaction returns, and another producer's
		// open transaction holds the partition back).
		if _, ok := starts[tp.topic]; !ok {
			var err error
			if starts[tp.topic], err = r.StartOffsets(ctx, tp.topic); err != nil {
				return nil, fmt.Errorf("reading back %s/%d[%d..%d]: %w", tp.topic, tp.partition, rg.from, rg.until-1, err)
			}
			if ends[tp.topic], err = r.highWatermarks(ctx, tp.topic); err != nil {
				return nil, fmt.Errorf("reading back %s/%d[%d..%d]: %w", tp.topic, tp.partition, rg.from, rg.until-1, err)
			}
		}
		start, ok1 := starts[tp.topic][tp.partition]
		hwm, ok2 := ends[tp.topic][tp.partition]
		for _, s := range spans {
			if s.Topic != tp.topic || s.Partition != tp.partition {
				continue
			}
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("reading back %s: partition %d does not exist in topic %q (was the topic recreated with fewer partitions?)",
					s, s.Partition, s.Topic)
			}
			if s.First < start {
				return nil, &MissingRecordsError{Span: s, LogStart: start, End: hwm, Missing: min(start, s.Last+1) - s.First,
					Reason: fmt.Sprintf("retention (or DeleteRecords) deleted offsets below %d of topic %q; the data topic's retention (retention.ms/retention.bytes) must exceed the stream's reorg retention window, or retractions cannot carry the original rows",
						start, s.Topic)}
			}
			if s.Last >= hwm {
				return nil, &MissingRecordsError{Span: s, LogStart: start, End: hwm, Missing: s.Last + 1 - max(hwm, s.First),
					Reason: "the span reaches past the end of the partition: those records were never written, or the topic was deleted and recreated; the checkpoint does not match this topic"}
			}
		}
		if _, err := r.waitStable(outer, ctx, tp.topic, tp.partition, rg.until); err != nil {
			return nil, fmt.Errorf("reading back %s/%d[%d..%d]: %w", tp.topic, tp.partition, rg.from, rg.until-1, err)
		}
		recs, err := r.fetchRange(ctx, tp.topic, tp.partition, rg.from, rg.until)
		if err != nil {
			return nil, fmt.Errorf("reading back %s/%d[%d..%d]: %w", tp.topic, tp.partition, rg.from, rg.until-1, err)
		}
		fetched[tp] = read{recs, start, hwm}
	}
	out := make([][]ReadRecord, len(spans))
	for i, s := range spans {
		rd := fetched[topicPartition{s.Topic, s.Partition}]
		recs := rd.recs
		lo, _ := slices.BinarySearchFunc(recs, s.First, func(r ReadRecord, o int64) int { return cmp.Compare(r.Offset, o) })
		hi, _ := slices.BinarySearchFunc(recs, s.Last+1, func(r ReadRecord, o int64) int { return cmp.Compare(r.Offset, o) })
		got := recs[lo:hi:hi]
		if len(got) == 0 || got[0].Offset != s.First || got[len(got)-1].Offset != s.Last {
			return nil, &MissingRecordsError{Span: s, LogStart: rd.logStart, End: rd.hwm,
				Missing: s.Last - s.First + 1 - int64(len(got)),
				Reason:  "records at the span's edges are absent although the offsets are retained: compaction removed them, or the span does not belong to this topic"}
		}
		out[i] = got
	}
	return out, nil
}

// readStable reads the committed records with from <= offset < until of a
// partition in as few requests as it can: a metadata request for the
// leader, then fetches, without listing offsets first. The first fetch
// response carries the partition's log start offset, high watermark and
// last stable offset; ok is false (and the caller lists and waits) unless
// they show the whole range retained and stable, or when a request fails.
func (r *Reader) readStable(ctx context.Context, topic string, partition int32, from, until int64) (recs []ReadRecord, logStart, hwm int64, ok bool) {
	m, err := freshMetadata(ctx, r.cl, topic)
	if err != nil {
		return nil, 0, 0, false
	}
	leader, known := m.leaders[partition]
	if !known || leader < 0 {
		return nil, 0, 0, false
	}
	rp, err := r.fetchOnce(ctx, leader, topic, m.id, partition, from, until, r.cfg.FetchMaxBytes)
	if err != nil || rp.ErrorCode != 0 || rp.LogStartOffset < 0 || rp.LogStartOffset > from ||
		rp.HighWatermark < until || rp.LastStableOffset < until {
		return nil, 0, 0, false
	}
	recs, next, err := r.decode(ctx, nil, rp, topic, partition, from, until)
	if err != nil {
		return nil, 0, 0, false
	}
	if next < until {
		// The response stopped short (fetch_max_bytes): the rest is
		// stable too.
		if err := r.fetchEach(ctx, topic, partition, next, until, 0, r.cfg.FetchMaxBytes, func(chunk []ReadRecord) error {
			recs = append(recs, chunk...)
			return nil
		}); err != nil {
			return nil, 0, 0, false
		}
	}
	return recs, rp.LogStartOffset, rp.HighWatermark, true
}

// ControlBounds is the extent of the control topic's partition when read.
type ControlBounds struct {
	// Start is the partition's log start offset.
	Start int64
	// End is the last stable offset: every transaction open when the bounds
	// were taken has ended below it.
	End int64
}

// ControlBounds returns the log start offset and the last stable offset
// of partition 0 of the control topic, after waiting for every transaction
// open at the call to end (another stream's open transaction would
// otherwise hide later committed events), bounded by ctx and
// Config.ReadTimeout.
func (r *Reader) ControlBounds(ctx context.Context, topic string) (ControlBounds, error) {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
	defer cancel()
	const partition = 0
	starts, err := r.StartOffsets(ctx, topic)
	if err != nil {
		return ControlBounds{}, fmt.Errorf("reading the bounds of control topic %s: %w", topic, err)
	}
	hwms, err := r.highWatermarks(ctx, topic)
	if err != nil {
		return ControlBounds{}, fmt.Errorf("reading the bounds of control topic %s: %w", topic, err)
	}
	end, err := r.waitStable(outer, ctx, topic, partition, hwms[partition])
	if err != nil {
		return ControlBounds{}, fmt.Errorf("reading the bounds of control topic %s: %w", topic, err)
	}
	return ControlBounds{Start: starts[partition], End: end}, nil
}

// ScanControl reads the committed records of partition 0 of the control
// topic at offsets from <= offset < until (until at most the End of a
// ControlBounds) and hands them to fn in offset order, one fetch response
// at a time, without keeping them: each response is at most 1 MiB
// (controlFetchBytes, or Config.FetchMaxBytes if smaller) however long the
// range is, and ctx is looked at between responses; fn must not retain
// the slice (the records' Key and Value may be kept). Each fetch is
// bounded by Config.ReadTimeout, the whole scan by ctx. An error of fn
// stops the scan and is returned as is. Offsets below the log start give a
// *MissingRecordsError (retention deleted them).
func (r *Reader) ScanControl(ctx context.Context, topic string, from, until int64, fn func([]ReadRecord) error) error {
	const partition = 0
	if from >= until {
		return nil
	}
	err := r.fetchEach(ctx, topic, partition, from, until, r.cfg.ReadTimeout, min(r.cfg.FetchMaxBytes, controlFetchBytes), fn)
	if err != nil {
		var fnErr callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		return fmt.Errorf("reading control topic %s/%d[%d..%d): %w", topic, partition, from, until, err)
	}
	return nil
}

// controlFetchBytes caps one fetch response of a control-topic scan. A
// scan reads the whole topic's watermark events (every stream's) to keep
// a few, and a response's decode no longer holds up a stream told to stop
// (decode), but the cap keeps the decode's memory and CPU per response
// small at no cost in time (BenchmarkRecoverRedisLess): events are small
// and the scan's reads stay near the topic's end.
const controlFetchBytes = 1 << 20

// callbackError carries the error of a fetchEach callback out unchanged.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }
func (e callbackError) Unwrap() error { return e.err }

// ReadControl reads the committed records of partition 0 of the control
// topic from offset from (negative: from the log start) up to the last
// stable offset at the time of the call (ControlBounds), bounded by ctx and
// Config.ReadTimeout. It holds every record in memory: for tests and small
// ranges; the bridge reads the control topic with ControlBounds and
// ScanControl. It does not interpret the records.
func (r *Reader) ReadControl(ctx context.Context, topic string, from int64) (ControlRead, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
	defer cancel()
	const partition = 0
	b, err := r.ControlBounds(ctx, topic)
	if err != nil {
		return ControlRead{}, err
	}
	out := ControlRead{Start: b.Start, End: b.End}
	if from < 0 {
		from = out.Start
	}
	if from < out.Start {
		out.Truncated = true
		from = out.Start
	}
	if from >= out.End {
		return out, nil
	}
	out.Records, err = r.fetchRange(ctx, topic, partition, from, out.End)
	if err != nil {
		return ControlRead{}, fmt.Errorf("reading control topic %s/%d[%d..%d): %w", topic, partition, from, out.End, err)
	}
	return out, nil
}

// fetchRange returns the committed records with from <= offset < until of
// one partition; until must not exceed the last stable offset.
func (r *Reader) fetchRange(ctx context.Context, topic string, partition int32, from, until int64) ([]ReadRecord, error) {
	var out []ReadRecord
	err := r.fetchEach(ctx, topic, partition, from, until, 0, r.cfg.FetchMaxBytes, func(recs []ReadRecord) error {
		out = append(out, recs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fetchEach fetches the committed records with from <= offset < until of
// one partition (until must not exceed the last stable offset) and hands
// the records of each fetch response to fn, in offset order; it keeps
// none. Each fetch is bounded by timeout when it is positive, and its
// response by maxBytes (the broker returns at least one record batch).
// An error of fn stops it and is returned wrapped in a callbackError.
func (r *Reader) fetchEach(ctx context.Context, topic string, partition int32, from, until int64, timeout time.Duration,
	maxBytes int32, fn func([]ReadRecord) error) error {
	var (
		next   = from
		leader = int32(-1)
		id     [16]byte
	)
	for next < until {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fetching %s/%d at %d: %w", topic, partition, next, err)
		}
		if leader < 0 {
			m, err := freshMetadata(ctx, r.cl, topic)
			if err != nil {
				return r.authError(err, topic)
			}
			l, ok := m.leaders[partition]
			if !ok {
				return fmt.Errorf("partition %d of %q: %w", partition, topic, kerr.UnknownTopicOrPartition)
			}
			if l < 0 {
				if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
					return fmt.Errorf("waiting for a leader of %s/%d: %w", topic, partition, err)
				}
				continue
			}
			leader, id = l, m.id
		}
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if timeout > 0 {
			fctx, cancel = context.WithTimeout(ctx, timeout)
		}
		rp, err := r.fetchOnce(fctx, leader, topic, id, partition, next, until, maxBytes)
		cancel()
		if err != nil {
			return err
		}
		switch perr := kerr.ErrorForCode(rp.ErrorCode); {
		case perr == nil:
		case errors.Is(perr, kerr.OffsetOutOfRange):
			return &MissingRecordsError{
				Span: Span{Topic: topic, Partition: partition, First: next, Last: until - 1}, LogStart: rp.LogStartOffset, End: rp.LastStableOffset,
				Missing: until - next, Reason: "offset out of range: retention or DeleteRecords deleted the records",
			}
		case kerr.IsRetriable(perr):
			r.log.Debug("retrying fetch", "topic", topic, "partition", partition, "err", perr)
			leader = -1
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return fmt.Errorf("fetching %s/%d at %d: %w (last error: %w)", topic, partition, next, err, perr)
			}
			continue
		default:
			return r.authError(fmt.Errorf("fetching %s/%d at %d: %w", topic, partition, next, perr), topic)
		}
		after, err := r.process(ctx, rp, topic, partition, next, until, fn)
		if err != nil {
			return err
		}
		if after <= next {
			// No progress: the broker had nothing at next, although the
			// caller checked next < until <= last stable offset.
			if rp.LastStableOffset >= 0 && rp.LastStableOffset <= next {
				return fmt.Errorf("fetching %s/%d: no committed data at offset %d (last stable offset %d, wanted up to %d)",
					topic, partition, next, rp.LastStableOffset, until)
			}
			if err := sleepCtx(ctx, 10*time.Millisecond); err != nil {
				return fmt.Errorf("fetching %s/%d at %d: %w", topic, partition, next, err)
			}
			continue
		}
		next = after
	}
	return nil
}

// process decodes the records of a fetch response of topic/partition
// from offset next and hands those below until to fn (in a slice it
// reuses), and returns the offset to fetch from next. An error of fn is
// returned wrapped in a callbackError.
func (r *Reader) process(ctx context.Context, rp *kmsg.FetchResponseTopicPartition, topic string, partition int32, next, until int64,
	fn func([]ReadRecord) error) (int64, error) {
	chunk, after, err := r.decode(ctx, r.chunk[:0], rp, topic, partition, next, until)
	if err != nil {
		return 0, err
	}
	r.chunk = chunk[:0]
	if len(chunk) > 0 {
		if err := fn(chunk); err != nil {
			return 0, callbackError{err}
		}
	}
	return after, nil
}

// decode is appendDecoded run on its own goroutine, returned from when it
// ends or when ctx does: franz-go decompresses and decodes a response
// whole without a look at a context, which for a response of up to
// fetch_max_bytes (16 MiB, lz4) on a loaded machine takes seconds, and a
// stream told to stop (a cluster member's lost stream) must not wait for
// that. A decode left so finishes on its own and its records are dropped;
// the slice it appends to is not reused (recs must not be used after an
// error).
func (r *Reader) decode(ctx context.Context, recs []ReadRecord, rp *kmsg.FetchResponseTopicPartition, topic string, partition int32,
	next, until int64) ([]ReadRecord, int64, error) {
	type decoded struct {
		recs  []ReadRecord
		after int64
		err   error
	}
	done := make(chan decoded, 1)
	go func() {
		recs, after, err := r.appendDecoded(recs, rp, topic, partition, next, until)
		done <- decoded{recs, after, err}
	}()
	select {
	case d := <-done:
		return d.recs, d.after, d.err
	case <-ctx.Done():
		r.chunk = nil // the decode left behind may still append to it
		return nil, 0, fmt.Errorf("decoding fetch of %s/%d at %d: %w", topic, partition, next, ctx.Err())
	}
}

// appendDecoded decodes the records of a fetch response of
// topic/partition from offset next, appends those below until to recs,
// and returns recs and the offset to fetch from next. Record batches that
// start at or after until are not decoded: a read of spans followed by
// much data would otherwise decode all of it, up to fetch_max_bytes. The
// records keep franz-go's decoded headers, keys and values: nothing is
// copied.
func (r *Reader) appendDecoded(recs []ReadRecord, rp *kmsg.FetchResponseTopicPartition, topic string, partition int32,
	next, until int64) ([]ReadRecord, int64, error) {
	rp.RecordBatches = batchesBefore(rp.RecordBatches, until)
	fp, after := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		Offset:         next,
		IsolationLevel: kgo.ReadCommitted(),
		Topic:          topic,
		Partition:      partition,
	}, rp, r.dec, nil)
	if fp.Err != nil {
		return recs, 0, fmt.Errorf("decoding fetch of %s/%d at %d: %w", topic, partition, next, fp.Err)
	}
	n := 0
	for _, rec := range fp.Records {
		if rec.Offset >= until {
			break
		}
		n++
	}
	recs = slices.Grow(recs, n)
	for _, rec := range fp.Records[:n] {
		recs = append(recs, ReadRecord{
			Topic:     rec.Topic,
			Partition: rec.Partition,
			Offset:    rec.Offset,
			Key:       rec.Key,
			Value:     rec.Value,
			Headers:   rec.Headers,
			Timestamp: rec.Timestamp,
		})
	}
	return recs, after, nil
}

// batchesBefore returns the prefix of b (the record batches of a fetch
// response) whose batches start below offset until. Every message format
// begins with the same 12 bytes (the base offset, then the length of the
// rest), but only a v2 batch's base offset is its first record's (a
// compressed v0/v1 wrapper carries its last one's), so a batch of an older
// format ends the trimming: it and what follows are kept.
func batchesBefore(b []byte, until int64) []byte {
	const (
		headerLen = 12 // base offset, batch length
		magicAt   = 16 // after the partition leader epoch
	)
	pos := 0
	for len(b)-pos > magicAt {
		if b[pos+magicAt] != 2 {
			return b
		}
		if int64(binary.BigEndian.Uint64(b[pos:])) >= until {
			return b[:pos]
		}
		n := int(int32(binary.BigEndian.Uint32(b[pos+8:])))
		if n <= 0 || len(b)-pos-headerLen < n {
			return b // a partial batch at the end, or garbage: the decoder says
		}
		pos += headerLen + n
	}
	return b
}

func (r *Reader) fetchOnce(ctx context.Context, leader int32, topic string, id [16]byte, partition int32, offset, until int64,
	maxBytes int32) (*kmsg.FetchResponseTopicPartition, error) {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 200
	req.MinBytes = 1
	req.MaxBytes = maxBytes
	req.IsolationLevel = 1 // read_committed
	req.SessionEpoch = -1  // no fetch session
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rt.TopicID = id
	rpart := kmsg.NewFetchRequestTopicPartition()
	rpart.Partition = partition
	rpart.FetchOffset = offset
	rpart.CurrentLeaderEpoch = -1
	rpart.LastFetchedEpoch = -1
	rpart.LogStartOffset = -1
	rpart.PartitionMaxBytes = maxBytes
	rt.Partitions = append(rt.Partitions, rpart)
	req.Topics = append(req.Topics, rt)

	kresp, err := r.cl.Broker(int(leader)).Request(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fetching %s/%d at %d (until %d) from broker %d: %w", topic, partition, offset, until, leader, err)
	}
	resp := kresp.(*kmsg.FetchResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, fmt.Errorf("fetching %s/%d at %d: %w", topic, partition, offset, err)
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != topic && (t.TopicID != id || id == [16]byte{}) {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == partition {
				return &t.Partitions[j], nil
			}
		}
	}
	return nil, fmt.Errorf("fetching %s/%d at %d: the response has no data for the partition", topic, partition, offset)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ReadTopic reads every committed record of every partition of topic, from
// the log start up to the last stable offset at the time of the call (it
// waits for transactions open then to end), bounded by ctx and
// Config.ReadTimeout. Records are in offset order per partition, partitions
// in ascending order. Aborted records and transaction markers are skipped,
// so offsets have gaps. `bridge verify` uses it; it holds the whole topic in
// memory.
func (r *Reader) ReadTopic(ctx context.Context, topic string) ([]ReadRecord, error) {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ReadTimeout)
	defer cancel()
	starts, err := r.StartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("reading topic %s: %w", topic, err)
	}
	hwms, err := r.highWatermarks(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("reading topic %s: %w", topic, err)
	}
	var out []ReadRecord
	for _, p := range slices.Sorted(maps.Keys(hwms)) {
		end, err := r.waitStable(outer, ctx, topic, p, hwms[p])
		if err != nil {
			return nil, fmt.Errorf("reading topic %s: %w", topic, err)
		}
		if starts[p] >= end {
			continue
		}
		recs, err := r.fetchRange(ctx, topic, p, starts[p], end)
		if err != nil {
			return nil, fmt.Errorf("reading topic %s/%d[%d..%d): %w", topic, p, starts[p], end, err)
		}
		out = append(out, recs...)
	}
	return out, nil
}
