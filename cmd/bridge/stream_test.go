package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/config"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/ops"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/pipeline"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// services are the Kafka, Redis and registry a run-loop test uses.
type services struct {
	name     string
	brokers  []string
	redis    string
	registry string
	flush    func(t testing.TB) // empties the checkpoint store
	// kafkaTLS and sasl secure the connection to the brokers.
	kafkaTLS config.TLSConfig
	sasl     config.SASLConfig
	// prepare, when set, runs on each harness's configuration before the
	// bridge starts (the secured broker's ACLs for its topics).
	prepare func(t testing.TB, cfg *config.Config)
}

// fakeServices starts kfake, miniredis and srfake for one test.
func fakeServices(t testing.TB) services {
	t.Helper()
	svc, _ := fakeServicesCluster(t)
	return svc
}

// harness runs the bridge against a simulator and services, with the
// chain driven by the test.
type harness struct {
	t    testing.TB
	sim  *ampsim.Server
	cfg  *config.Config
	svc  services
	mu   sync.Mutex
	last uint64 // last committed block
	rows int64  // rows committed
	seen map[string]int
	// details are the events' details by kind.
	details map[string][]string
	// lastOf is the last committed block per stream.
	lastOf map[string]uint64
	// log is the bridge's logger; nil means testLogger().
	log *slog.Logger
	// wrapStore, when set, wraps the bridge's checkpoint store (faults).
	wrapStore func(pipeline.Store) pipeline.Store
}

func newHarness(t testing.TB, svc services, simCfg ampsim.Config, retention uint64) *harness {
	t.Helper()
	if simCfg.TxPerBlock == 0 {
		simCfg.TxPerBlock = 6
	}
	if simCfg.LogsPerTx == 0 {
		simCfg.LogsPerTx = -1
	}
	sim, err := ampsim.New(simCfg)
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	id := strings.ReplaceAll(strings.ToLower(testenv.UniqueName(t, "s")), "/", "-")
	cfg := &config.Config{
		Amp:        config.AmpConfig{Addr: sim.Addr(), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond},
		Kafka:      config.KafkaConfig{Brokers: svc.brokers, ReplicationFactor: 1, ControlTopic: id + ".control"},
		Registry:   config.RegistryConfig{URL: svc.registry},
		Checkpoint: config.CheckpointConfig{Store: "redis", Redis: config.RedisConfig{Addr: svc.redis, KeyPrefix: id}},
		Streams: []config.StreamConfig{{ID: id, SQL: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true",
			Topic: id + ".txs", RetentionBlocks: retention, Transaction: config.TxnBudget{MaxRows: 100000, MaxAge: 20 * time.Millisecond}}},
	}
	cfg.Kafka.TLS, cfg.Kafka.SASL = svc.kafkaTLS, svc.sasl
	cfg.Defaults()
	cfg.HTTP.Addr = "off"
	require.NoError(t, cfg.Validate())
	if svc.prepare != nil {
		svc.prepare(t, cfg)
	}
	return &harness{t: t, sim: sim, cfg: cfg, svc: svc, seen: map[string]int{}, lastOf: map[string]uint64{}, details: map[string][]string{}}
}

func testLogger() *slog.Logger {
	if os.Getenv("BRIDGE_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// run starts the bridge; the returned stop cancels it and returns its error.
func (h *harness) run() (stop func() error) {
	stop, _ = h.runBridge()
	return stop
}

// runBridge is run that also returns the bridge.
func (h *harness) runBridge() (stop func() error, b *bridge) {
	h.t.Helper()
	return h.runBridgeWith(nil)
}

// runBridgeWith is runBridge with prepare, when set, called on the bridge
// before it runs (test hooks).
func (h *harness) runBridgeWith(prepare func(*bridge)) (stop func() error, b *bridge) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(h.t.Context())
	b = h.newBridge(ctx)
	if prepare != nil {
		prepare(b)
	}
	done := make(chan error, 1)
	go func() { done <- b.run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
			b.close()
		})
		return runErr
	}
	h.t.Cleanup(func() { _ = stop() })
	return stop, b
}

