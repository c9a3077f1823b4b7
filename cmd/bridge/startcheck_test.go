package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// fakeServicesCluster is fakeServices with its kfake cluster, for faults.
func fakeServicesCluster(t testing.TB) (services, *kfake.Cluster) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	mr := miniredis.RunT(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	return services{name: "fakes", brokers: kc.ListenAddrs(), redis: mr.Addr(), registry: reg.URL(),
		flush: func(testing.TB) { mr.FlushAll() }}, kc
}

// runOnce runs the bridge until it stops by itself (or 20 s have passed:
// then the error is nil) and returns its error.
func (h *harness) runOnce(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := newBridge(ctx, h.cfg, testLogger())
	require.NoError(t, err)
	defer b.close()
	return b.run(ctx)
}

// TestRunRefusesLostDataTopic: a stream that has committed rows refuses to
// start when its data topic was deleted (it is not created again) or
// recreated (another topic id, end offsets below the committed spans), with
// ErrDataTopicLost, a permanent error; a fresh stream creates its topic.
func TestRunRefusesLostDataTopic(t *testing.T) {
	svc := fakeServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 6}, MaxMicrobatchBlocks: 1}, 128)
	topic := h.cfg.Streams[0].Topic
	stop := h.run() // a fresh stream: creates its topic
	h.waitHead()
	require.NoError(t, stop())

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	_, err = adm.DeleteTopic(t.Context(), topic)
	require.NoError(t, err)

	err = h.runOnce(t)
	require.ErrorIs(t, err, sink.ErrDataTopicLost)
	assert.True(t, pipeline.Permanent(err))
	assert.Contains(t, err.Error(), "does not exist")
	md, err := adm.Metadata(t.Context(), topic)
	require.NoError(t, err)
	assert.Error(t, md.Topics[topic].Err, "the deleted topic was not created again")

	_, err = adm.CreateTopic(t.Context(), 1, 1, nil, topic)
	require.NoError(t, err)
	err = h.runOnce(t)
	require.ErrorIs(t, err, sink.ErrDataTopicLost)
	assert.True(t, pipeline.Permanent(err))
	assert.Contains(t, err.Error(), "was deleted or recreated (id ")
	t.Logf("recreated: %v", err)
}

// TestRunRefusesOrphanedTransaction: at start, an open transaction of the
// stream's own producer on its data topic that its coordinator has
// completed (faked DescribeProducers: kfake has no such bug) stops the
// stream with ErrOrphanedTransaction, naming the partition and the
// command that ends it, before it produces anything.
func TestRunRefusesOrphanedTransaction(t *testing.T) {
	svc, kc := fakeServicesCluster(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 6}, MaxMicrobatchBlocks: 1}, 128)
	topic := h.cfg.Streams[0].Topic
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	txnID := sink.TransactionalID(h.cfg.Kafka.TransactionalIDPrefix, h.cfg.Streams[0].ID)
	txns, err := kadm.NewClient(cl).DescribeTransactions(t.Context(), txnID)
	require.NoError(t, err)
	d, err := txns.On(txnID, nil)
	require.NoError(t, err)
	require.NoError(t, d.Err)

	var asked atomic.Int32
	kc.ControlKey(int16(kmsg.DescribeProducers), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		asked.Add(1)
		req := kreq.(*kmsg.DescribeProducersRequest)
		resp := req.ResponseKind().(*kmsg.DescribeProducersResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewDescribeProducersResponseTopic()
			st.Topic = rt.Topic
			for _, p := range rt.Partitions {
				sp := kmsg.NewDescribeProducersResponseTopicPartition()
				sp.Partition = p
				if rt.Topic == topic && p == 0 {
					ap := kmsg.NewDescribeProducersResponseTopicPartitionActiveProducer()
					ap.ProducerID, ap.ProducerEpoch, ap.CurrentTxnStartOffset = d.ProducerID, int32(d.ProducerEpoch), 2
					sp.ActiveProducers = append(sp.ActiveProducers, ap)
				}
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	require.NoError(t, err)
	before, _ := ends.Lookup(topic, 0)

	err = h.runOnce(t)
	require.ErrorIs(t, err, sink.ErrOrphanedTransaction)
	assert.True(t, pipeline.Permanent(err))
	assert.Contains(t, err.Error(), "abort --topic "+topic+" --partition 0 --start-offset 2")
	t.Logf("the error: %v", err)
	assert.GreaterOrEqual(t, asked.Load(), int32(2), "the control topic and the data topic were checked")
	ends, err = kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	require.NoError(t, err)
	after, _ := ends.Lookup(topic, 0)
	assert.Equal(t, before.Offset, after.Offset, "nothing was produced to the data topic")
}
