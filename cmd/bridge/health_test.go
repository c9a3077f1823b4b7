package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
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

	"github.com/amp-kafka-bridge/amp-kafka-bridge/encode"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/health"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// streamReport returns the health report of stream id.
func streamReport(b *bridge, id string) health.StreamReport {
	return b.health.Report().Streams[id]
}

// TestPermanentErrorStopsOnlyItsStream: of two streams in one process, the
// one whose key_columns names no column stops with a named error (failed
// on /readyz, amp_bridge_stream_up 0), while the other publishes on and
// verifies clean; run returns the failed stream's error once both stopped.
func TestPermanentErrorStopsOnlyItsStream(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 20}, MaxMicrobatchBlocks: 3}, 128)
	good := h.cfg.Streams[0]
	bad := good
	bad.ID, bad.Topic = good.ID+"-bad", good.Topic+".bad"
	bad.Key, bad.KeyColumns, bad.Partitions = config.KeyRow, []string{"tx_hahs"}, 1
	h.cfg.Streams = append(h.cfg.Streams, bad)
	require.NoError(t, h.cfg.Validate(), "the typo is only found against the query's schema")

	stop, b := h.runBridge()
	require.Eventually(t, func() bool { return streamReport(b, bad.ID).State == health.StateFailed }, 30*time.Second, 5*time.Millisecond)
	rep := streamReport(b, bad.ID)
	assert.Contains(t, rep.Reason, `key_columns names "tx_hahs"`)
	assert.Contains(t, rep.Reason, "tx_hash", "the error lists the query's columns")
	assert.InDelta(t, 0, gaugeValue(t, b.reg, "amp_bridge_stream_up", bad.ID), 0)
	// bridge status shows what the running bridge's /readyz says.
	addr, stopHTTP, err := b.serveHTTP(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	defer stopHTTP()
	running, err := ops.RunningHealth(t.Context(), addr)
	require.NoError(t, err)
	assert.Equal(t, health.StateFailed, running.Streams[bad.ID].State)
	var out strings.Builder
	ops.StreamStatus{Stream: bad.ID, Running: new(running.Streams[bad.ID])}.WriteText(&out, "redis")
	assert.Contains(t, out.String(), bad.ID+`: running bridge says failed: `)
	assert.Contains(t, out.String(), `key_columns names "tx_hahs"`)

	h.waitHead()
	h.sim.Mine(4)
	h.waitHead()
	assert.True(t, streamReport(b, good.ID).Ready, "the other stream is ready")
	assert.InDelta(t, 1, gaugeValue(t, b.reg, "amp_bridge_stream_up", good.ID), 0)
	assert.False(t, b.health.Report().Ready, "the process is not ready while a stream has failed")
	err = stop()
	require.ErrorIs(t, err, encode.ErrKeyColumn, "run returns the failed stream's error")
	requireClean(t, h.verify())
}

// TestRecordTooLargeIsNamed: a row above the data topic's max.message.bytes
// stops the stream with an error naming the batch, the row, its size and
// both limits, instead of failing the transaction for ever; nothing of the
// batch is committed.
func TestRecordTooLargeIsNamed(t *testing.T) {
	svc := fakeServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3}}, 128)
	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	small := "400"
	resp, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, map[string]*string{"max.message.bytes": &small}, h.cfg.Streams[0].Topic)
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	stop, b := h.runBridge()
	id := h.cfg.Streams[0].ID
	require.Eventually(t, func() bool { return streamReport(b, id).State == health.StateFailed }, 30*time.Second, 5*time.Millisecond)
	err = stop()
	require.ErrorIs(t, err, sink.ErrRecordTooLarge)
	for _, want := range []string{"batch ", "row 0 ", "bytes", "kafka.batch_max_bytes 1048576 bytes",
		"max.message.bytes of topic " + h.cfg.Streams[0].Topic + " 400 bytes"} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Zero(t, h.count("commit"), "nothing committed")
	assert.Zero(t, gaugeValue(t, b.reg, "amp_bridge_stream_restarts_total", id), "no restart loop")
}

