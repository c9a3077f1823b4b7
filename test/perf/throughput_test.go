package perf

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

var (
	flagE2E        = flag.Bool("perf.e2e", false, "run TestThroughput (minutes; needs the Kafka jars and redis-server of `make services`)")
	flagConfigs    = flag.String("perf.configs", "kfake/p1,kfake/p6,kfake/p1/backfill,kafka/p1,kafka/p6,kafka/p1/backfill", "comma-separated configurations broker/pN[/backfill][/star]")
	flagWarmup     = flag.Duration("perf.warmup", 60*time.Second, "warm-up before the first measured window")
	flagRun        = flag.Duration("perf.run", 60*time.Second, "length of one measured window")
	flagRuns       = flag.Int("perf.runs", 3, "measured windows per configuration (the median is reported)")
	flagRounds     = flag.Int("perf.rounds", 1, "times the list of configurations is run, in turn (a fresh simulator, broker and bridge each time): a configuration's figure is the median of its windows from every round, so that the machine's drift over the run falls on every configuration alike (peers: 1 round only)")
	flagRate       = flag.Int("perf.rate", 0, "expected rows/s, to size the backfill history (0: 1.2M for kfake, 500k for kafka)")
	flagTxPerBlk   = flag.Int("perf.tx-per-block", ampsim.DefaultTxPerBlock, "mean transactions per block of the simulated chain")
	flagReplay     = flag.Int("perf.replay-blocks", 64, "template blocks of the simulator's replay mode (0: generate every row)")
	flagBatchRows  = flag.Int("perf.batch-rows", 10000, "rows per Arrow batch the simulator sends (when _block_num is not selected)")
	flagProfile    = flag.Bool("perf.profile", true, "save a CPU profile of the bridge during the middle window")
	flagOut        = flag.String("perf.out", "", "directory for logs, configs and profiles (default: a temporary directory)")
	flagBridge     = flag.String("perf.bridge", "", "bridge binary to run instead of building ./cmd/bridge")
	flagJSON       = flag.String("perf.json", "", "file to write every configuration's figures to as JSON (make bench's report reads it)")
	flagKafkaExtra = flag.String("perf.kafka", "", "extra lines of the bridge's kafka section in TestThroughput, separated by ';', e.g. 'max_buffered_bytes: 16MiB' (the defaults otherwise)")
	flagBrokerWarm = flag.Duration("perf.broker-warmup", 0, "on Apache Kafka, a franz-go producer of synthetic ~620 B records into a scratch topic of the same partitions for this long before the bridge starts, so that the bridge, which runs first, does not meet a colder broker JVM than its peers do")
)

// txColumns are the 15 columns performance.md's encoder figures use.
const txColumns = `block_num, block_hash, "timestamp", tx_index, tx_hash, "from", "to", nonce, value, gas_price, gas_limit, gas_used, input, type, status`

// TestMain removes the bridge binary the test built.
func TestMain(m *testing.M) { bridgetest.Main(m) }

// perfConfig is one measured configuration.
type perfConfig struct {
	name       string
	broker     string // kfake or kafka
	partitions int
	backfill   bool
	star       bool
}

func parseConfig(s string) (perfConfig, error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	c := perfConfig{name: strings.TrimSpace(s), partitions: 1}
	if len(parts) < 2 || (parts[0] != "kfake" && parts[0] != "kafka") || !strings.HasPrefix(parts[1], "p") {
		return c, fmt.Errorf("configuration %q: want broker/pN[/backfill][/star] with broker kfake or kafka", s)
	}
	c.broker = parts[0]
	n, err := strconv.Atoi(parts[1][1:])
	if err != nil || n < 1 {
		return c, fmt.Errorf("configuration %q: partitions %q: want p1, p6, ...", s, parts[1])
	}
	c.partitions = n
	for _, p := range parts[2:] {
		switch p {
		case "backfill":
			c.backfill = true
		case "star":
			c.star = true
		default:
			return c, fmt.Errorf("configuration %q: unknown option %q: want backfill or star", s, p)
		}
	}
	return c, nil
}

