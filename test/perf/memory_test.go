package perf

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

var (
	flagMemory        = flag.Bool("perf.memory", false, "run TestMemory (minutes): the bridge's peak RSS through a catch-up, a backfill and many streams")
	flagMemCases      = flag.String("perf.memory-cases", "catchup,slope,backfill,streams,busy-streams", "comma-separated TestMemory cases: catchup, slope, backfill, streams, busy-streams")
	flagMemBroker     = flag.String("perf.memory-broker", "kfake", "broker of TestMemory: kfake (its own process, records discarded) or kafka (a private Apache Kafka broker)")
	flagMemLimit      = flag.String("perf.gomemlimit", "", "GOMEMLIMIT of the bridge in TestMemory (empty: none; the shipped files set 384MiB)")
	flagMemTx         = flag.Int("perf.memory-tx-per-block", 300, "transactions per block of the catch-up and slope cases")
	flagMemBfBlocks   = flag.Int("perf.memory-backfill-blocks", 1_000_000, "blocks of the backfill case")
	flagMemSlopeBlks  = flag.Int("perf.memory-slope-blocks", 15_000, "blocks of each slope case: long enough that a run's peak is taken over dozens of collections, not the handful of a 2 s catch-up")
	flagMemBfTx       = flag.Int("perf.memory-backfill-tx-per-block", 10, "transactions per block of the backfill case")
	flagMemStreams    = flag.Int("perf.memory-streams", 100, "streams of the streams case")
	flagMemStreamBlks = flag.Int("perf.memory-stream-blocks", 200, "blocks each stream of the streams case publishes")
	flagMemBusyBlks   = flag.Int("perf.memory-busy-stream-blocks", 1000, "blocks each stream of the busy-streams case publishes: enough that every stream holds as many Amp messages as it ever does at once (the peak is flat from about 1000 blocks on)")
	flagMemKafka      = flag.String("perf.memory-kafka", "", "extra lines of the bridge's kafka section in TestMemory, e.g. 'max_buffered_bytes: 16MiB'")
	flagMemTimeout    = flag.Duration("perf.memory-timeout", 15*time.Minute, "how long one TestMemory case may take")
	flagMemRuns       = flag.Int("perf.memory-runs", 1, "runs of each TestMemory case, one after the other (each a fresh bridge, simulator, broker and redis-server); the case's peak is their median")
)

// memCase is one configuration whose peak RSS TestMemory reports.
type memCase struct {
	name       string
	blocks     int // the chain's blocks, all published
	txPerBlock int
	microbatch int // Amp's server_microbatch_max_interval
	streams    int
	workers    int // backfill workers; 0: no backfill
}

// memResult is one line of memory.json.
type memResult struct {
	Name string `json:"name"`
	// PeakRSSMiB is the median of RunsMiB, each run's peak.
	PeakRSSMiB       float64   `json:"peak_rss_mib"`
	RunsMiB          []float64 `json:"runs_mib,omitempty"`
	GoalMiB          float64   `json:"goal_mib"`
	Blocks           int       `json:"blocks"`
	TxPerBlock       int       `json:"tx_per_block"`
	MicrobatchBlocks int       `json:"microbatch_blocks"`
	Streams          int       `json:"streams"`
	BackfillWorkers  int       `json:"backfill_workers"`
	Rows             int64     `json:"rows"`
	Seconds          float64   `json:"seconds"`
	Broker           string    `json:"broker"`
	Delivery         string    `json:"delivery"`
	GOMEMLIMIT       string    `json:"gomemlimit"`
	// MemoryLimitMiB is the soft memory limit the bridge ran with
	// (go_gc_gomemlimit_bytes on its /metrics: GOMEMLIMIT or its
	// memory_limit); 0 for none.
	MemoryLimitMiB float64 `json:"memory_limit_mib,omitempty"`
	Load           string  `json:"load"`
	Bridge         string  `json:"bridge"`
}

// memGoalMiB is issue 13's memory goal for every case.
const memGoalMiB = 256