// TestReplicationFactorTheClusterCannotGive: the default replication factor
// 3 on a one-broker cluster stops the stream with an error naming the key,
// instead of restarting for ever.
func TestReplicationFactorTheClusterCannotGive(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3}}, 128)
	h.cfg.Kafka.ReplicationFactor = 3
	stop, b := h.runBridge()
	id := h.cfg.Streams[0].ID
	require.Eventually(t, func() bool { return streamReport(b, id).State == health.StateFailed }, 30*time.Second, 5*time.Millisecond)
	err := stop()
	require.ErrorIs(t, err, sink.ErrTopicInvalid)
	assert.Contains(t, err.Error(), "kafka.replication_factor")
	assert.Zero(t, gaugeValue(t, b.reg, "amp_bridge_stream_restarts_total", id), "no restart loop")
}

// TestReadinessFollowsAKafkaStall: brokers that stop answering produce
// requests make the stream not ready within http.ready_timeout; a stall
// shorter than kafka.delivery_timeout ends in the same transaction, a longer
// one aborts it and the stream restarts from its checkpoint in the same
// process; both end ready again, and the topic verifies clean.
func TestReadinessFollowsAKafkaStall(t *testing.T) {
	t.Parallel()
	svc, kc := fakeServicesCluster(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 10}, MaxMicrobatchBlocks: 2}, 128)
	h.cfg.HTTP.ReadyTimeout = 300 * time.Millisecond
	h.cfg.Kafka.DeliveryTimeout = 2 * time.Second
	h.cfg.Kafka.EndTxnTimeout = 2 * time.Second
	stop, b := h.runBridge()
	id := h.cfg.Streams[0].ID
	h.waitHead()
	require.Eventually(t, func() bool { return streamReport(b, id).Ready }, 30*time.Second, 5*time.Millisecond)

	var stalled atomic.Bool
	release := make(chan struct{})
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if stalled.Load() {
			kc.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	for _, stall := range []time.Duration{time.Second, 6 * time.Second} {
		t.Run(fmt.Sprint(stall), func(t *testing.T) {
			restarts := gaugeValue(t, b.reg, "amp_bridge_stream_restarts_total", id)
			release = make(chan struct{})
			stalled.Store(true)
			h.sim.Mine(2)
			require.Eventually(t, func() bool { return !streamReport(b, id).Ready }, 10*time.Second, 5*time.Millisecond)
			// The first not-ready report may name the outer "publishing a
			// batch" before the Kafka call inside it is past ready_timeout too.
			var rep health.StreamReport
			assert.Eventually(t, func() bool {
				rep = streamReport(b, id)
				return strings.Contains(rep.Reason+rep.Stuck, "kafka")
			}, stall, 5*time.Millisecond, "the reason names Kafka")
			t.Logf("not ready: %+v", rep)
			time.Sleep(stall)
			stalled.Store(false)
			close(release)
			h.waitHead()
			require.Eventually(t, func() bool { return streamReport(b, id).Ready }, 30*time.Second, 5*time.Millisecond)
			got := gaugeValue(t, b.reg, "amp_bridge_stream_restarts_total", id) - restarts
			if stall > h.cfg.Kafka.DeliveryTimeout {
				assert.Positive(t, got, "the stalled transaction was aborted and the stream restarted")
			} else {
				assert.Zero(t, got, "a short stall ends in the same transaction")
			}
		})
	}
	require.NoError(t, stop())
	requireClean(t, h.verify())
}