// newBridge returns a bridge of the harness's configuration whose events
// the harness counts.
func (h *harness) newBridge(ctx context.Context) *bridge {
	h.t.Helper()
	log := h.log
	if log == nil {
		log = testLogger()
	}
	b, err := newBridge(ctx, h.cfg, log)
	require.NoError(h.t, err)
	if h.wrapStore != nil {
		b.store = h.wrapStore(b.store)
	}
	// A checkpoint copy in every third watermark: the recoveries then
	// roll forward over watermarks that carry only their state.
	b.fullEvery = 3
	b.events = func(e pipeline.Event) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.seen[e.Kind]++
		if h.details != nil {
			h.details[e.Kind] = append(h.details[e.Kind], e.Detail)
		}
		if e.Kind == "commit" {
			h.rows += int64(e.Rows)
			for _, r := range e.Ranges {
				h.last = r.End
				h.lastOf[e.Stream] = r.End
			}
		}
	}
	return b
}

// waitHead waits until the bridge committed the simulator's head block.
func (h *harness) waitHead() {
	h.t.Helper()
	head, ok := h.sim.Head()
	require.True(h.t, ok)
	require.Eventually(h.t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.last >= head
	}, 60*time.Second, 10*time.Millisecond, "the bridge did not commit head block %d", head)
}

func (h *harness) count(kind string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen[kind]
}

// verify runs bridge verify and returns its typed report.
func (h *harness) verify() ops.VerifyReport {
	h.t.Helper()
	ctx := h.t.Context()
	b, err := newBridge(ctx, h.cfg, testLogger())
	require.NoError(h.t, err)
	defer b.close()
	b.verifyWait = 300 * time.Millisecond
	reps, err := b.verify(ctx, h.cfg.Streams[0].ID)
	if err != nil && !errors.Is(err, errVerifyFailed) {
		require.NoError(h.t, err)
	}
	require.Len(h.t, reps, 1)
	var out strings.Builder
	ops.WriteVerifyReport(&out, reps[0])
	h.t.Log(out.String())
	return reps[0]
}

func requireClean(t *testing.T, rep ops.VerifyReport) {
	t.Helper()
	require.Positive(t, rep.Expected, "the stream published nothing")
	assert.Equal(t, rep.Expected, rep.Matching, "every expected row is in the topic")
	assert.Zero(t, rep.Missing, "missing rows")
	assert.Zero(t, rep.Extra, "extra rows")
	assert.Zero(t, rep.Duplicated, "duplicated rows")
	assert.Zero(t, rep.Unretracted, "replaced rows left unretracted")
}

// Conformance: amp-protocol.md §8 F1 (happy path, commit at each watermark) through the whole bridge.
func TestRunHappyPathMultiBlockRanges(t *testing.T) { scenarioHappyPath(t, fakeServices(t)) }

func scenarioHappyPath(t *testing.T, svc services) {
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 40}, MaxMicrobatchBlocks: 7}, 128)
	stop := h.run()
	h.waitHead()
	h.sim.Mine(5) // one multi-block microbatch
	h.waitHead()
	h.sim.Mine(1)
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Zero(t, rep.Retracted)
	assert.GreaterOrEqual(t, h.count("commit"), 8, "40 blocks in microbatches of at most 7, then 2 more")
}

func TestRunReorgsWhileConnected(t *testing.T) {
	t.Parallel()
	scenarioReorgs(t, fakeServices)
}

func scenarioReorgs(t *testing.T, svcs func(testing.TB) services) {
	for _, depth := range []int{1, 10, 128} {
		t.Run(fmt.Sprintf("depth%d", depth), func(t *testing.T) {
			h := newHarness(t, svcs(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 150}, MaxMicrobatchBlocks: 16}, 256)
			stop := h.run()
			h.waitHead()
			// Mine one block at a time so the reorg replaces several
			// committed microbatches.
			for range 3 {
				h.sim.Mine(1)
				h.waitHead()
			}
			require.NoError(t, h.sim.Reorg(depth, depth+1))
			h.waitHead()
			require.NoError(t, stop())
			rep := h.verify()
			requireClean(t, rep)
			assert.Positive(t, rep.Retracted, "a reorg of depth %d retracts rows", depth)
			assert.Equal(t, 1, h.count("reorg"))
		})
	}
}