// sample is what is read at the edge of a measured window.
type sample struct {
	at         time.Time
	offsets    int64   // sum of the data topic's last stable offsets
	bridgeCPU  float64 // CPU seconds of the bridge process
	brokerCPU  float64 // CPU seconds of the broker process
	selfCPU    float64 // CPU seconds of this process (the simulator)
	wireBytes  float64 // amp_bridge_kafka_produce_bytes_total (stream producer)
	written    float64 // amp_bridge_records_written_total
	txnCommits float64 // amp_bridge_txn_commits_total
	batches    float64 // amp_bridge_kafka_produce_batches_total
	batchRecs  float64 // amp_bridge_kafka_produce_records_total
}

// window is one measured window.
type window struct {
	dur                            float64
	rows                           int64
	rowsPerSec, mbPerSec           float64
	bridgeCores, brokerCores       float64
	simCores                       float64
	bridgeUsPerRow, brokerUsPerRow float64
	simUsPerRow                    float64
	bytesPerRow                    float64
	txns                           float64
	written                        float64 // records the stream's producer reported written (cross-check)
	recsPerBatch                   float64 // records per produce batch (franz-go's)
	rssMiB                         float64 // peak RSS of the bridge so far
	load                           string
}

// env is what every configuration shares.
type env struct {
	out      string
	bridge   string
	devstack string
	// bytesPerRow is the wire bytes per row measured by a live run, per
	// query (star or not), for the MB/s of backfill runs, whose partition
	// producers have no client metrics.
	bytesPerRow map[bool]float64
	// brokerName names the broker of the current configuration.
	brokerName string
	// results are the figures for -perf.json: the bridge's and its peers'.
	results []e2eResult
}

func TestThroughput(t *testing.T) {
	if !*flagE2E {
		t.Skip("throughput harness: run with -perf.e2e (make bench-e2e)")
	}
	require.Positive(t, *flagRuns, "-perf.runs must be at least 1: the median of the windows is reported")
	var cfgs []perfConfig
	for s := range strings.SplitSeq(*flagConfigs, ",") {
		c, err := parseConfig(s)
		require.NoError(t, err)
		cfgs = append(cfgs, c)
	}
	e := &env{out: *flagOut, bytesPerRow: map[bool]float64{}}
	if e.out == "" {
		e.out = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(e.out, 0o755))
	e.bridge = *flagBridge
	if e.bridge == "" {
		e.bridge = bridgetest.Build(t, false)
	}
	e.devstack = buildDevstack(t)
	require.Positive(t, *flagRounds, "-perf.rounds must be at least 1")
	require.True(t, *flagRounds == 1 || *flagPeers == "", "-perf.rounds above 1 is for the bridge alone: run the peers (-perf.peers) in one round")
	wsByConfig := map[string][]window{}
	for round := 1; round <= *flagRounds; round++ {
		for _, c := range cfgs {
			name := strings.ReplaceAll(c.name, "/", "_")
			if *flagRounds > 1 {
				name += fmt.Sprintf("_round%d", round)
			}
			t.Run(name, func(t *testing.T) {
				wsByConfig[c.name] = append(wsByConfig[c.name], runConfig(t, e, c)...)
			})
		}
	}
	var summary []string
	for _, c := range cfgs {
		if ws, ok := wsByConfig[c.name]; ok {
			summary = append(summary, summarize(c, ws))
			delete(wsByConfig, c.name) // a configuration listed twice is summarized once
		}
	}
	e.results = mergeRounds(e.results, *flagRounds)
	t.Logf("summary (median of %d windows of %s after %s warm-up, %d round(s)):\n%s", *flagRuns, *flagRun, *flagWarmup, *flagRounds, strings.Join(summary, "\n"))
	if *flagJSON != "" {
		require.NoError(t, writeJSON(*flagJSON, e2eFile{Results: e.results, Warmup: flagWarmup.String(), Run: flagRun.String(),
			Runs: *flagRuns, Rounds: *flagRounds, PeerWarmup: flagPeerWarmup.String(), BrokerWarmup: flagBrokerWarm.String(), Turns: *flagTurns}))
	}
}

// mergeRounds makes one result of the bridge's results of one
// configuration from several rounds: the windows of every round, and
// their medians.
func mergeRounds(rs []e2eResult, rounds int) []e2eResult {
	if rounds <= 1 {
		return rs
	}
	var out []e2eResult
	at := map[[2]string]int{}
	for _, r := range rs {
		k := [2]string{r.Config, r.Contender}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			r.Method += fmt.Sprintf("; %d rounds, each configuration in turn with a fresh simulator, broker and bridge, its figure the median of the windows of every round (the CPU profile: the first round's)", rounds)
			out = append(out, r)
			continue
		}
		m := &out[i]
		ws := append(slices.Clone(m.windows), r.windows...)
		*m = e2eResult{Config: m.Config, Partitions: m.Partitions, Contender: m.Contender, Method: m.Method, Broker: m.Broker, Profile: m.Profile}
		m.fill(ws)
	}
	return out
}

