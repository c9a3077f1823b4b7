package sink

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Fault injection with kfake ControlKey: each branch of the transaction
// error handling (style H10) has a test.

func createTopic(t testing.TB, cfg Config, topic string, partitions int32) {
	t.Helper()
	a := newAdmin(t, cfg)
	_, err := a.EnsureTopics(testCtx(t), TopicSpec{Name: topic, Kind: TopicData, Partitions: partitions, ReplicationFactor: 1})
	require.NoError(t, err)
}

// createControlTopic creates the control topic "control".
func createControlTopic(t testing.TB, cfg Config) {
	t.Helper()
	a := newAdmin(t, cfg)
	_, err := a.EnsureTopics(testCtx(t), TopicSpec{Name: "control", Kind: TopicControl, ReplicationFactor: 1})
	require.NoError(t, err)
}

// failProduce answers the next Produce request with code on every partition.
func failProduce(c *kfake.Cluster, code int16) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			st.TopicID = rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		n.Add(1)
		return resp, nil, true
	})
	return &n
}

// failEndTxn answers the next EndTxn commit with code, and counts EndTxn
// aborts and InitProducerID requests after it.
type endTxnSpy struct {
	injected  atomic.Int32
	aborts    atomic.Int32
	initPIDs  atomic.Int32
	afterFail atomic.Bool
}

func failEndTxnCommit(c *kfake.Cluster, code int16) *endTxnSpy {
	spy := &endTxnSpy{}
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit {
			c.KeepControl()
			if spy.afterFail.Load() {
				spy.aborts.Add(1)
			}
			return nil, nil, false
		}
		if spy.injected.Load() > 0 {
			c.KeepControl()
			return nil, nil, false
		}
		c.KeepControl()
		spy.injected.Add(1)
		spy.afterFail.Store(true)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = code
		return resp, nil, true
	})
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if spy.afterFail.Load() {
			spy.initPIDs.Add(1)
		}
		return nil, nil, false
	})
	return spy
}

func TestProduceErrorAborts(t *testing.T) {
	c, cfg := newCluster(t)
	topic := "data"
	createTopic(t, cfg, topic, 1)
	reg := prometheus.NewRegistry()
	p := newProducer(t, cfg, "s", Deps{Registerer: reg})
	ctx := testCtx(t)

	injected := failProduce(c, kerr.InvalidRecord.Code)
	require.NoError(t, p.Begin())
	for i := range 3 {
		_ = p.Produce(ctx, dataRecord(topic, "bad", i))
	}
	_, err := p.Commit(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrAborted)
	assert.ErrorIs(t, err, kerr.InvalidRecord)
	assert.NotErrorIs(t, err, ErrFenced)
	assert.Equal(t, int32(1), injected.Load())
	assert.InDelta(t, 1, testutil.ToFloat64(p.m.txnAborts.WithLabelValues("s", "produce_error")), 0)

	// The producer stays usable: the next transaction commits, and only
	// its records are visible.
	_ = produceBatches(t, p, topic, 2, "good")
	assert.Equal(t, []string{"good-row-0", "good-row-1"}, values(consumeCommitted(t, cfg, topic)))
}

func TestProduceErrorFailsFastInProduce(t *testing.T) {
	c, cfg := newCluster(t)
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "s", Deps{})
	ctx := testCtx(t)
	failProduce(c, kerr.InvalidRecord.Code)
	require.NoError(t, p.Begin())
	require.NoError(t, p.Produce(ctx, dataRecord("data", "bad", 0)))
	require.NoError(t, p.cl.Flush(ctx))
	err := p.Produce(ctx, dataRecord("data", "bad", 1))
	require.Error(t, err, "an earlier failure is reported by the next Produce")
	assert.ErrorContains(t, err, "earlier record")
	require.NoError(t, p.Abort(ctx))
	assert.False(t, p.Stats().Open)
}

