package sink

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// openTxn is a transaction that a faked DescribeProducers reports open.
type openTxn struct {
	topic     string
	partition int32
	pid       int64
	epoch     int16
	start     int64
}

// fakeOpenTxn answers every DescribeProducers request with the partitions
// asked for, txn open on its partition for the first looks answers
// (0: every answer), and nothing open elsewhere, until the test ends. It
// returns the count of answers.
func fakeOpenTxn(t *testing.T, c *kfake.Cluster, txn openTxn, looks int32) *atomic.Int32 {
	var n atomic.Int32
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	c.ControlKey(int16(kmsg.DescribeProducers), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			return nil, nil, false // dropped: not kept
		}
		c.KeepControl()
		req := kreq.(*kmsg.DescribeProducersRequest)
		resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
		k := n.Add(1)
		for _, rt := range req.Topics {
			st := kmsg.NewDescribeProducersResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewDescribeProducersResponseTopicPartition()
				sp.Partition = p
				if rt.Topic == txn.topic && p == txn.partition && (looks == 0 || k <= looks) {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.CurrentTxnStartOffset = txn.pid, int32(txn.epoch), txn.start
					ap.LastTimestamp, ap.CoordinatorEpoch = 1_700_000_000_000, 0
					sp.ActiveProducers = append(sp.ActiveProducers, ap)
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return &n
}

// TestHangingCheck: at start, an open transaction of the stream's own
// producer id that its coordinator has completed is refused with the
// partition, the coordinator's decision and the command that ends it; the
// producer's own ongoing transaction, another producer's transaction and a
// marker that lands between the two looks are not.
func TestHangingCheck(t *testing.T) {
	c, cfg := newCluster(t, kfake.SeedTopics(2, "data"), kfake.SeedTopics(1, "ctl"))
	ctx := testCtx(t)
	a := newAdmin(t, cfg)
	id := TransactionalID(cfg.TransactionalIDPrefix, "s1")

	// A check prepared before this start's producer initialises, checked
	// after; pid is the stream's producer id.
	start := func(t *testing.T) (*HangingCheck, *Producer, int64, int16) {
		h, err := a.PrepareHangingCheck(ctx, id)
		require.NoError(t, err)
		p := newProducer(t, cfg, "s1", Deps{})
		pid, epoch, err := p.cl.ProducerID(ctx)
		require.NoError(t, err)
		return h, p, pid, epoch
	}

	t.Run("none", func(t *testing.T) {
		h, _, _, _ := start(t)
		require.NoError(t, h.Check(ctx, "ctl", "data"))
	})

	t.Run("own ongoing transaction", func(t *testing.T) {
		h, p, _, _ := start(t)
		require.NoError(t, p.Begin())
		require.NoError(t, p.Produce(ctx, dataRecord("data", "b2", 0)))
		_, err := p.Flush(ctx)
		require.NoError(t, err)
		require.NoError(t, h.Check(ctx, "ctl", "data"))
		require.NoError(t, p.Abort(ctx))
	})

	t.Run("orphaned", func(t *testing.T) {
		// The previous run's last transaction: its coordinator decided to
		// commit it (kfake reports only Ongoing and Empty: the state is
		// faked for the look before this start).
		prev := newProducer(t, cfg, "s1", Deps{})
		produceBatches(t, prev, "data", 2, "b3")
		pid, epoch, err := prev.cl.ProducerID(ctx)
		require.NoError(t, err)
		require.NoError(t, prev.Close(ctx))
		c.ControlKey(int16(kmsg.DescribeTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			req := kreq.(*kmsg.DescribeTransactionsRequest)
			resp := req.ResponseKind().(*kmsg.DescribeTransactionsResponse)
			for _, tid := range req.TransactionalIDs {
				st := kmsg.NewDescribeTransactionsResponseTransactionState()
				st.TransactionalID, st.State, st.ProducerID, st.ProducerEpoch = tid, "CompleteCommit", pid, epoch
				st.TimeoutMillis, st.StartTimestamp = 60_000, 1_700_000_000_000
				resp.TransactionStates = append(resp.TransactionStates, st)
			}
			return resp, nil, true
		})
		h, _, _, _ := start(t)
		n := fakeOpenTxn(t, c, openTxn{topic: "data", partition: 1, pid: pid, epoch: epoch, start: 5}, 0)
		err = h.Check(ctx, "ctl", "data")
		require.Error(t, err)
		t.Logf("the error:\n%v", err)
		assert.ErrorIs(t, err, ErrOrphanedTransaction)
		assert.ErrorIs(t, err, ErrHangingTransaction)
		var he *HangingTransactionError
		require.ErrorAs(t, err, &he)
		assert.True(t, he.AtStart)
		assert.Equal(t, "data", he.Topic)
		assert.Equal(t, int32(1), he.Partition)
		assert.Equal(t, pid, he.ProducerID)
		assert.Equal(t, int64(5), he.StartOffset)
		assert.Equal(t, id, he.TransactionalID)
		assert.Equal(t, HangingOrphaned, he.Verdict)
		assert.Equal(t, "CompleteCommit", he.CoordinatorState, "the coordinator's decision before this start")
		assert.Contains(t, err.Error(), "abort --topic data --partition 1 --start-offset 5")
		assert.Contains(t, err.Error(), "COMMITTED")
		assert.GreaterOrEqual(t, n.Load(), int32(2), "looked twice")
	})

	t.Run("decision unknown", func(t *testing.T) {
		h, _, pid, epoch := start(t)
		fakeOpenTxn(t, c, openTxn{topic: "ctl", partition: 0, pid: pid, epoch: epoch, start: 7}, 0)
		err := h.Check(ctx, "ctl", "data")
		require.ErrorIs(t, err, ErrOrphanedTransaction)
		assert.Contains(t, err.Error(), "Whether it was committed is unknown")
		assert.Contains(t, err.Error(), "abort --topic ctl --partition 0 --start-offset 7")
	})

	t.Run("another producer", func(t *testing.T) {
		h, _, pid, _ := start(t)
		fakeOpenTxn(t, c, openTxn{topic: "data", partition: 0, pid: pid + 1000, epoch: 0, start: 3}, 0)
		require.NoError(t, h.Check(ctx, "ctl", "data"))
	})

	t.Run("marker landed between the looks", func(t *testing.T) {
		h, _, pid, epoch := start(t)
		fakeOpenTxn(t, c, openTxn{topic: "ctl", partition: 0, pid: pid, epoch: epoch, start: 1}, 1)
		require.NoError(t, h.Check(ctx, "ctl", "data"))
	})

	t.Run("nil", func(t *testing.T) {
		var h *HangingCheck
		require.NoError(t, h.Check(ctx, "ctl"))
	})
}

// TestReadTimesOutDuringAPollNamesTheTransaction: a read held back by an
// open transaction whose deadline lands while a poll of the last stable
// offset is in flight (a slow broker) names the transaction as one that
// times out between polls does, with the last stable offset the previous
// poll answered. Before, it said only "context deadline exceeded".
func TestReadTimesOutDuringAPollNamesTheTransaction(t *testing.T) {
	c, cfg := newCluster(t, kfake.SeedTopics(2, "data"))
	cfg.TransactionTimeout, cfg.ReadTimeout = time.Second, 1500*time.Millisecond
	ctx := testCtx(t)
	pid, epoch := openTransaction(ctx, t, cfg.Brokers, "data", "open-txn")
	fakeOpenTxn(t, c, openTxn{topic: "data", partition: 1, pid: pid, epoch: epoch, start: 2}, 0)

	// The read_committed polls of the first 200 ms answer; a later one
	// outlives the read.
	var first atomic.Int64 // unix nanoseconds of the first poll
	var slept atomic.Bool
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		if kreq.(*kmsg.ListOffsetsRequest).IsolationLevel != 1 {
			return nil, nil, false
		}
		first.CompareAndSwap(0, time.Now().UnixNano())
		if time.Since(time.Unix(0, first.Load())) > 200*time.Millisecond {
			slept.Store(true)
			c.SleepControl(func() { time.Sleep(cfg.ReadTimeout) })
		}
		return nil, nil, false
	})

	r := newReader(t, cfg)
	_, err := r.ReadTopic(ctx, "data")
	require.Error(t, err)
	t.Logf("the error:\n%v", err)
	require.True(t, slept.Load(), "the deadline landed in a poll")
	assert.ErrorIs(t, err, ErrHangingTransaction)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	var he *HangingTransactionError
	require.ErrorAs(t, err, &he)
	assert.True(t, he.Found, "the open transaction was found: %v", he.DescribeErr)
	assert.Equal(t, int32(1), he.Partition)
	assert.Equal(t, pid, he.ProducerID)
	assert.Equal(t, int64(2), he.LastStable, "the last answered poll's")
	assert.Equal(t, int64(4), he.Target)
}