func buildDevstack(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "devstack")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/devstack")
	cmd.Dir = bridgetest.ModuleRoot(t)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building ./cmd/devstack: %s", b)
	return out
}

// broker is a running Kafka broker of one configuration.
type broker struct {
	addr string
	pid  int
}

func startBroker(t *testing.T, e *env, c perfConfig, dir string) broker {
	t.Helper()
	if c.broker == "kafka" {
		return startKafka(t, dir)
	}
	addrFile := filepath.Join(dir, "kfake.addr")
	// A file left by an earlier run in the same -perf.out must not be read.
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	cmd := exec.CommandContext(context.Background(), e.devstack, "kfake", "-blackhole", "-addr-file", addrFile)
	p, err := testenv.StartProcess(cmd, filepath.Join(dir, "kfake.log"))
	require.NoError(t, err)
	t.Cleanup(func() { p.Term(10 * time.Second) })
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := os.ReadFile(addrFile)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return broker{addr: strings.TrimSpace(string(b)), pid: cmd.Process.Pid}
		}
		require.False(t, p.Exited(), "kfake exited: %s", testenv.Tail(filepath.Join(dir, "kfake.log"), 20))
		require.True(t, time.Now().Before(deadline), "kfake did not write its address")
		time.Sleep(50 * time.Millisecond)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func runConfig(t *testing.T, e *env, c perfConfig) []window {
	// The subtest's name: the configuration's, and its round's with
	// -perf.rounds above 1.
	dir := filepath.Join(e.out, filepath.Base(t.Name()))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	rate := *flagRate
	if rate == 0 {
		rate = map[string]int{"kfake": 1_200_000, "kafka": 500_000}[c.broker]
	}
	total := *flagWarmup + time.Duration(*flagRuns)*(*flagRun) + 30*time.Second
	// The history: what the backfill publishes; the live stream gets more
	// blocks from the feeder as it goes.
	blocks := int(total.Seconds()*float64(rate)) / max(1, *flagTxPerBlk)
	if !c.backfill {
		blocks = min(blocks, 50_000)
	}
	start := time.Now()
	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig: ampsim.NetworkConfig{InitialBlocks: blocks, TxPerBlock: *flagTxPerBlk, LogsPerTx: -1},
		KeepAlive:     ampsim.KeepAliveOff,
		ReplayBlocks:  *flagReplay,
		BatchRows:     *flagBatchRows,
	})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	t.Logf("%s: simulator with %d blocks ready in %s", c.name, blocks, time.Since(start).Round(time.Millisecond))

	rs := testenv.StartRedisServer(t)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	t.Cleanup(reg.Close)
	br := startBroker(t, e, c, dir)
	e.brokerName = "kfake (devstack kfake -blackhole, its own process)"
	if c.broker == "kafka" {
		e.brokerName = kafkaBrokerName()
		if *flagBrokerWarm > 0 {
			warmBroker(t, br, c.partitions, dir, *flagBrokerWarm)
		}
	}

	name := fmt.Sprintf("perf-%s-%d", strings.ReplaceAll(c.name, "/", "-"), time.Now().UnixNano()%1_000_000)
	topic := name + ".transactions"
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addr))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"cleanup.policy": new("delete")}
	if c.broker == "kafka" {
		// Keep the log bounded: a run writes tens of GB (the broker checks
		// retention every 5 s, see startKafka).
		configs = topicConfig(c.partitions)
	}
	_, err = adm.CreateTopic(t.Context(), int32(c.partitions), 1, configs, topic)
	require.NoError(t, err)

	sql := "SELECT " + txColumns + " FROM eth_rpc.transactions SETTINGS stream = true"
	if c.star {
		sql = "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"
	}
	backfill := ""
	if c.backfill {
		backfill = "    backfill:\n      enabled: true\n      workers: 2\n"
		if !c.star {
			backfill += "      column: block_num\n"
		}
	}
	httpAddr := freeAddr(t)
	cfg := fmt.Sprintf(`amp:
  addr: %s
  reconnect_min: 50ms
  reconnect_max: 1s
kafka:
  brokers: [%s]
  transactional_id_prefix: %s
  control_topic: %s.control
  replication_factor: 1
  compression: none
%sregistry:
  url: %s
checkpoint:
  store: redis
  redis:
    addr: %s
    key_prefix: %s
http:
  addr: %s
  pprof: true
log:
  level: warn
streams:
  - id: perf
    sql: %q
    topic: %s
    partitions: %d
    head_poll_interval: -1s
%s`, sim.Addr(), br.addr, name, name, kafkaLines(*flagKafkaExtra), reg.URL, rs.Addr(), name, httpAddr, sql, topic, c.partitions, backfill)
	cfgPath := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))

	ctx := t.Context()
	// runBridge starts the bridge (resuming from its checkpoint after the
	// first run), feeds the simulator, waits out warm, measures the
	// windows and, while it still runs, calls during. It stops the bridge
	// and the feeder before it returns.
	runBridge := func(label string, warm time.Duration, profile bool, during func()) []window {
		t.Helper()
		logPath := filepath.Join(dir, "bridge"+label+".log")
		cmd := exec.CommandContext(context.Background(), e.bridge, "run", "-c", cfgPath)
		cmd.Env = bridgetest.Env()
		proc, err := testenv.StartProcess(cmd, logPath)
		require.NoError(t, err)
		t.Cleanup(proc.Kill9)
		bridgePID := cmd.Process.Pid
		m := &meter{adm: adm, topic: topic, metrics: "http://" + httpAddr + "/metrics", bridgePID: bridgePID, brokerPID: br.pid}
		// The feeder keeps the head ahead of what the bridge has published.
		var published atomic.Int64
		if off, err := m.offsets(ctx); err == nil {
			published.Store(off)
		}
		feedCtx, stopFeed := context.WithCancel(ctx)
		feedDone := make(chan struct{})
		go func() {
			defer close(feedDone)
			feed(feedCtx, sim, &published)
		}()
		defer func() { stopFeed(); <-feedDone }()

		wait := func(d time.Duration) {
			t.Helper()
			end := time.Now().Add(d)
			for time.Now().Before(end) {
				require.False(t, proc.Exited(), "bridge exited (%v); log tail:\n%s", proc.Err(), testenv.Tail(logPath, 40))
				checkSpace(t, dir)
				if off, err := m.offsets(ctx); err == nil {
					published.Store(off)
				}
				time.Sleep(min(time.Second, time.Until(end)))
			}
		}
		wait(warm)
		var ws []window
		for i := range *flagRuns {
			s0, err := m.sample(ctx)
			require.NoError(t, err)
			var prof chan error
			if profile && i == *flagRuns/2 {
				prof = make(chan error, 1)
				secs := max(1, int(min(*flagRun-2*time.Second, 30*time.Second).Seconds()))
				go func() {
					prof <- saveProfile(ctx, "http://"+httpAddr, secs, filepath.Join(dir, "cpu.pprof"))
				}()
			}
			wait(*flagRun)
			s1, err := m.sample(ctx)
			require.NoError(t, err)
			w := measure(s0, s1)
			if c.backfill || w.bytesPerRow == 0 {
				w.bytesPerRow = e.bytesPerRow[c.star]
				w.mbPerSec = w.rowsPerSec * w.bytesPerRow / 1e6
			} else {
				e.bytesPerRow[c.star] = w.bytesPerRow
			}
			w.rssMiB = rssMiB(bridgePID)
			ws = append(ws, w)
			t.Logf("%s run %d%s: %.0f rows/s, %.1f MB/s (%.0f B/row), %d rows (producer: %.0f records written), %.0f txns, %.0f records per produce batch; CPU cores: bridge %.2f, broker %.2f, simulator %.2f; CPU µs/row: bridge %.2f, broker %.2f, simulator %.2f; bridge peak RSS %.0f MiB; load %s",
				c.name, i+1, label, w.rowsPerSec, w.mbPerSec, w.bytesPerRow, w.rows, w.written, w.txns, w.recsPerBatch, w.bridgeCores, w.brokerCores, w.simCores,
				w.bridgeUsPerRow, w.brokerUsPerRow, w.simUsPerRow, w.rssMiB, w.load)
			if prof != nil {
				if err := <-prof; err != nil {
					t.Logf("CPU profile: %v", err)
				} else {
					t.Logf("CPU profile of the bridge: go tool pprof -top %s", filepath.Join(dir, "cpu.pprof"))
				}
			}
		}
		if during != nil {
			during()
		}
		require.Zero(t, proc.Term(30*time.Second), "bridge exit code; log tail:\n%s", testenv.Tail(logPath, 20))
		return ws
	}

	var cp *capture
	ws := runBridge("", *flagWarmup, *flagProfile, func() {
		// While the bridge runs the records just below the last stable
		// offset are committed; after its shutdown they may be the aborted
		// last transaction.
		if c.broker == "kafka" {
			if a, err := anatomy(ctx, br.addr, topic, 2000); err != nil {
				t.Logf("record anatomy: %v", err)
			} else {
				t.Logf("%s record anatomy (mean of %d committed records): key %.0f B, value %.0f B, %.1f headers %.0f B (keys and values)",
					c.name, a.n, a.key, a.value, a.headers, a.headerBytes)
			}
		}
		// The peers' records are captured while the bridge runs, for the
		// same reason: after its shutdown the end of the topic is an
		// aborted transaction that a read_committed capture would skip.
		if *flagPeers != "" && c.broker == "kafka" {
			var err error
			cp, err = captureRecords(ctx, br.addr, topic, *flagCapture, dir)
			require.NoError(t, err)
			t.Logf("%s: captured %d records (%.0f B with %.1f headers, %.0f B key and value; %d left out of kcat's input)",
				c.name, len(cp.records), cp.bytesFull, cp.headersPerRecord, cp.bytesKV, cp.skipped)
		}
	})
	res := e2eResult{Config: c.name, Partitions: c.partitions, Contender: "bridge", Broker: e.brokerName,
		Method: "cmd/bridge as a process: Flight from the simulator (replayed 10k-row batches), Arrow decode, Avro, transactions at every microbatch, " +
			"Redis checkpoints (appendfsync always), acks=all, no compression; " + map[bool]string{false: "15-column query", true: "SELECT * (its 10k-row batches cut once at a block, as Amp cuts them, in ~2 MiB messages)"}[c.star]}
	if *flagProfile {
		res.Profile = filepath.Join(dir, "cpu.pprof")
	}
	if cp == nil {
		res.fill(ws)
		e.results = append(e.results, res)
		return ws
	}
	peers := runPeers(t, e, c, br, sim, cp, dir)
	first := len(ws)
	// Turns (-perf.turns): the bridge, resumed from its checkpoint, and the
	// peers run again take turns, so that a slow spell of the machine (its
	// neighbours, the broker's JVM) falls on both in alternation.
	for k := 1; k <= *flagTurns; k++ {
		ws = append(ws, runBridge(fmt.Sprintf("-turn%d", k), *flagPeerWarmup, false, nil)...)
		runAgain(t, e, c, br, sim, cp, dir, peers, fmt.Sprintf("-turn%d", k))
	}
	describeRuns(peers)
	// The bridge runs again after its peers, resuming where it stopped, so
	// that its figure is not only the one the broker gave first: the broker
	// drifts over a run (its JVM, its log), and the bridge's windows from
	// before and after the peers together are what it is judged by.
	again := runBridge("-again", *flagPeerWarmup, false, nil)
	if *flagTurns > 0 {
		res.Method += fmt.Sprintf("; %d windows before its peers, %d turns of %d windows in alternation with the peers run again, and %d last "+
			"(each time resumed from its checkpoint after a %s warm-up)", first, *flagTurns, (len(ws)-first) / *flagTurns, len(again), *flagPeerWarmup)
	} else {
		res.Method += fmt.Sprintf("; %d windows before its peers and %d after them (the bridge resumed from its checkpoint after a %s warm-up)", first, len(again), *flagPeerWarmup)
	}
	ws = append(ws, again...)
	res.fill(ws)
	e.results = append(e.results, res)
	e.results = append(e.results, peers...)
	return ws
}