// Conformance: amp-protocol.md §8 F3 (reorg while disconnected, transactional consumer) through the whole bridge.
func TestRunReorgWhileDown(t *testing.T) { scenarioReorgWhileDown(t, fakeServices(t)) }

func scenarioReorgWhileDown(t *testing.T, svc services) {
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 20}, MaxMicrobatchBlocks: 3}, 128)
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	require.NoError(t, h.sim.Reorg(4, 5))
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted, "the server rewinds on the cursor and the bridge retracts")
}

// TestRunPartialReorg is the real server's shape of amp-protocol.md A15 /
// C20: microbatches 0..=0 and 1..=2, then a reorg replacing block 2 only.
func TestRunPartialReorg(t *testing.T) { scenarioPartialReorg(t, fakeServices(t)) }

func scenarioPartialReorg(t *testing.T, svc services) {
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 1}}, 128)
	stop := h.run()
	h.waitHead()
	h.sim.Mine(2)
	h.waitHead()
	require.NoError(t, h.sim.Reorg(1, 2))
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())
}

// Conformance: amp-protocol.md §8 F1 (kill and restart: the cursor is the last committed watermark) through the whole bridge.
func TestRunRestartAndLostCheckpoint(t *testing.T) { scenarioLostCheckpoint(t, fakeServices(t)) }

func scenarioLostCheckpoint(t *testing.T, svc services) {
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 10}}, 128)
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	h.sim.Mine(3)
	stop = h.run() // clean restart: resumes from the cursor
	h.waitHead()
	require.NoError(t, stop())
	// The checkpoint store lost everything: rebuilt from Kafka.
	if h.svc.flush != nil {
		h.svc.flush(t)
	} else {
		h.flushPrefix(t, h.svc.redis)
	}
	require.NoError(t, h.sim.Reorg(2, 3))
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted, "the reorg after the rebuild retracted the replaced rows")
}

// realServices returns the real Kafka broker, redis-server and registry of
// the local stack (the test fails when make test asked for them and they
// are missing). flush deletes the test's own keys in Redis (never FLUSHDB:
// other packages' tests share the server).
func realServices(t testing.TB) services {
	t.Helper()
	redisAddr := testenv.RequireReal(t, testenv.ServiceRedis, testenv.EnvRedisAddr)
	return services{
		name:     "real",
		brokers:  testenv.Seeds(testenv.RequireReal(t, testenv.ServiceKafka, testenv.EnvKafkaSeeds)),
		redis:    redisAddr,
		registry: testenv.RequireReal(t, testenv.ServiceRegistry, testenv.EnvRegistryURL),
	}
}

// flushPrefix deletes every Redis key of the harness's stream.
func (h *harness) flushPrefix(t *testing.T, addr string) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	keys, err := cl.Keys(t.Context(), h.cfg.Checkpoint.Redis.KeyPrefix+":*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys, "the stream stored a checkpoint")
	require.NoError(t, cl.Del(t.Context(), keys...).Err())
}

