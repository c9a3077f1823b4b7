package sink

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
)

// testConfig returns a Config for addr with short timeouts.
func testConfig(addr string) Config {
	c := DefaultConfig()
	c.Brokers = testenv.Seeds(addr)
	c.TransactionalIDPrefix = "sinktest"
	c.TransactionTimeout = 4 * time.Second
	c.EndTxnTimeout = 5 * time.Second
	c.DeliveryTimeout = 5 * time.Second
	c.ReadTimeout = 5 * time.Second
	c.DialTimeout = 3 * time.Second
	c.MetadataMinAge = 100 * time.Millisecond
	c.Linger = 0
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SINK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	_ = t
	return slog.New(slog.DiscardHandler)
}

// newCluster starts a private kfake cluster, for fault injection.
func newCluster(t testing.TB, opts ...kfake.Opt) (*kfake.Cluster, Config) {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(1)}, opts...)
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, testConfig(strings.Join(c.ListenAddrs(), ","))
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newProducer(t testing.TB, cfg Config, id string, deps Deps) *Producer {
	t.Helper()
	if deps.Logger == nil {
		deps.Logger = testLogger(t)
	}
	p, err := NewProducer(testCtx(t), cfg, id, deps)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func newReader(t testing.TB, cfg Config) *Reader {
	t.Helper()
	r, err := NewReader(testCtx(t), cfg, Deps{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

func newAdmin(t testing.TB, cfg Config) *Admin {
	t.Helper()
	a, err := NewAdmin(testCtx(t), cfg, Deps{Logger: testLogger(t)})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	return a
}

// dataRecord returns row i of batch as a record with the bridge's headers.
func dataRecord(topic, batch string, i int) Record {
	return Record{
		Topic: topic,
		Key:   []byte(batch),
		Value: fmt.Appendf(nil, "%s-row-%d", batch, i),
		Headers: []Header{
			{Key: "amp-batch-id", Value: []byte(batch)},
			{Key: HeaderOp, Value: []byte("c")},
		},
		Group: batch,
	}
}

// produceBatches produces rows records for each batch in one transaction
// and commits.
func produceBatches(t testing.TB, p *Producer, topic string, rows int, batches ...string) Committed {
	t.Helper()
	ctx := testCtx(t)
	require.NoError(t, p.Begin())
	for _, b := range batches {
		for i := range rows {
			require.NoError(t, p.Produce(ctx, dataRecord(topic, b, i)))
		}
	}
	c, err := p.Commit(ctx)
	require.NoError(t, err)
	return c
}

// consumeCommitted reads every read_committed record of topic with a plain
// kgo consumer (independent of Reader), up to the end offsets at call time.
func consumeCommitted(t testing.TB, cfg Config, topic string) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	// The high watermark, not the last stable offset: Kafka writes commit
	// markers after EndTransaction returns, so right after a commit the
	// last stable offset can still trail it. Every transaction of the test
	// has ended, so the consumer reaches the high watermark once the
	// markers are written (it sees them: KeepControlRecords).
	r := newReader(t, cfg)
	// A topic created a moment ago may not list its partitions yet: an
	// empty map would make the consumer below stop before reading anything.
	// Two equal reads in a row: a read racing the last commit's markers
	// must not end the consumer early.
	var ends map[int32]int64
	require.Eventually(t, func() bool {
		first, err := r.highWatermarks(ctx, topic)
		if err != nil || len(first) == 0 {
			return false
		}
		time.Sleep(20 * time.Millisecond)
		second, err := r.highWatermarks(ctx, topic)
		if err != nil || !maps.Equal(first, second) {
			return false
		}
		ends = second
		return true
	}, 10*time.Second, 10*time.Millisecond, "listing the partitions of %s", topic)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	reached := func(seen map[int32]int64) bool {
		for p, end := range ends {
			if seen[p] < end {
				return false
			}
		}
		return true
	}
	seen := make(map[int32]int64)
	for !reached(seen) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consuming %s: %v (seen %v, ends %v)", topic, ctx.Err(), seen, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			seen[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

func values(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}

func readValues(rs []ReadRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}

// openTransaction commits one record to topic/1 as transactional id txnID,
// then leaves a transaction open there with two records (offsets 2 and 3,
// after the committed record and its marker), and returns the producer's id
// and epoch. The transaction is aborted when the test ends.
func openTransaction(ctx context.Context, t *testing.T, brokers []string, topic, txnID string) (int64, int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(txnID),
		kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	t.Cleanup(func() {
		actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = cl.AbortBufferedRecords(actx)
		_ = cl.EndTransaction(actx, kgo.TryAbort)
		cl.Close()
	})
	rec := func(v string) *kgo.Record { return &kgo.Record{Topic: topic, Partition: 1, Value: []byte(v)} }
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, rec("committed")).FirstErr())
	require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(ctx, rec("open-1"), rec("open-2")).FirstErr())
	pid, epoch, err := cl.ProducerID(ctx)
	require.NoError(t, err)
	return pid, epoch
}