func TestEndTxnErrorIsUnknownOutcome(t *testing.T) {
	c, cfg := newCluster(t)
	createTopic(t, cfg, "data", 1)
	reg := prometheus.NewRegistry()
	p := newProducer(t, cfg, "s", Deps{Registerer: reg})
	ctx := testCtx(t)
	spy := failEndTxnCommit(c, kerr.UnknownServerError.Code)

	require.NoError(t, p.Begin())
	require.NoError(t, p.Produce(ctx, dataRecord("data", "maybe", 0)))
	_, err := p.Commit(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownOutcome)
	assert.ErrorIs(t, err, kerr.UnknownServerError)
	assert.Equal(t, int32(1), spy.injected.Load())
	assert.InDelta(t, 1, testutil.ToFloat64(p.m.txnAborts.WithLabelValues("s", "unknown")), 0)
	// The producer refuses further work: the caller must restart.
	assert.ErrorIs(t, p.Begin(), ErrUnknownOutcome)
	assert.ErrorIs(t, p.Produce(ctx, dataRecord("data", "x", 0)), ErrUnknownOutcome)
	require.NoError(t, p.Close(ctx))
	assert.ErrorIs(t, p.Begin(), ErrClosed)

	// Restart: a new producer with the same transactional id fences the
	// old epoch and aborts the transaction whose commit was never applied.
	p2 := newProducer(t, cfg, "s", Deps{Registerer: reg})
	_ = produceBatches(t, p2, "data", 1, "after")
	assert.Equal(t, []string{"after-row-0"}, values(consumeCommitted(t, cfg, "data")))
}

func TestEndTxnOperationNotAttemptedTriesAbort(t *testing.T) {
	c, cfg := newCluster(t)
	createTopic(t, cfg, "data", 1)
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	// Debug: the kgo line looked for below is one of its Info lines, which
	// the sink logs at Debug.
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newProducer(t, cfg, "s", Deps{Registerer: reg, Logger: logger})
	ctx := testCtx(t)
	spy := failEndTxnCommit(c, kerr.OperationNotAttempted.Code)

	require.NoError(t, p.Begin())
	require.NoError(t, p.Produce(ctx, dataRecord("data", "never", 0)))
	_, err := p.Commit(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrAborted)
	assert.ErrorIs(t, err, kerr.OperationNotAttempted)
	assert.Equal(t, int32(1), spy.injected.Load())
	assert.InDelta(t, 1, testutil.ToFloat64(p.m.txnAborts.WithLabelValues("s", "not_attempted")), 0)
	// TryAbort ran: kgo either sends an EndTxn abort or, after a failed
	// EndTxn, aborts through a producer id reload (its log line says so).
	out := logs.String()
	assert.True(t, spy.aborts.Load() > 0 || strings.Contains(out, "aborting an unconfirmed transaction"),
		"TryAbort issued; logs:\n%s", out)

	// A broker-sent OperationNotAttempted leaves kgo's producer id failed:
	// the next Begin says restart, and a restarted producer commits
	// cleanly while the attempted transaction stays invisible.
	err = p.Begin()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownOutcome)
	require.NoError(t, p.Close(ctx))
	p2 := newProducer(t, cfg, "s", Deps{Registerer: reg})
	_ = produceBatches(t, p2, "data", 1, "after")
	assert.Equal(t, []string{"after-row-0"}, values(consumeCommitted(t, cfg, "data")))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCanceledFlushAborts(t *testing.T) {
	tests := []struct {
		name string
		// hold keeps the produce request unanswered until the test ends.
		hold bool
		want error
	}{
		// The records are still buffered: the abort drops them cleanly.
		{name: "buffered", hold: false, want: ErrAborted},
		// A produce request is in flight and never answered: the abort
		// cannot confirm what the broker holds within EndTxnTimeout.
		{name: "in flight", hold: true, want: ErrUnknownOutcome},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, cfg := newCluster(t)
			cfg.EndTxnTimeout = time.Second
			cfg.Linger = time.Minute // nothing is sent until Flush
			createTopic(t, cfg, "data", 1)
			p := newProducer(t, cfg, "s", Deps{})
			ctx := testCtx(t)
			release := make(chan struct{})
			entered := make(chan struct{}, 1)
			if tt.hold {
				c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					select {
					case entered <- struct{}{}:
					default:
					}
					c.SleepControl(func() { <-release })
					return nil, nil, false
				})
				cfg.Linger = 0
			}
			defer close(release)
			require.NoError(t, p.Begin())
			require.NoError(t, p.Produce(ctx, dataRecord("data", "slow", 0)))
			if tt.hold {
				go func() { _ = p.cl.Flush(ctx) }() // send it; the broker holds it
				select {
				case <-entered:
				case <-time.After(10 * time.Second):
					t.Fatal("the produce request never reached the broker")
				}
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			start := time.Now()
			_, err := p.Commit(cctx)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.Less(t, time.Since(start), 5*time.Second, "bounded by EndTxnTimeout")
		})
	}
}

