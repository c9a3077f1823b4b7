package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// pipeFixture is a Stream with a real producer (kfake) and an encoder,
// enough for the pipelined hand-off (hold, settle, join) without Amp.
type pipeFixture struct {
	c   *kfake.Cluster
	r   *Stream
	enc *encode.Encoder
	rec arrow.RecordBatch
}

func newPipeFixture(t *testing.T) *pipeFixture {
	t.Helper()
	return newPipeFixtureWith(t, nil)
}

// newPipeFixtureWith is newPipeFixture with the producer's configuration
// changed by mutate.
func newPipeFixtureWith(t *testing.T, mutate func(*sink.Config)) *pipeFixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.SeedTopics(1, "pipe"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	kc := sink.DefaultConfig()
	kc.Brokers = c.ListenAddrs()
	kc.TransactionalIDPrefix = "pipetest"
	kc.Linger = 0
	if mutate != nil {
		mutate(&kc)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	prod, err := sink.NewProducer(ctx, kc, "pipe", sink.Deps{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = prod.Close(context.Background()) })

	schema := arrow.NewSchema([]arrow.Field{{Name: "block_num", Type: arrow.PrimitiveTypes.Uint64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i := range 10 {
		b.Field(0).(*array.Uint64Builder).Append(uint64(i))
	}
	rec := b.NewRecordBatch()
	t.Cleanup(rec.Release)
	enc, err := encode.NewEncoder(encode.Config{Stream: "pipe", Topic: "pipe", Version: "test"}, schema)
	require.NoError(t, err)

	r := New(config.StreamConfig{ID: "pipe"}, Deps{Metrics: NewMetrics(nil), Kafka: kc})
	r.prod, r.topic, r.enc = prod, "pipe", enc
	return &pipeFixture{c: c, r: r, enc: enc, rec: rec}
}

// batch encodes the fixture's 10 rows into a held batch.
func (f *pipeFixture) batch(t *testing.T, id string) heldBatch {
	t.Helper()
	s := f.r.slabs.get()
	ranges := []reorg.BlockRange{{Network: "eth", Start: 1, End: 1}}
	require.NoError(t, f.enc.Encode(f.rec, encode.BatchMeta{Op: encode.OpCreate, Ranges: ranges, BatchID: id}, &s.out))
	return heldBatch{slab: s, out: produceBatch{topic: "pipe", batchID: id, op: "c", ts: time.Now()}, readyAt: time.Now()}
}

// checkpoints gives the stream the control codec and topic, and a file
// store, which it returns.
func (f *pipeFixture) checkpoints(t *testing.T) *offsets.FileStore {
	t.Helper()
	codec, err := offsets.NewControlCodec()
	require.NoError(t, err)
	store, err := offsets.NewFileStore(t.TempDir(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	f.r.deps.Control, f.r.deps.ControlTopic, f.r.deps.Store = codec, "pipe", store
	return store
}

// countCommits counts the EndTxn requests that commit.
func (f *pipeFixture) countCommits() *atomic.Int32 {
	var commits atomic.Int32
	f.c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.c.KeepControl()
		if req.(*kmsg.EndTxnRequest).Commit {
			commits.Add(1)
		}
		return nil, nil, false
	})
	return &commits
}

// holdBehindCommit sets the stream up as the run loop leaves it at block
// 2's watermark while transaction N (block 1) commits: the reorg state has
// committed block 1, block 2's 10 rows are held (batch n1) and its
// watermark is pending. It returns the commit in flight, which the test
// ends.
func (f *pipeFixture) holdBehindCommit(t *testing.T) *commitJob {
	t.Helper()
	r := f.r
	var err error
	r.machine, err = reorg.New(reorg.DefaultConfig(), reorg.Snapshot{Watermarks: []reorg.Watermark{}})
	require.NoError(t, err)
	evs, err := r.machine.Apply([]reorg.BlockRange{{Network: "eth", Start: 1, End: 1, Hash: reorg.Hash{1}, PrevHash: reorg.Hash{9}, HasPrevHash: true}}, true, 10)
	require.NoError(t, err)
	require.NoError(t, r.machine.Commit(evs[len(evs)-1].Seq))
	j := inFlight()
	r.job, r.bound = j, j
	evs, err = r.machine.Apply([]reorg.BlockRange{{Network: "eth", Start: 2, End: 2, Hash: reorg.Hash{2}, PrevHash: reorg.Hash{1}, HasPrevHash: true}}, true, 10)
	require.NoError(t, err)
	require.NoError(t, r.hold(t.Context(), f.batch(t, "n1")))
	r.txn.pending = []pendingBatch{{wm: evs[len(evs)-1], rows: 10}}
	return j
}

// inFlight is a commit job whose Kafka commit and checkpoint write the test
// ends.
func inFlight() *commitJob {
	return &commitJob{kafka: make(chan struct{}), done: make(chan struct{}), from: time.Now(),
		pending: []pendingBatch{{wm: reorg.Event{BatchID: "n", Ranges: []reorg.BlockRange{{Network: "eth", Start: 1, End: 1}}}}}}
}

// TestFailedCommitStopsTheNext checks that batches of transaction N+1
// encoded while commit N is in flight are never produced when commit N
// fails in Kafka: hold returns the commit's error, the batches are dropped
// (their slabs back in the pool), and no transaction is open.
func TestFailedCommitStopsTheNext(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	j := inFlight()
	r.job, r.bound = j, j
	ctx := t.Context()
	require.NoError(t, r.hold(ctx, f.batch(t, "n1-a")))
	require.NoError(t, r.hold(ctx, f.batch(t, "n1-b")))
	assert.False(t, r.prod.Stats().Open, "nothing of N+1 is produced while commit N is in flight")
	require.Len(t, r.held, 2)

	boom := errors.New("EndTxn: unknown outcome")
	j.kafkaErr, j.err = boom, boom
	close(j.kafka)
	close(j.done)
	err := r.hold(ctx, f.batch(t, "n1-c"))
	require.ErrorIs(t, err, boom, "the failed commit's error stops the run loop")
	assert.False(t, r.prod.Stats().Open, "no record of N+1 was produced")
	assert.Empty(t, r.held)
	assert.Zero(t, r.slabs.live.Load(), "the held batches' slabs are released")
	assert.Nil(t, r.job)
	require.NoError(t, r.settle(ctx), "the failure is reported once")
}

// TestHeldUntilKafkaCommitThenInOrder checks that the next transaction's
// batches wait for the Kafka commit in flight, are then produced in the
// order they were read, and that settle (which every commit calls first)
// waits for the previous commit's checkpoint write: commits and checkpoint
// writes stay in order.
func TestHeldUntilKafkaCommitThenInOrder(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	j := inFlight()
	r.job, r.bound = j, j
	ctx := t.Context()
	for _, id := range []string{"b1", "b2", "b3"} {
		require.NoError(t, r.hold(ctx, f.batch(t, id)))
	}
	assert.False(t, r.prod.Stats().Open)

	// The Kafka commit ends; the checkpoint write goes on.
	j.kafkaAt = time.Now()
	close(j.kafka)
	require.NoError(t, r.hold(ctx, f.batch(t, "b4")))
	assert.True(t, r.prod.Stats().Open, "produced once the Kafka commit ended")
	assert.Equal(t, 40, r.prod.Stats().Records)
	assert.Empty(t, r.held)
	assert.NotNil(t, r.job, "the checkpoint write is still in flight")

	settled := make(chan error, 1)
	go func() { settled <- r.settle(ctx) }()
	select {
	case err := <-settled:
		t.Fatalf("settle returned (%v) before the previous commit's checkpoint write ended", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(j.done)
	require.NoError(t, <-settled)
	assert.Nil(t, r.job)

	committed, err := r.prod.Commit(ctx)
	require.NoError(t, err)
	var order []string
	for _, g := range committed.Groups {
		order = append(order, g.Group)
	}
	assert.Equal(t, "b1 b2 b3 b4", strings.Join(order, " "), "batches produced in the order they were read")
	require.Eventually(t, func() bool { return r.slabs.live.Load() == 0 }, 10*time.Second, 10*time.Millisecond,
		"every slab is released once its records are acknowledged")
}

// TestHoldBounded checks that the hand-off is bounded: with the commit in
// flight, at most maxHeldBatches batches are held, then hold waits for the
// Kafka commit.
func TestHoldBounded(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	j := inFlight()
	r.job, r.bound = j, j
	ctx := t.Context()
	for i := range maxHeldBatches - 1 {
		require.NoError(t, r.hold(ctx, f.batch(t, fmt.Sprintf("b%d", i))))
	}
	blocked := make(chan error, 1)
	last := f.batch(t, "full")
	go func() { blocked <- r.hold(ctx, last) }()
	select {
	case err := <-blocked:
		t.Fatalf("hold returned (%v) with %d batches held and the Kafka commit in flight", err, maxHeldBatches)
	case <-time.After(100 * time.Millisecond):
	}
	j.kafkaAt = time.Now()
	close(j.kafka)
	require.NoError(t, <-blocked)
	assert.Equal(t, 10*maxHeldBatches, r.prod.Stats().Records)
	close(j.done)
	require.NoError(t, r.settle(ctx))
	require.NoError(t, r.prod.Abort(ctx))
}

// TestProduceGivesBackUnproducedRecords checks produceBatch.produce's
// references on its slab, taken for every record at once: when a record
// is refused midway (too large for the topic, or no open transaction) the
// references of the records not produced are given back, so the slab
// returns to the pool once the produced records are acknowledged.
func TestProduceGivesBackUnproducedRecords(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	ctx := t.Context()

	// Produced: every reference comes back with the acknowledgements.
	hb := f.batch(t, "gb")
	n := hb.slab.out.Len()
	require.Equal(t, 10, n)
	require.NoError(t, r.prod.Begin())
	got, err := hb.out.produce(ctx, r.prod, recordLimit{}, hb.slab)
	require.NoError(t, err)
	require.Equal(t, n, got)
	hb.slab.done()
	_, err = r.prod.Commit(ctx)
	require.NoError(t, err)
	assert.Zero(t, r.slabs.live.Load(), "every produced record released")

	// Refused by the producer: no open transaction.
	hb = f.batch(t, "gb2")
	got, err = hb.out.produce(ctx, r.prod, recordLimit{}, hb.slab)
	require.Error(t, err)
	assert.Zero(t, got)
	hb.slab.done()
	assert.Zero(t, r.slabs.live.Load(), "the refused record and the rest given back")

	// Refused by the record limit at the first record.
	hb = f.batch(t, "gb3")
	require.NoError(t, r.prod.Begin())
	got, err = hb.out.produce(ctx, r.prod, recordLimit{topic: "pipe", batchMax: 10}, hb.slab)
	require.ErrorIs(t, err, sink.ErrRecordTooLarge)
	assert.Zero(t, got)
	hb.slab.done()
	assert.Zero(t, r.slabs.live.Load(), "the records not produced are given back")
	require.NoError(t, r.prod.Abort(ctx))
}

// TestSlabPoolKeepsWhatWasInFlight checks that a pool keeps every slab
// that comes back at a commit, when all the records in flight are
// acknowledged at once, up to its cache's maxFree (kafka.max_buffered_bytes),
// so that the next transaction reuses them instead of allocating; and that
// it drops what is above maxFree.
func TestSlabPoolKeepsWhatWasInFlight(t *testing.T) {
	f := newPipeFixture(t)
	assert.Equal(t, sink.DefaultConfig().MaxBufferedBytes, f.r.slabs.cache().maxFree, "the stream's cache keeps up to kafka.max_buffered_bytes")
	p := &slabPool{}
	p.shared.Store(&SlabCache{})
	var out []*slab
	for range 48 { // 48 batches in flight
		s := p.get()
		require.NoError(t, f.enc.Encode(f.rec, encode.BatchMeta{Op: encode.OpCreate, BatchID: "size",
			Ranges: []reorg.BlockRange{{Network: "eth", Start: 1, End: 1}}}, &s.out))
		s.hand()
		s.done()
		out = append(out, s)
	}
	// What the pool counts is the memory a slab holds (its capacity):
	// room for the first 40 to come back.
	keep := 0
	for _, s := range out[:40] {
		require.Positive(t, s.out.Mem())
		keep += s.out.Mem()
	}
	p.cache().maxFree = keep
	for _, s := range out { // the commit's flush: every record acknowledged
		s.Release()
	}
	assert.Len(t, p.cache().free, 40, "the pool keeps up to maxFree bytes of slabs")
	reused := 0
	for range 40 {
		s := p.get()
		if slices.Contains(out, s) {
			reused++
		}
		s.done()
	}
	assert.Equal(t, 40, reused, "the next transaction's slabs are the kept ones")
}

// TestSlabChargedItsMemory checks that an encoded slab is charged the
// memory it holds (its capacity), not only the bytes its records use: the
// bound on the slabs out is a bound on memory.
func TestSlabChargedItsMemory(t *testing.T) {
	f := newPipeFixture(t)
	p := &slabPool{}
	p.shared.Store(NewSlabCache(1 << 20))
	s := p.get()
	require.NoError(t, f.enc.Encode(f.rec, encode.BatchMeta{Op: encode.OpCreate, BatchID: "mem",
		Ranges: []reorg.BlockRange{{Network: "eth", Start: 1, End: 1}}}, &s.out))
	p.encoded(s)
	require.Greater(t, s.out.Mem(), s.out.Size(), "the arena has room to spare (else this test checks nothing)")
	assert.Equal(t, int64(s.out.Mem()), p.cache().out, "charged its memory")
	assert.Equal(t, int64(s.out.Mem()), p.estimate(), "the next slab's estimate")
	s.done()
	assert.Zero(t, p.cache().out)
}

// TestShutdownOfALostStream checks that a stream whose context ends with a
// cause that is sink.ErrFenced (a cluster member whose session ended) waits
// for the commit in flight, then stops without producing what it held,
// without committing its complete microbatch and without an abort (the new
// owner's producer aborts the open transaction).
func TestShutdownOfALostStream(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	j := inFlight()
	r.job, r.bound = j, j
	require.NoError(t, r.hold(t.Context(), f.batch(t, "next-a")))
	require.NoError(t, r.hold(t.Context(), f.batch(t, "next-b")))
	r.txn.pending = []pendingBatch{{wm: reorg.Event{BatchID: "next", Ranges: []reorg.BlockRange{{Network: "eth", Start: 2, End: 2}}}}}

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(fmt.Errorf("%w: the cluster session ended", sink.ErrFenced))
	stopped := make(chan error, 1)
	go func() { stopped <- r.shutdown(ctx, nil) }()
	select {
	case err := <-stopped:
		t.Fatalf("shutdown returned (%v) before the commit in flight ended", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(j.kafka)
	close(j.done)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a lost stream's shutdown did not return once the commit in flight ended")
	}
	assert.Nil(t, r.job)
	assert.Empty(t, r.held)
	assert.Empty(t, r.txn.pending, "the complete microbatch is not committed")
	assert.False(t, r.prod.Stats().Open, "the held batches were not produced")
	assert.Zero(t, r.slabs.live.Load(), "the held batches' slabs are released")
}

// TestCloseOfALostStreamAbandonsItsTransaction checks that closing a lost
// stream (its context's cause a sink.ErrFenced) closes the producer
// without an EndTxn, and that a stream stopped otherwise aborts.
func TestCloseOfALostStreamAbandonsItsTransaction(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cause   error
		endTxns int32
	}{
		{"lost", fmt.Errorf("%w: the cluster session ended", sink.ErrFenced), 0},
		{"stopped", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPipeFixture(t)
			var endTxns atomic.Int32
			f.c.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
				f.c.KeepControl()
				endTxns.Add(1)
				return nil, nil, false
			})
			require.NoError(t, f.r.hold(t.Context(), f.batch(t, "open")))
			require.True(t, f.r.prod.Stats().Open)
			ctx, cancel := context.WithCancelCause(t.Context())
			cancel(tc.cause)
			f.r.close(ctx)
			assert.Nil(t, f.r.prod)
			assert.Equal(t, tc.endTxns, endTxns.Load())
		})
	}
}

// TestShutdownAfterAFailedCommitCommitsNothing checks that a stream whose
// commit failed in Kafka (reported once, by hold) and that is then stopped
// (runOnce turns any error of a stream whose context ended into a
// shutdown) commits nothing more: the reorg state was committed past the
// failed transaction before its Kafka commit and its held batches were
// dropped, so a shutdown commit of the complete microbatch pending would
// record the failed transaction's watermarks and a batch without its rows
// (TestClusterUnderFaults: the next owner's reconciliation then fails for
// good with "the control events do not rebuild a checkpoint").
func TestShutdownAfterAFailedCommitCommitsNothing(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	store := f.checkpoints(t)
	r.lastFull = 0 // a full checkpoint copy was written: this commit would carry only its state
	// Transaction N (block 1) is committing; the run loop reads block 2,
	// a complete microbatch, and holds its rows.
	j := f.holdBehindCommit(t)

	commits := f.countCommits()
	boom := fmt.Errorf("%w: commit N aborted", sink.ErrAborted)
	j.kafkaErr, j.err = boom, boom
	close(j.kafka)
	close(j.done)
	require.ErrorIs(t, r.hold(t.Context(), f.batch(t, "n1-b")), boom, "the failed commit's error stops the run loop")

	// The member stops the stream meanwhile: runOnce calls shutdown.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := r.shutdown(ctx, nil)
	require.ErrorIs(t, err, boom, "the shutdown reports the failed commit instead of committing")
	assert.Nil(t, r.job, "no commit was started")
	assert.Zero(t, commits.Load(), "no transaction was committed after the failed one")
	assert.False(t, r.prod.Stats().Open)
	_, err = store.Load(t.Context(), "pipe")
	assert.ErrorIs(t, err, offsets.ErrNotFound, "no checkpoint was written")
	r.close(ctx)
	assert.NoError(t, r.commitErr, "the next run starts clean")
}

// TestShutdownAfterAnInterruptedProduceCommitsNothing checks that a stream
// stopped while it produces the batches held for a watermark's transaction
// (the stop cancels the run's context between two of their records) does
// not commit that transaction: the records not produced would be missing
// from Kafka behind a checkpoint past them. Found in TestClusterUnderFaults,
// where a member whose stream was revoked committed the first of a
// microbatch's ten records and a checkpoint past all of them.
func TestShutdownAfterAnInterruptedProduceCommitsNothing(t *testing.T) {
	f := newPipeFixture(t)
	r := f.r
	store := f.checkpoints(t)
	r.fingerprint = "test-fingerprint"
	// Transaction N (block 1) is committing; block 2, a complete
	// microbatch, is read and its rows held.
	j := f.holdBehindCommit(t)
	commits := f.countCommits()

	// Commit N ends as the member stops the stream; block 2's watermark
	// then produces the held rows under the canceled context.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	j.kafkaAt = time.Now()
	close(j.kafka)
	close(j.done)
	require.ErrorIs(t, r.commit(ctx), context.Canceled, "the stop interrupts the produce of the held batch")
	require.True(t, r.prod.Stats().Open)
	require.Less(t, r.prod.Stats().Records, 10, "records of the batch were left out")
	require.True(t, r.prod.Stats().Failed, "a Produce that returned an error fails the transaction")

	// runOnce calls shutdown; without the event's error, the failed
	// transaction alone must stop the commit too.
	require.NoError(t, r.shutdown(ctx, nil), "the stop aborts the incomplete transaction")
	assert.Nil(t, r.job, "no commit was started")
	assert.Zero(t, commits.Load(), "no transaction was committed")
	assert.False(t, r.prod.Stats().Open)
	_, err := store.Load(t.Context(), "pipe")
	assert.ErrorIs(t, err, offsets.ErrNotFound, "no checkpoint was written")
	r.close(ctx)
}

// TestShutdownAtAWatermark checks what a stream stopped while its open
// transaction ends at a watermark does with it. It commits it, although
// its records were produced under the run's context, which the stop
// canceled before franz-go sent them; unless the stop interrupted the
// handling of an event (runOnce passes its error): part of that event's
// work (retractions, a batch's records) may be missing from the
// transaction, which is then aborted, although no record failed.
func TestShutdownAtAWatermark(t *testing.T) {
	for _, tc := range []struct {
		name        string
		interrupted error
		commits     int32
	}{
		{"commits what was produced", nil, 1},
		{"aborts after an interrupted event", fmt.Errorf("stream pipe: producing retractions: %w", context.Canceled), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPipeFixtureWith(t, func(kc *sink.Config) { kc.Linger = time.Minute }) // unsent until the commit flushes
			r := f.r
			store := f.checkpoints(t)
			r.fingerprint = "test-fingerprint"
			var err error
			r.machine, err = reorg.New(reorg.DefaultConfig(), reorg.Snapshot{Watermarks: []reorg.Watermark{}})
			require.NoError(t, err)
			evs, err := r.machine.Apply([]reorg.BlockRange{{Network: "eth", Start: 1, End: 1, Hash: reorg.Hash{1}, PrevHash: reorg.Hash{9}, HasPrevHash: true}}, true, 10)
			require.NoError(t, err)
			commits := f.countCommits()

			ctx, cancel := context.WithCancel(t.Context())
			require.NoError(t, r.hold(ctx, f.batch(t, "b1")))
			r.txn.pending = []pendingBatch{{wm: evs[len(evs)-1], rows: 10}}
			cancel() // SIGTERM: runOnce calls shutdown
			require.False(t, r.prod.Stats().Failed)
			require.NoError(t, r.shutdown(ctx, tc.interrupted))
			assert.Equal(t, tc.commits, commits.Load(), "transactions committed")
			assert.False(t, r.prod.Stats().Open)
			cp, err := store.Load(t.Context(), "pipe")
			if tc.commits == 0 {
				assert.ErrorIs(t, err, offsets.ErrNotFound, "no checkpoint was written")
			} else {
				require.NoError(t, err, "the checkpoint follows the commit")
				assert.Equal(t, reorg.Point{Number: 1, Hash: reorg.Hash{1}}, cp.Cursor()["eth"], "the checkpoint is at the committed watermark")
			}
			r.close(ctx)
		})
	}
}