// TestIntegrationRunScenarios runs every run-loop scenario against the real
// Kafka broker, redis-server and registry of deploy/local.
// Conformance: amp-protocol.md §8 F1 and F3 against the real Kafka broker and redis-server.
func TestIntegrationRunScenarios(t *testing.T) {
	t.Run("happy-path", func(t *testing.T) { scenarioHappyPath(t, realServices(t)) })
	t.Run("backfill", func(t *testing.T) { scenarioBackfill(t, realServices(t)) })
	t.Run("backfill-resumes", func(t *testing.T) { scenarioBackfillResumes(t, realServices(t)) })
	t.Run("backfill-handover-restart", func(t *testing.T) { scenarioBackfillHandoverRestart(t, realServices(t)) })
	t.Run("reorgs", func(t *testing.T) { scenarioReorgs(t, realServices) })
	t.Run("reorg-while-down", func(t *testing.T) { scenarioReorgWhileDown(t, realServices(t)) })
	t.Run("partial-reorg", func(t *testing.T) { scenarioPartialReorg(t, realServices(t)) })
	t.Run("lost-checkpoint", func(t *testing.T) { scenarioLostCheckpoint(t, realServices(t)) })
	t.Run("schema-evolution", func(t *testing.T) { scenarioSchemaEvolution(t, realServices(t)) })
	t.Run("schema-evolution-refused", func(t *testing.T) { scenarioSchemaEvolutionRefused(t, realServices(t)) })
	t.Run("labels", func(t *testing.T) { scenarioLabels(t, realServices(t)) })
	t.Run("labels-backfill", func(t *testing.T) { scenarioLabelsBackfill(t, realServices(t)) })
	t.Run("start-latest", func(t *testing.T) { scenarioStartLatest(t, realServices(t)) })
	t.Run("start-block-reorged", func(t *testing.T) { scenarioStartBlockReorged(t, realServices(t)) })
	t.Run("once", func(t *testing.T) { scenarioOnce(t, realServices(t)) })
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestRunHTTPEndpoints checks /livez, /readyz (not ready before the stream
// connects, ready after) and that /metrics counts what the bridge did.
func TestRunHTTPEndpoints(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 5}}, 128)
	h.cfg.Streams[0].HeadPollInterval = 20 * time.Millisecond
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	defer b.close()
	addr, stopHTTP, err := b.serveHTTP(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	defer stopHTTP()
	code, _ := httpGet(t, "http://"+addr+"/livez")
	assert.Equal(t, http.StatusOK, code)
	code, body := httpGet(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, h.cfg.Streams[0].ID)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.run(ctx) }()
	require.Eventually(t, func() bool {
		code, _ := httpGet(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond)
	head, _ := h.sim.Head()
	require.Eventually(t, func() bool {
		_, body := httpGet(t, "http://"+addr+"/metrics")
		return strings.Contains(body, fmt.Sprintf(`amp_bridge_committed_block{network="mainnet",stream="%s"} %d`, h.cfg.Streams[0].ID, head))
	}, 30*time.Second, 20*time.Millisecond)
	_, body = httpGet(t, "http://"+addr+"/metrics")
	assert.Contains(t, body, `amp_bridge_reconciliations_total{outcome="refused_store_ahead",stream="`+h.cfg.Streams[0].ID+`"} 0`,
		"every outcome's series exists from the start")
	assert.Contains(t, body, `amp_bridge_reorgs_total{stream="`+h.cfg.Streams[0].ID+`"} 0`)
	assert.Contains(t, body, `amp_bridge_batches_committed_total{stream="`+h.cfg.Streams[0].ID+`"} 1`)
	assert.Contains(t, body, "amp_bridge_txn_commits_total", "the sink's transaction metrics are on the same registry")
	assert.Contains(t, body, "amp_bridge_records_written_total")
	assert.Contains(t, body, "amp_bridge_behind_source_seconds{")
	require.Eventually(t, func() bool {
		_, body := httpGet(t, "http://"+addr+"/metrics")
		return strings.Contains(body, fmt.Sprintf(`amp_bridge_behind_head_blocks{network="mainnet",stream="%s"} 0`, h.cfg.Streams[0].ID))
	}, 30*time.Second, 20*time.Millisecond, "the head poller reports the stream caught up")
	cancel()
	require.NoError(t, <-done)
	code, _ = httpGet(t, "http://"+addr+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code, "not ready once the streams stopped")
}

// TestStatusShowsCheckpoint checks bridge status after a run.
func TestStatusShowsCheckpoint(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 5}}, 128)
	// status connects to the checkpoint store and Amp only: Kafka is not
	// even reachable.
	cfg := *h.cfg
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"}
	b, err := connect(t.Context(), &cfg, testLogger(), needAmp|needStore)
	require.NoError(t, err)
	defer b.close()
	heads := func(ctx context.Context, sql string) (map[string]uint64, error) {
		return pipeline.SyncedHeads(ctx, b.amp, sql)
	}
	sc := h.cfg.Streams[0]
	st, err := ops.Status(t.Context(), b.store, heads, sc, time.Now())
	require.NoError(t, err)
	assert.Nil(t, st.Checkpoint, "no checkpoint yet")

	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	st, err = ops.Status(t.Context(), b.store, heads, sc, time.Now())
	require.NoError(t, err)
	require.NotNil(t, st.Checkpoint)
	hash, ok := h.sim.BlockHash(4)
	require.True(t, ok)
	assert.Equal(t, reorg.Point{Number: 4, Hash: hash}, st.Cursor()["mainnet"])
	assert.NotEmpty(t, st.Checkpoint.Batches, "retained batches")
	require.NoError(t, st.HeadsErr)
	lag, ok := st.Lag("mainnet")
	require.True(t, ok)
	assert.Equal(t, int64(0), lag)
	h.sim.Mine(3)
	st, err = ops.Status(t.Context(), b.store, heads, sc, time.Now())
	require.NoError(t, err)
	lag, ok = st.Lag("mainnet")
	require.True(t, ok)
	assert.Equal(t, int64(3), lag)
	assert.Equal(t, uint64(7), st.Heads["mainnet"])
	// What the command prints of it.
	var out strings.Builder
	require.NoError(t, b.status(t.Context(), &out, time.Now()))
	assert.Contains(t, out.String(), "head lag mainnet: 3 block(s) (Amp synced to 7)")
}