// TestSlowReadNamesTheTransactionItWaitsFor: a read that waits for a
// partition to become stable longer than slowWait logs, once, which
// transaction holds it (a takeover's start waits so for a transaction its
// previous owner left open), and then goes on waiting.
func TestSlowReadNamesTheTransactionItWaitsFor(t *testing.T) {
	c, cfg := newCluster(t, kfake.SeedTopics(2, "data"))
	cfg.TransactionTimeout, cfg.ReadTimeout = time.Second, 1500*time.Millisecond
	ctx := testCtx(t)
	pid, epoch := openTransaction(ctx, t, cfg.Brokers, "data", "slow-txn")
	fakeOpenTxn(t, c, openTxn{topic: "data", partition: 1, pid: pid, epoch: epoch, start: 2}, 0)

	var buf syncBuffer
	r, err := NewReader(ctx, cfg, Deps{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	r.slowWait = 200 * time.Millisecond
	_, err = r.ReadTopic(ctx, "data")
	require.ErrorIs(t, err, ErrHangingTransaction, "it went on waiting, to the read's timeout")

	var lines []map[string]any
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "a read waits for a transaction open on the partition") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &m))
			lines = append(lines, m)
		}
	}
	require.Len(t, lines, 1, "logged once:\n%s", buf.String())
	assert.Equal(t, "slow-txn", lines[0]["transactional_id"])
	assert.InDelta(t, float64(pid), lines[0]["producer_id"], 0)
	assert.InDelta(t, 1, lines[0]["partition"], 0)
	assert.InDelta(t, 2, lines[0]["start_offset"], 0)
}