// memCases returns the cases named by -perf.memory-cases.
func memCases(names string) ([]memCase, error) {
	var out []memCase
	for n := range strings.SplitSeq(names, ",") {
		switch strings.TrimSpace(n) {
		case "catchup":
			out = append(out, memCase{name: "catchup-3000-blocks-mb1000", blocks: 3000, txPerBlock: *flagMemTx, microbatch: 1000, streams: 1})
		case "slope":
			for _, mb := range []int{100, 300, 1000, 3000} {
				out = append(out, memCase{name: fmt.Sprintf("slope-mb%d", mb), blocks: *flagMemSlopeBlks, txPerBlock: *flagMemTx, microbatch: mb, streams: 1})
			}
		case "backfill":
			out = append(out, memCase{name: fmt.Sprintf("backfill-%d-blocks-4-workers", *flagMemBfBlocks), blocks: *flagMemBfBlocks,
				txPerBlock: *flagMemBfTx, microbatch: 1000, streams: 1, workers: 4})
		case "streams":
			out = append(out, memCase{name: fmt.Sprintf("streams-%d", *flagMemStreams), blocks: *flagMemStreamBlks, txPerBlock: 20,
				microbatch: 1000, streams: *flagMemStreams})
		case "busy-streams":
			// Every stream catching up at once (after an outage): a whole
			// microbatch each, many Amp messages per stream.
			out = append(out, memCase{name: fmt.Sprintf("busy-streams-%d", *flagMemStreams), blocks: *flagMemBusyBlks, txPerBlock: 20,
				microbatch: 1000, streams: *flagMemStreams})
		default:
			return nil, fmt.Errorf("-perf.memory-cases: unknown case %q: want catchup, slope, backfill, streams or busy-streams", n)
		}
	}
	return out, nil
}

// TestMemory runs the bridge binary as a process through each case and
// reports its peak RSS (VmHWM): a table in the log and -perf.out/memory.json.
func TestMemory(t *testing.T) {
	if !*flagMemory {
		t.Skip("memory harness: run with -perf.memory")
	}
	cases, err := memCases(*flagMemCases)
	require.NoError(t, err)
	require.Contains(t, []string{"kfake", "kafka"}, *flagMemBroker, "-perf.memory-broker")
	e := &env{out: *flagOut}
	if e.out == "" {
		e.out = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(e.out, 0o755))
	e.bridge = *flagBridge
	if e.bridge == "" {
		e.bridge = bridgetest.Build(t, false)
	}
	if *flagMemBroker == "kfake" {
		e.devstack = buildDevstack(t)
	}
	require.Positive(t, *flagMemRuns, "-perf.memory-runs")
	var results []memResult
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var runs []memResult
			for i := range *flagMemRuns {
				res := runMemCase(t, e, c, i)
				t.Logf("%s run %d: peak RSS %.0f MiB (%d rows in %.1f s; load %s)", c.name, i+1, res.PeakRSSMiB, res.Rows, res.Seconds, res.Load)
				runs = append(runs, res)
			}
			results = append(results, medianRun(runs))
		})
	}
	b, err := json.MarshalIndent(results, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(e.out, "memory.json")
	require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	t.Logf("peak RSS of the bridge (%s, GOMEMLIMIT %q, bridge %s; the median of %d runs per case), written to %s:\n%s",
		*flagMemBroker, *flagMemLimit, e.bridge, *flagMemRuns, path, memTable(results))
}