// TestSchemaConnectsToAmpOnly: bridge schema plans the SQL at Amp and
// prints the schemas while neither Kafka nor Redis answers.
func TestSchemaConnectsToAmpOnly(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2}}, 128)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`
amp:
  addr: %s
kafka:
  brokers: [127.0.0.1:1]
checkpoint:
  redis:
    addr: 127.0.0.1:1
streams:
  - id: %s
    sql: %s
`, h.sim.Addr(), h.cfg.Streams[0].ID, h.cfg.Streams[0].SQL)), 0o600))
	var out, errOut logBuffer
	code := run(t.Context(), []string{"schema", "-c", path}, &out, &errOut)
	require.Equal(t, 0, code, errOut.String())
	assert.Contains(t, out.String(), "subject amp."+h.cfg.Streams[0].ID+"-value")
	assert.Contains(t, out.String(), `"name": "Envelope"`)
}

// TestRunAtLeastOnce runs the documented at-least-once mode (no
// transactions): a clean run and a clean restart publish every row once.
func TestRunAtLeastOnce(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 12}, MaxMicrobatchBlocks: 4}, 128)
	h.cfg.Kafka.Delivery = config.AtLeastOnce
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	h.sim.Mine(2)
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())
}

// TestVerifyRefusesAMovedChain: when the chain reorganised below the last
// committed block after the bridge stopped, verify says so instead of
// reporting differences the bridge will fix once it runs again.
func TestVerifyRefusesAMovedChain(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 8}}, 128)
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	require.NoError(t, h.sim.Reorg(2, 3))
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	defer b.close()
	b.verifyWait = 2 * time.Second
	_, err = b.verify(t.Context(), h.cfg.Streams[0].ID)
	require.ErrorIs(t, err, ops.ErrChainMoved)
	assert.Contains(t, err.Error(), "verify again once it has caught up")

	stop = h.run() // the bridge sees the reorg and retracts
	h.waitHead()
	require.NoError(t, stop())
	requireClean(t, h.verify())
}

