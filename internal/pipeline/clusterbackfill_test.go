package pipeline

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
)

// TestIdleBackfillWorkerFencesItsTransactionalID checks that a cluster
// backfill worker with nothing to do (its stream has gone live) still
// initialises its transactional id: a previous owner killed inside a step
// left a transaction open that would hold the control topic until the
// broker's transaction timeout.
func TestIdleBackfillWorkerFencesItsTransactionalID(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var inits []string
	c.ControlKey(int16(kmsg.InitProducerID), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if id := kreq.(*kmsg.InitProducerIDRequest).TransactionalID; id != nil {
			mu.Lock()
			inits = append(inits, *id)
			mu.Unlock()
		}
		return nil, nil, false
	})
	kc := sink.DefaultConfig()
	kc.Brokers = c.ListenAddrs()
	kc.TransactionalIDPrefix = "idle"

	m := miniredis.RunT(t)
	store, err := offsets.NewRedisStore(t.Context(), offsets.RedisConfig{Addr: m.Addr()}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// The stream has gone live: its checkpoint is past version 0.
	require.NoError(t, store.Commit(ctx, offsets.Checkpoint{Stream: "c", Version: 1, Fingerprint: "f", CommittedAt: time.Now()}))

	cfg := config.StreamConfig{ID: "c"}
	cfg.Backfill.Enabled, cfg.Backfill.Workers = true, 2
	r := New(cfg, Deps{Metrics: NewMetrics(nil), Kafka: kc, Store: store, ClusterBackfill: true})
	require.False(t, r.GoneLive())
	require.NoError(t, r.RunBackfillWorker(ctx, 1))
	assert.True(t, r.GoneLive(), "the worker saw the stream live: its member reports every worker of the stream idle")
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{sink.TransactionalID("idle", "c.backfill.1")}, inits)
}