// TestInitProducerIDAuthorizationIsNotFencing: a refused transactional id
// is a missing ACL that the error names, never "another instance" (the
// real broker's refusal: TestIntegrationACLs).
func TestInitProducerIDAuthorizationIsNotFencing(t *testing.T) {
	c, cfg := newCluster(t)
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		resp := kreq.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		return resp, nil, true
	})
	_, err := NewProducer(testCtx(t), cfg, "s", Deps{})
	require.ErrorIs(t, err, ErrNotAuthorized)
	assert.NotErrorIs(t, err, ErrFenced)
	assert.NotContains(t, err.Error(), "another instance")
	assert.ErrorContains(t, err, "sinktest.s")
	assert.ErrorContains(t, err, "--operation Write --transactional-id sinktest. --resource-pattern-type prefixed")
}

func TestDeleteRecordsHelperCluster(t *testing.T) {
	// kadm is used by the missing-records test; make sure DeleteRecords on
	// kfake moves the log start as the test assumes.
	_, cfg := newCluster(t)
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "s", Deps{})
	com := produceBatches(t, p, "data", 4, "b")
	r := newReader(t, cfg)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "data", Partition: 0, At: com.Groups[0].Spans[0].First + 1})
	resp, err := kadm.NewClient(r.cl).DeleteRecords(testCtx(t), os)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	starts, err := r.StartOffsets(testCtx(t), "data")
	require.NoError(t, err)
	assert.Equal(t, com.Groups[0].Spans[0].First+1, starts[0])
}

// TestReadControlWaitsForOpenTransactions: another stream's transaction open
// on the control topic hides later committed events behind the last stable
// offset; the reconciliation read waits for it to end instead of stopping
// early.
func TestReadControlWaitsForOpenTransactions(t *testing.T) {
	_, cfg := newCluster(t)
	createControlTopic(t, cfg)
	ctx := testCtx(t)
	other := newProducer(t, cfg, "other", Deps{})
	mine := newProducer(t, cfg, "mine", Deps{})
	r := newReader(t, cfg)
	ev := func(v string) Record { return Record{Topic: "control", Key: []byte(v), Value: []byte(v)} }

	require.NoError(t, other.Begin())
	require.NoError(t, other.Produce(ctx, ev("other-open")))
	require.NoError(t, other.cl.Flush(ctx))
	require.NoError(t, mine.Begin())
	require.NoError(t, mine.Produce(ctx, ev("mine-committed")))
	_, err := mine.Commit(ctx)
	require.NoError(t, err)

	const hold = 300 * time.Millisecond
	committed := make(chan error, 1)
	go func() {
		time.Sleep(hold)
		_, err := other.Commit(ctx)
		committed <- err
	}()
	defer func() { require.NoError(t, <-committed) }()
	start := time.Now()
	cr, err := r.ReadControl(ctx, "control", -1)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), hold-50*time.Millisecond, "waited for the open transaction")
	assert.Equal(t, []string{"other-open", "mine-committed"}, readValues(cr.Records))
}

// TestScanControlChunks: ScanControl hands a range of the control topic to
// its callback one fetch response at a time,
// stops at until, skips aborted records and markers, and returns the
// callback's error unchanged.
func TestScanControlChunks(t *testing.T) {
	_, cfg := newCluster(t)
	cfg.FetchMaxBytes = 1024 // the minimum: a few record batches per fetch
	createControlTopic(t, cfg)
	ctx := testCtx(t)
	p := newProducer(t, cfg, "scan", Deps{})
	r := newReader(t, cfg)
	for i := range 6 {
		require.NoError(t, p.Begin())
		require.NoError(t, p.Produce(ctx, Record{Topic: "control", Key: []byte("s"), Value: fmt.Appendf(nil, "e%d", i)}))
		if i == 2 {
			require.NoError(t, p.cl.Flush(ctx))
			require.NoError(t, p.Abort(ctx))
			continue
		}
		_, err := p.Commit(ctx)
		require.NoError(t, err)
	}
	b, err := r.ControlBounds(ctx, "control")
	require.NoError(t, err)
	assert.Equal(t, int64(0), b.Start)
	assert.Equal(t, int64(12), b.End, "six transactions of one record and one marker")

	var got []string
	var offs []int64
	chunks := 0
	require.NoError(t, r.ScanControl(ctx, "control", 0, b.End, func(recs []ReadRecord) error {
		chunks++
		for _, rec := range recs {
			got, offs = append(got, string(rec.Value)), append(offs, rec.Offset)
		}
		return nil
	}))
	assert.Equal(t, []string{"e0", "e1", "e3", "e4", "e5"}, got)
	assert.Equal(t, []int64{0, 2, 6, 8, 10}, offs)
	assert.Positive(t, chunks)

	got = nil
	require.NoError(t, r.ScanControl(ctx, "control", 2, 8, func(recs []ReadRecord) error {
		got = append(got, readValues(recs)...)
		return nil
	}))
	assert.Equal(t, []string{"e1", "e3"}, got, "the range [2, 8)")

	stop := errors.New("stop")
	err = r.ScanControl(ctx, "control", 0, b.End, func([]ReadRecord) error { return stop })
	assert.Same(t, stop, err)
}