// TestHangingLookUpEndsOnCancel: the look-up of the transaction that held
// a read back past its deadline has time of its own (the read's context
// has ended), but a cancel of the caller's context ends it: a cluster
// member's lost stream does not wait out hangingDescribeTimeout.
func TestHangingLookUpEndsOnCancel(t *testing.T) {
	c, cfg := newCluster(t, kfake.SeedTopics(2, "data"))
	cfg.TransactionTimeout, cfg.ReadTimeout = time.Second, 1500*time.Millisecond
	ctx := testCtx(t)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	described := make(chan struct{})
	var once sync.Once
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	c.ControlKey(int16(kmsg.DescribeProducers), func(kmsg.Request) (kmsg.Response, error, bool) {
		if done.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		once.Do(func() { close(described) })
		// The look-up is slow: longer than the test waits for the read.
		c.SleepControl(func() { time.Sleep(hangingDescribeTimeout) })
		return nil, nil, false
	})
	// After the control above, which kfake runs first.
	pid, epoch := openTransaction(ctx, t, cfg.Brokers, "data", "open-txn")
	fakeOpenTxn(t, c, openTxn{topic: "data", partition: 1, pid: pid, epoch: epoch, start: 2}, 0)
	r := newReader(t, cfg)
	errc := make(chan error, 1)
	go func() {
		_, err := r.ReadTopic(rctx, "data")
		errc <- err
	}()
	select {
	case <-described:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never looked up the transaction that held it")
	}
	cancel()
	select {
	case err := <-errc:
		require.Error(t, err)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the read's own deadline ended the wait")
	case <-time.After(hangingDescribeTimeout / 2):
		t.Fatal("the look-up went on after the caller's context was canceled")
	}
}