// memTable formats the results, and the slope of the slope cases: their
// largest peak over their smallest.
func memTable(rs []memResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-34s %9s %6s %7s %5s %8s %8s %10s %7s  %s\n", "case", "peak MiB", "goal", "blocks", "tx/b", "mb", "streams", "rows", "s", "load")
	lo, hi := 0.0, 0.0
	for _, r := range rs {
		verdict := "ok"
		if r.PeakRSSMiB > r.GoalMiB {
			verdict = fmt.Sprintf("over by %.0f%%", (r.PeakRSSMiB/r.GoalMiB-1)*100)
		}
		var runs []string
		for _, v := range r.RunsMiB {
			runs = append(runs, fmt.Sprintf("%.0f", v))
		}
		fmt.Fprintf(&sb, "%-34s %9.0f %6s %7d %5d %8d %8d %10d %7.1f  %s  (runs: %s MiB)\n", r.Name, r.PeakRSSMiB, verdict, r.Blocks, r.TxPerBlock,
			r.MicrobatchBlocks, r.Streams, r.Rows, r.Seconds, r.Load, strings.Join(runs, ", "))
		if strings.HasPrefix(r.Name, "slope-") {
			if lo == 0 || r.PeakRSSMiB < lo {
				lo = r.PeakRSSMiB
			}
			hi = max(hi, r.PeakRSSMiB)
		}
	}
	if lo > 0 {
		fmt.Fprintf(&sb, "slope over microbatch sizes: largest peak / smallest = %.2f (goal: at most 1.10)\n", hi/lo)
	}
	return sb.String()
}

// medianRun is the run of median peak RSS among runs (the upper one of
// an even count), with every run's peak in RunsMiB and every run's load
// average.
func medianRun(runs []memResult) memResult {
	byPeak := slices.Clone(runs)
	slices.SortFunc(byPeak, func(a, b memResult) int { return cmp.Compare(a.PeakRSSMiB, b.PeakRSSMiB) })
	m := byPeak[len(byPeak)/2]
	m.RunsMiB = nil
	var loads []string
	for _, r := range runs {
		m.RunsMiB = append(m.RunsMiB, r.PeakRSSMiB)
		loads = append(loads, r.Load)
	}
	m.Load = strings.Join(loads, ", ")
	return m
}