// TestScanControlSmallResponses: a control-topic scan fetches at most
// controlFetchBytes per response whatever fetch_max_bytes says, so that it
// looks at ctx between responses (a stream told to stop does not first
// decompress and decode up to 16 MiB of watermark events).
func TestScanControlSmallResponses(t *testing.T) {
	_, cfg := newCluster(t)
	require.Greater(t, cfg.FetchMaxBytes, int32(4*controlFetchBytes), "the default fetch_max_bytes")
	createControlTopic(t, cfg)
	ctx := testCtx(t)
	p := newProducer(t, cfg, "scan", Deps{})
	r := newReader(t, cfg)
	value := make([]byte, 200<<10)
	_, _ = rand.Read(value) // incompressible: the cap is on compressed bytes
	const txns = 20         // 4 MB of values
	for range txns {
		require.NoError(t, p.Begin())
		require.NoError(t, p.Produce(ctx, Record{Topic: "control", Key: []byte("s"), Value: value}))
		_, err := p.Commit(ctx)
		require.NoError(t, err)
	}
	b, err := r.ControlBounds(ctx, "control")
	require.NoError(t, err)
	var records, responses, largest int
	require.NoError(t, r.ScanControl(ctx, "control", 0, b.End, func(recs []ReadRecord) error {
		responses++
		n := 0
		for _, rec := range recs {
			n += len(rec.Value)
		}
		records, largest = records+len(recs), max(largest, n)
		return nil
	}))
	assert.Equal(t, txns, records)
	assert.LessOrEqual(t, largest, controlFetchBytes+len(value), "one response holds at most controlFetchBytes and one more batch")
	assert.GreaterOrEqual(t, responses, 4)
}

// TestInvalidEpochAfterTransactionTimeout: INVALID_PRODUCER_EPOCH means
// another instance took over, unless the transaction was open longer than
// the transaction timeout: then the broker aborted it (and bumped the
// epoch), and the stream must restart with a new producer, not stop.
func TestInvalidEpochAfterTransactionTimeout(t *testing.T) {
	for _, tc := range []struct {
		name        string
		open        time.Duration
		code        int16
		want        error
		errContains string
	}{
		{name: "within the timeout", open: time.Second, code: kerr.InvalidProducerEpoch.Code, want: ErrFenced},
		{name: "past the timeout", open: 6 * time.Second, code: kerr.InvalidProducerEpoch.Code, want: ErrUnknownOutcome,
			errContains: "longer than kafka.transaction_timeout (5s)"},
		{name: "producer fenced past the timeout", open: 6 * time.Second, code: kerr.ProducerFenced.Code, want: ErrFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, cfg := newCluster(t)
			cfg.TransactionTimeout = 5 * time.Second
			cfg.ReadTimeout = 10 * time.Second
			createTopic(t, cfg, "data", 1)
			var offset atomic.Int64
			now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			p := newProducer(t, cfg, "s", Deps{Now: now})
			ctx := testCtx(t)
			require.NoError(t, p.Begin())
			require.NoError(t, p.Produce(ctx, dataRecord("data", "k", 0)))
			offset.Store(int64(tc.open))
			failProduce(c, tc.code)
			_, err := p.Commit(ctx)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
			if errors.Is(tc.want, ErrUnknownOutcome) {
				assert.NotErrorIs(t, err, ErrFenced)
			}
			if tc.errContains != "" {
				assert.ErrorContains(t, err, tc.errContains)
			}
		})
	}
}