// recordAnatomy is the mean size of a record's parts.
type recordAnatomy struct {
	n                                int
	key, value, headers, headerBytes float64
}

// anatomy reads up to n committed records of partition 0 of topic from its
// end (read_committed) and returns their mean key, value and header sizes.
func anatomy(ctx context.Context, addr, topic string, n int) (recordAnatomy, error) {
	var a recordAnatomy
	acl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return a, fmt.Errorf("creating admin client: %w", err)
	}
	lo, err := kadm.NewClient(acl).ListCommittedOffsets(ctx, topic)
	acl.Close()
	if err != nil {
		return a, fmt.Errorf("listing committed offsets: %w", err)
	}
	o, ok := lo.Lookup(topic, 0)
	if !ok || o.Offset == 0 {
		return a, fmt.Errorf("no committed records in %s", topic)
	}
	from := max(0, o.Offset-int64(2*n))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}))
	if err != nil {
		return a, fmt.Errorf("creating consumer: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var fetchErr error
	for a.n < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			break
		}
		fs.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		fs.EachRecord(func(r *kgo.Record) {
			if a.n >= n {
				return
			}
			a.n++
			a.key += float64(len(r.Key))
			a.value += float64(len(r.Value))
			a.headers += float64(len(r.Headers))
			for _, h := range r.Headers {
				a.headerBytes += float64(len(h.Key) + len(h.Value))
			}
		})
	}
	if a.n == 0 {
		return a, fmt.Errorf("read no record of %s from offset %d (LSO %d; last fetch error: %w)", topic, from, o.Offset, fetchErr)
	}
	k := float64(a.n)
	a.key, a.value, a.headers, a.headerBytes = a.key/k, a.value/k, a.headers/k, a.headerBytes/k
	return a, nil
}