// TestRunRefusesChangedPartitionCount: adding partitions to a batch-keyed
// topic under a running stream is refused at start, with what to do.
func TestRunRefusesChangedPartitionCount(t *testing.T) {
	svc := fakeServices(t)
	h := newHarness(t, svc, ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 12}, MaxMicrobatchBlocks: 1}, 128)
	h.cfg.Streams[0].Partitions = 2
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())

	cl, err := kgo.NewClient(kgo.SeedBrokers(svc.brokers...))
	require.NoError(t, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).UpdatePartitions(t.Context(), 5, h.cfg.Streams[0].Topic)
	require.NoError(t, err)

	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	defer b.close()
	err = b.run(t.Context())
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "partition count changed under a running stream")
}

// TestRunNetworkTopic names the data topic with {network}: resolved at the
// first block range on a fresh start, from the checkpoint on a restart.
func TestRunNetworkTopic(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 6}}, 128)
	h.cfg.Streams[0].Topic = h.cfg.Streams[0].ID + ".{network}.txs"
	stop := h.run()
	h.waitHead()
	require.NoError(t, stop())
	require.NoError(t, h.sim.Reorg(1, 2))
	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	assert.Equal(t, h.cfg.Streams[0].ID+".mainnet.txs", rep.Topic)
	requireClean(t, rep)
}

func TestTopicName(t *testing.T) {
	got, err := config.StreamConfig{ID: "s", Topic: "amp.{stream}.{network}"}.TopicName([]string{"base"})
	require.NoError(t, err)
	assert.Equal(t, "amp.s.base", got)
	got, err = config.StreamConfig{ID: "s", Topic: "amp.{stream}"}.TopicName(nil)
	require.NoError(t, err)
	assert.Equal(t, "amp.s", got)
	_, err = config.StreamConfig{ID: "s", Topic: "amp.{network}"}.TopicName([]string{"a", "b"})
	require.ErrorIs(t, err, config.ErrInvalid)
}

// TestRewind retracts from a block on and resumes there.
func TestRewind(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 4}}, 128)
	stop := h.run()
	h.waitHead()
	for range 8 {
		h.sim.Mine(1)
		h.waitHead()
	}
	require.NoError(t, stop())
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	res, err := b.rewind(t.Context(), h.cfg.Streams[0].ID, 8)
	b.close()
	require.NoError(t, err)
	assert.Equal(t, 4, res.Batches, "blocks 8..=11 were four single-block batches")
	assert.Positive(t, res.Rows)
	require.Len(t, res.Cursor, 1)
	assert.Equal(t, uint64(7), res.Cursor["mainnet"].Number)

	h.mu.Lock()
	h.last = 0
	h.mu.Unlock()
	stop = h.run() // publishes 8..=11 again
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Equal(t, res.Rows, rep.Retracted)
	// The rewind's retractions say so: nothing else retracted here.
	assert.Equal(t, map[string]int{"rewind": res.Rows}, h.retractionCauses(h.cfg.Streams[0].Topic))
}

// retractionCauses decodes the retractions (op d) of topic with goavro and
// the registry's schemas, and counts them by their cause (source.cause, or
// _amp_cause in the flat envelope).
func (h *harness) retractionCauses(topic string) map[string]int {
	h.t.Helper()
	reg, err := sr.NewClient(sr.URLs(h.svc.registry))
	require.NoError(h.t, err)
	codecs := map[int]*goavro.Codec{}
	out := map[string]int{}
	for _, r := range h.readTopic(topic) {
		if r.op != "d" || r.tomb {
			continue
		}
		c := codecs[r.schemaID]
		if c == nil {
			s, err := reg.SchemaByID(h.t.Context(), r.schemaID)
			require.NoError(h.t, err)
			c, err = goavro.NewCodec(s.Schema)
			require.NoError(h.t, err)
			codecs[r.schemaID] = c
		}
		native, _, err := c.NativeFromBinary(r.value[5:]) // after the magic byte and the schema id
		require.NoError(h.t, err)
		// Debezium's source.cause, or the flat envelope's _amp_cause.
		v, ok := native.(map[string]any)["_amp_cause"]
		if src, isDebezium := native.(map[string]any)["source"].(map[string]any); isDebezium {
			v, ok = src["cause"]
		}
		require.True(h.t, ok, "a retraction without a cause field")
		cause := "null"
		if u, ok := v.(map[string]any); ok {
			cause, _ = u["string"].(string)
		}
		out[cause]++
	}
	return out
}