// TestAbandonLeavesTheTransactionToTheNextOwner: Abandon closes a producer
// whose stream another owner took over without ending its transaction
// (no EndTxn) and without waiting for a produce request still in flight;
// the next producer of the transactional id aborts what it left open, and
// only the next owner's records are committed.
func TestAbandonLeavesTheTransactionToTheNextOwner(t *testing.T) {
	c, cfg := newCluster(t)
	topic := "data"
	createTopic(t, cfg, topic, 1)
	// An abort would wait this long for the held produce request.
	cfg.EndTxnTimeout = 10 * time.Minute
	p := newProducer(t, cfg, "s", Deps{})
	ctx := testCtx(t)
	require.NoError(t, p.Begin())
	for i := range 3 {
		require.NoError(t, p.Produce(ctx, dataRecord(topic, "left", i)))
	}
	require.NoError(t, p.cl.Flush(ctx))

	var endTxns atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		endTxns.Add(1)
		return nil, nil, false
	})
	// Produce requests are held until release is closed.
	release := make(chan struct{})
	var released sync.Once
	defer released.Do(func() { close(release) })
	held := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { close(held) })
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	require.NoError(t, p.Produce(ctx, dataRecord(topic, "left", 3)))
	<-held

	abandoned := make(chan struct{})
	go func() { p.Abandon(); close(abandoned) }()
	select {
	case <-abandoned:
	case <-time.After(20 * time.Second):
		t.Fatal("Abandon waited for the produce request in flight")
	}
	assert.Zero(t, endTxns.Load(), "Abandon ends no transaction")
	assert.False(t, p.Stats().Open)
	require.NoError(t, p.Close(ctx), "Close after Abandon is a no-op")

	released.Do(func() { close(release) })
	next := newProducer(t, cfg, "s", Deps{})
	_ = produceBatches(t, next, topic, 2, "next")
	assert.Equal(t, []string{"next-row-0", "next-row-1"}, values(consumeCommitted(t, cfg, topic)))
}

// stallingDecompressor decompresses as dec does, after it is let go:
// each call says it started on entered and waits for release.
type stallingDecompressor struct {
	dec     kgo.Decompressor
	entered chan struct{}
	release chan struct{}
}

func (s stallingDecompressor) Decompress(src []byte, codec kgo.CompressionCodecType) ([]byte, error) {
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
	return s.dec.Decompress(src, codec)
}

// TestReadReturnsMidDecode: a read whose context ends while a response is
// being decompressed and decoded (franz-go looks at no context there; a
// 16 MiB response took seconds on a loaded machine) returns at once with
// the context's error, for a read-back (ReadSpans) and a control-topic
// scan; the decode left behind finishes on its own, and the reader serves
// the next read.
func TestReadReturnsMidDecode(t *testing.T) {
	_, cfg := newCluster(t)
	cfg.Compression = CompressionLZ4
	createControlTopic(t, cfg)
	ctx := testCtx(t)
	createTopic(t, cfg, "data", 1)
	p := newProducer(t, cfg, "mid", Deps{})
	require.NoError(t, p.Begin())
	for i := range 100 {
		require.NoError(t, p.Produce(ctx, Record{Topic: "data", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("value value value"), Group: "g"}))
		require.NoError(t, p.Produce(ctx, Record{Topic: "control", Key: []byte("s"), Value: []byte("event event event")}))
	}
	res, err := p.Commit(ctx)
	require.NoError(t, err)
	g, ok := res.Group("g")
	require.True(t, ok)
	r := newReader(t, cfg)
	b, err := r.ControlBounds(ctx, "control")
	require.NoError(t, err)

	reads := map[string]func(context.Context) error{
		"read-back": func(ctx context.Context) error {
			_, err := r.ReadSpans(ctx, g.Spans)
			return err
		},
		"control scan": func(ctx context.Context) error {
			return r.ScanControl(ctx, "control", 0, b.End, func([]ReadRecord) error { return nil })
		},
	}
	for _, name := range []string{"read-back", "control scan"} {
		read := reads[name]
		stall := stallingDecompressor{dec: kgo.DefaultDecompressor(), entered: make(chan struct{}, 1), release: make(chan struct{})}
		r.dec = stall
		rctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() { errc <- read(rctx) }()
		select {
		case <-stall.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the decode never started", name)
		}
		cancel()
		select {
		case err := <-errc:
			require.ErrorIs(t, err, context.Canceled, name)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the read did not return while its response was being decoded after its context was canceled", name)
		}
		close(stall.release)
		r.dec = kgo.DefaultDecompressor()
		require.NoError(t, read(ctx), "%s: the next read", name)
	}
}