// feed mines blocks so that the head stays at least 5,000 blocks (and a
// minute of the rows published so far) ahead of what the bridge has
// published.
func feed(ctx context.Context, sim *ampsim.Server, published *atomic.Int64) {
	head, _ := sim.Head()
	per, err := sim.Primary().ExpectedRows(ampsim.TableTransactions, 0, min(head, 999))
	if err != nil || per == 0 {
		return
	}
	perBlock := float64(per) / float64(min(head, 999)+1)
	tk := time.NewTicker(500 * time.Millisecond)
	defer tk.Stop()
	startAt, startRows := time.Now(), published.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		rows := published.Load()
		rate := float64(rows-startRows) / time.Since(startAt).Seconds()
		ahead := uint64(max(5000, 60*rate/perBlock))
		done := uint64(float64(rows) / perBlock)
		if h, _ := sim.Head(); h < done+ahead {
			sim.Mine(int(done + ahead - h))
		}
	}
}

// meter reads the samples of one configuration.
type meter struct {
	adm                  *kadm.Client
	topic                string
	metrics              string
	bridgePID, brokerPID int
}

// offsets returns the sum of the data topic's last stable offsets: what a
// read_committed consumer can read (each committed transaction also takes
// one offset per partition it wrote for its commit marker).
func (m *meter) offsets(ctx context.Context) (int64, error) {
	lo, err := m.adm.ListCommittedOffsets(ctx, m.topic)
	if err != nil {
		return 0, fmt.Errorf("listing committed offsets: %w", err)
	}
	var sum int64
	var firstErr error
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && firstErr == nil {
			firstErr = o.Err
		}
		sum += o.Offset
	})
	if firstErr != nil {
		return 0, fmt.Errorf("listing committed offsets: %w", firstErr)
	}
	return sum, nil
}