// TestRunWaitsForKafkaAtStart: bridge run started before its broker serves
// /readyz 503 naming the broker, logs each attempt, and publishes once the
// broker is up; with startup_timeout it gives up with an error naming it.
func TestRunWaitsForKafkaAtStart(t *testing.T) {
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	svc := fakeServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4}}, 128)
	h.cfg.Kafka.Brokers = []string{fmt.Sprintf("127.0.0.1:%d", port)}

	cfg := *h.cfg
	cfg.StartupTimeout = 500 * time.Millisecond
	b := newBridgeShell(&cfg, testLogger())
	b.wait = true
	err = b.connect(t.Context(), needAll)
	b.close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("kafka at 127.0.0.1:%d did not answer within startup_timeout 500ms", port))

	b = newBridgeShell(h.cfg, testLogger())
	b.wait = true
	defer b.close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	connected := make(chan error, 1)
	go func() { connected <- b.connect(ctx, needAll) }()
	id := h.cfg.Streams[0].ID
	require.Eventually(t, func() bool {
		return strings.Contains(streamReport(b, id).Reason, fmt.Sprintf("waiting for kafka at 127.0.0.1:%d at start", port))
	}, 10*time.Second, 5*time.Millisecond)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.Ports(port))
	require.NoError(t, err)
	defer kc.Close()
	select {
	case err := <-connected:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge did not connect once the broker was up")
	}
	done := make(chan error, 1)
	go func() { done <- b.run(ctx) }()
	require.Eventually(t, func() bool { return streamReport(b, id).Ready }, 30*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	if errors.Is(ctx.Err(), context.Canceled) {
		assert.Equal(t, health.StateStopped, streamReport(b, id).State)
	}
}

// lostReplyStore applies the n-th checkpoint write and then reports a
// timeout, as a store whose reply was lost on the network does.
type lostReplyStore struct {
	pipeline.Store
	n, lost atomic.Int64
}

func (s *lostReplyStore) Commit(ctx context.Context, cp offsets.Checkpoint) error {
	if err := s.Store.Commit(ctx, cp); err != nil {
		return err
	}
	if s.n.Add(1) == 3 {
		s.lost.Add(1)
		return fmt.Errorf("reading the reply: %w", context.DeadlineExceeded)
	}
	return nil
}

// TestCheckpointWriteWhoseReplyWasLost: a checkpoint write that landed but
// whose reply was lost makes the next write find a newer version stored;
// the stream recognises its own write (same fingerprint, control offset not
// beyond its own) and writes on top of it instead of stopping as if another
// instance had taken the stream over.
func TestCheckpointWriteWhoseReplyWasLost(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4}, MaxMicrobatchBlocks: 1}, 128)
	ls := &lostReplyStore{}
	h.wrapStore = func(s pipeline.Store) pipeline.Store { ls.Store = s; return ls }
	stop, b := h.runBridge()
	h.waitHead()
	for range 3 {
		h.sim.Mine(2)
		h.waitHead()
	}
	id := h.cfg.Streams[0].ID
	assert.Equal(t, int64(1), ls.lost.Load(), "one reply was lost")
	assert.Equal(t, health.StateReady, streamReport(b, id).State, "the stream goes on")
	require.NoError(t, stop())
	requireClean(t, h.verify())
}

// TestRunStopsWaitingOnWrongRedisPassword: bridge run waits for a Redis that
// refuses connections, but not for one that refuses the password: that is
// a permanent error (offsets.ErrRedisAuth) returned at once, long before
// startup_timeout.
func TestRunStopsWaitingOnWrongRedisPassword(t *testing.T) {
	svc := fakeServices(t)
	mr := miniredis.RunT(t)
	mr.RequireUserAuth("bridge", "s3cret")
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4}}, 128)
	cfg := *h.cfg
	cfg.StartupTimeout = 20 * time.Second
	cfg.Checkpoint.Redis.Addr, cfg.Checkpoint.Redis.Username, cfg.Checkpoint.Redis.Password = mr.Addr(), "bridge", "wrong"
	b := newBridgeShell(&cfg, testLogger())
	b.wait = true
	start := time.Now()
	err := b.connect(t.Context(), needAll)
	b.close()
	require.ErrorIs(t, err, offsets.ErrRedisAuth)
	assert.True(t, pipeline.Permanent(err))
	assert.Less(t, time.Since(start), 5*time.Second, "no waiting for startup_timeout")
	assert.ErrorContains(t, err, "checkpoint.redis.password_file or BRIDGE_CHECKPOINT_REDIS_PASSWORD")
}