// TestRewindRecoversAReorgDeeperThanRetention: the stream stops with
// ErrUnrecoverable, as documented; bridge rewind below the fork brings it
// back, with the replaced rows retracted.
func TestRewindRecoversAReorgDeeperThanRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 2}}, 2)
	stop := h.run()
	h.waitHead()
	for range 10 {
		h.sim.Mine(1)
		h.waitHead()
	}
	require.NoError(t, stop())
	require.NoError(t, h.sim.Reorg(6, 7)) // replaces blocks 6..=11, retention is 2 blocks

	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	err = b.run(t.Context())
	require.ErrorIs(t, err, reorg.ErrUnrecoverable)
	assert.Contains(t, err.Error(), "bridge rewind")
	_, err = b.rewind(t.Context(), h.cfg.Streams[0].ID, 5)
	b.close()
	require.NoError(t, err)

	stop = h.run()
	h.waitHead()
	require.NoError(t, stop())
	rep := h.verify()
	requireClean(t, rep)
	assert.Positive(t, rep.Retracted)
}

// TestRunModes runs a reorg through the other key, envelope and retraction
// modes and verifies each topic.
func TestRunModes(t *testing.T) {
	t.Parallel()
	for _, m := range []struct {
		name       string
		envelope   config.Envelope
		retraction config.Retraction
		key        config.KeyMode
		keyCols    []string
		fixedAs    config.FixedAs
	}{
		{"row-key", "debezium", "both", config.KeyRow, []string{"tx_hash"}, "fixed"},
		{"flat", "flat", "both", config.KeyBatch, nil, "fixed"},
		{"retract-only", "debezium", "retract", config.KeyBatch, nil, "fixed"},
		{"tombstone-only", "debezium", "tombstone", config.KeyBatch, nil, "fixed"},
		{"fixed-as-bytes", "debezium", "both", config.KeyBatch, nil, "bytes"},
		{"fixed-as-hex-row-key", "debezium", "both", config.KeyRow, []string{"tx_hash"}, "hex"},
	} {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 6}}, 128)
			sc := &h.cfg.Streams[0]
			sc.Envelope, sc.Retraction, sc.Key, sc.KeyColumns, sc.FixedAs = m.envelope, m.retraction, m.key, m.keyCols, m.fixedAs
			if m.key == config.KeyRow {
				sc.Partitions = 3
			}
			require.NoError(t, h.cfg.Validate())
			stop := h.run()
			h.waitHead()
			for range 3 {
				h.sim.Mine(1)
				h.waitHead()
			}
			require.NoError(t, h.sim.Reorg(2, 3))
			h.waitHead()
			require.NoError(t, stop())
			rep := h.verify()
			requireClean(t, rep)
			assert.Positive(t, rep.Retracted)
			if m.retraction.Events() {
				assert.Equal(t, map[string]int{"reorg": rep.Retracted}, h.retractionCauses(sc.Topic))
			}
		})
	}
}

// TestRunCommitsEmptyMicrobatchesWhileIdle: microbatches without rows are
// committed (the cursor moves) even when Amp then stays silent.
func TestRunCommitsEmptyMicrobatchesWhileIdle(t *testing.T) {
	h := newHarness(t, fakeServices(t), ampsim.Config{NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 3, TxPerBlock: -1}}, 128)
	stop := h.run()
	h.waitHead()
	h.sim.Mine(1)
	h.waitHead() // fails unless the idle watermark is committed on the budget timer
	require.NoError(t, stop())
	b, err := newBridge(t.Context(), h.cfg, testLogger())
	require.NoError(t, err)
	defer b.close()
	var out strings.Builder
	require.NoError(t, b.status(t.Context(), &out, time.Now()))
	assert.Contains(t, out.String(), `"number":3`)
}