func (m *meter) sample(ctx context.Context) (sample, error) {
	s := sample{at: time.Now()}
	var err error
	if s.offsets, err = m.offsets(ctx); err != nil {
		return s, err
	}
	if s.bridgeCPU, err = cpuSeconds(strconv.Itoa(m.bridgePID)); err != nil {
		return s, err
	}
	if s.brokerCPU, err = cpuSeconds(strconv.Itoa(m.brokerPID)); err != nil {
		return s, err
	}
	if s.selfCPU, err = cpuSeconds("self"); err != nil {
		return s, err
	}
	ms, err := scrape(ctx, m.metrics)
	if err != nil {
		return s, err
	}
	s.wireBytes = ms["amp_bridge_kafka_produce_bytes_total"]
	s.written = ms["amp_bridge_records_written_total"]
	s.txnCommits = ms["amp_bridge_txn_commits_total"]
	s.batches = ms["amp_bridge_kafka_produce_batches_total"]
	s.batchRecs = ms["amp_bridge_kafka_produce_records_total"]
	return s, nil
}

func measure(a, b sample) window {
	w := window{dur: b.at.Sub(a.at).Seconds(), rows: b.offsets - a.offsets, txns: b.txnCommits - a.txnCommits, written: b.written - a.written, load: loadAvg()}
	w.rowsPerSec = float64(w.rows) / w.dur
	if dw := b.written - a.written; dw > 0 {
		w.bytesPerRow = (b.wireBytes - a.wireBytes) / dw
	}
	if db := b.batches - a.batches; db > 0 {
		w.recsPerBatch = (b.batchRecs - a.batchRecs) / db
	}
	w.mbPerSec = w.rowsPerSec * w.bytesPerRow / 1e6
	w.bridgeCores = (b.bridgeCPU - a.bridgeCPU) / w.dur
	w.brokerCores = (b.brokerCPU - a.brokerCPU) / w.dur
	w.simCores = (b.selfCPU - a.selfCPU) / w.dur
	if w.rows > 0 {
		w.bridgeUsPerRow = (b.bridgeCPU - a.bridgeCPU) / float64(w.rows) * 1e6
		w.brokerUsPerRow = (b.brokerCPU - a.brokerCPU) / float64(w.rows) * 1e6
		w.simUsPerRow = (b.selfCPU - a.selfCPU) / float64(w.rows) * 1e6
	}
	return w
}