func runMemCase(t *testing.T, e *env, c memCase, run int) memResult {
	dir := filepath.Join(e.out, "memory", c.name)
	if run > 0 {
		dir = filepath.Join(e.out, "memory", fmt.Sprintf("%s-run%d", c.name, run+1))
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig:       ampsim.NetworkConfig{InitialBlocks: c.blocks, TxPerBlock: c.txPerBlock, LogsPerTx: -1},
		KeepAlive:           ampsim.KeepAliveOff,
		ReplayBlocks:        64,
		MaxMicrobatchBlocks: uint64(c.microbatch),
	})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	head, _ := sim.Head()
	perStream, err := sim.Primary().ExpectedRows(ampsim.TableTransactions, 0, head)
	require.NoError(t, err)

	rs := testenv.StartRedisServer(t)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	t.Cleanup(reg.Close)
	var br broker
	if *flagMemBroker == "kfake" && c.streams > 1 {
		// Keeping the records: a stream that restarts (a registry call
		// timed out on a loaded machine) reads the shared control topic
		// back, and kfake -blackhole would leave it waiting for
		// kafka.read_timeout (startKfakeStoring).
		br = startKfakeStoring(t, e, dir)
	} else {
		br = startBroker(t, e, perfConfig{broker: *flagMemBroker, partitions: 1}, dir)
	}

	name := fmt.Sprintf("mem-%d", time.Now().UnixNano()%1_000_000)
	var streams strings.Builder
	for i := range c.streams {
		fmt.Fprintf(&streams, "  - id: m%03d\n    sql: \"SELECT * FROM eth_rpc.transactions SETTINGS stream = true\"\n    topic: %s.m%03d\n    head_poll_interval: -1s\n", i, name, i)
		if c.workers > 0 {
			fmt.Fprintf(&streams, "    backfill:\n      enabled: true\n      workers: %d\n", c.workers)
		}
	}
	httpAddr := freeAddr(t)
	cfg := fmt.Sprintf(`amp:
  addr: %s
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
%s`, sim.Addr(), br.addr, name, name, kafkaLines(*flagMemKafka), reg.URL, rs.Addr(), name, httpAddr, streams.String())
	cfgPath := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))

	logPath := filepath.Join(dir, "bridge.log")
	start := time.Now()
	cmd := exec.CommandContext(context.Background(), e.bridge, "run", "-c", cfgPath)
	cmd.Env = bridgetest.Env()
	if *flagMemLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+*flagMemLimit)
	}
	proc, err := testenv.StartProcess(cmd, logPath)
	require.NoError(t, err)
	t.Cleanup(proc.Kill9)
	pid := cmd.Process.Pid

	// Done when every stream has committed the head block.
	metrics := "http://" + httpAddr + "/metrics"
	deadline := time.Now().Add(*flagMemTimeout)
	var peak, profiled float64
	for {
		require.False(t, proc.Exited(), "bridge exited (%v); log tail:\n%s", proc.Err(), testenv.Tail(logPath, 40))
		peak = max(peak, rssMiB(pid))
		if peak > 128 && peak > profiled*1.25 {
			// The heap near the peak (the one at the end may have shrunk).
			profiled = peak
			if err := saveURL(t.Context(), "http://"+httpAddr+"/debug/pprof/heap", filepath.Join(dir, "heap-peak.pprof")); err != nil {
				t.Logf("heap profile: %v", err)
			}
		}
		if n, err := streamsAt(t.Context(), metrics, head); err == nil && n == c.streams {
			break
		}
		require.True(t, time.Now().Before(deadline), "%s: not every stream committed block %d within %s; log tail:\n%s",
			c.name, head, *flagMemTimeout, testenv.Tail(logPath, 20))
		time.Sleep(200 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	peak = max(peak, rssMiB(pid))
	ms, err := scrape(t.Context(), metrics)
	require.NoError(t, err)
	want := float64(perStream * c.streams)
	require.GreaterOrEqual(t, ms["amp_bridge_records_written_total"], want,
		"the bridge's producers wrote fewer records than the chain's rows")
	load := loadAvg()
	limit := ms["go_gc_gomemlimit_bytes"] / (1 << 20)
	if limit > 1<<40 {
		limit = 0 // math.MaxInt64: none
	}
	// Where the memory went: the heap at the end (go tool pprof -sample_index=inuse_space).
	if err := saveURL(t.Context(), "http://"+httpAddr+"/debug/pprof/heap?gc=1", filepath.Join(dir, "heap.pprof")); err != nil {
		t.Logf("heap profile: %v", err)
	}
	require.Zero(t, proc.Term(30*time.Second), "bridge exit code; log tail:\n%s", testenv.Tail(logPath, 20))
	return memResult{Name: c.name, PeakRSSMiB: peak, GoalMiB: memGoalMiB, Blocks: c.blocks, TxPerBlock: c.txPerBlock,
		MicrobatchBlocks: c.microbatch, Streams: c.streams, BackfillWorkers: c.workers, Rows: int64(want), Seconds: secs,
		Broker: *flagMemBroker, Delivery: "exactly-once", GOMEMLIMIT: *flagMemLimit, MemoryLimitMiB: limit, Load: load, Bridge: e.bridge}
}

// streamsAt returns how many streams' amp_bridge_committed_block at the
// metrics url has reached block.
func streamsAt(ctx context.Context, url string, block uint64) (int, error) {
	lines, err := scrapeLines(ctx, url, "amp_bridge_committed_block{")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, l := range lines {
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err == nil && v >= float64(block) {
			n++
		}
	}
	return n, nil
}

// scrapeLines returns the lines of the metrics at url that start with
// prefix.
func scrapeLines(ctx context.Context, url, prefix string) ([]string, error) {
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
	var out []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, prefix) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out, nil
}

// kafkaLines is extra (-perf.memory-kafka, -perf.kafka: lines separated
// by ';') as lines of the bridge's kafka section.
func kafkaLines(extra string) string {
	var sb strings.Builder
	for l := range strings.SplitSeq(extra, ";") {
		if l = strings.TrimSpace(l); l != "" {
			sb.WriteString("  " + l + "\n")
		}
	}
	return sb.String()
}