func summarize(c perfConfig, ws []window) string {
	med := func(f func(window) float64) float64 {
		v := make([]float64, len(ws))
		for i, w := range ws {
			v[i] = f(w)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	var runs []string
	for _, w := range ws {
		runs = append(runs, fmt.Sprintf("%.0f", w.rowsPerSec))
	}
	return fmt.Sprintf("%-20s median %8.0f rows/s %6.1f MB/s  runs [%s]  CPU µs/row bridge %.2f broker %.2f sim %.2f  cores bridge %.2f broker %.2f sim %.2f  RSS %.0f MiB  load %s",
		c.name, med(func(w window) float64 { return w.rowsPerSec }), med(func(w window) float64 { return w.mbPerSec }),
		strings.Join(runs, " "),
		med(func(w window) float64 { return w.bridgeUsPerRow }), med(func(w window) float64 { return w.brokerUsPerRow }),
		med(func(w window) float64 { return w.simUsPerRow }),
		med(func(w window) float64 { return w.bridgeCores }), med(func(w window) float64 { return w.brokerCores }),
		med(func(w window) float64 { return w.simCores }), ws[len(ws)-1].rssMiB, ws[len(ws)-1].load)
}

// cpuSeconds returns the user+system CPU time of /proc/<pid>, in seconds
// (clock ticks of 1/100 s, as on every Linux this runs on).
func cpuSeconds(pid string) (float64, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time of %s: %w", pid, err)
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// Fields after the command: state is 0, utime 11, stime 12.
	ut, err1 := strconv.ParseFloat(fields[11], 64)
	st, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing /proc/%s/stat: %q", pid, s)
	}
	return (ut + st) / 100, nil
}

// checkSpace stops the test when the disk of dir has less than 10 GiB left,
// or the broker's log directory (tmpfs: memory) less than 2 GiB, so that
// the box keeps working.
func checkSpace(t *testing.T, dir string) {
	t.Helper()
	require.GreaterOrEqual(t, freeDisk(dir), uint64(10<<30), "less than 10 GiB of disk left: stopping so the box keeps working")
	if d := brokerLogDir(); d != "" {
		require.GreaterOrEqual(t, freeDisk(d), uint64(2<<30), "less than 2 GiB left in -perf.broker-log-dir %s: stopping so the box keeps working", d)
	}
}

// freeDisk returns the bytes available in the file system of dir (max if
// unknown).
func freeDisk(dir string) uint64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return math.MaxUint64
	}
	return st.Bavail * uint64(st.Bsize)
}

// rssMiB returns the peak resident set size (VmHWM) of pid in MiB, 0 if
// unknown.
func rssMiB(pid int) float64 {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}

// scrape returns the sum of every series of each metric at url.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		name := line[:sp]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, nil
}

// saveProfile saves a CPU profile of secs seconds from the pprof endpoint
// at base to path.
func saveProfile(ctx context.Context, base string, secs int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("requesting profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("requesting profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating profile file: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("saving profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("saving profile: %w", err)
	}
	return nil
}
