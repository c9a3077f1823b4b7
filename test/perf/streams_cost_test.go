package perf

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
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
	flagStreamsCost  = flag.Bool("perf.streams-cost", false, "run TestStreamsCost (minutes; needs redis-server)")
	flagStreamCounts = flag.String("perf.stream-counts", "1,10,100", "comma-separated numbers of streams in one bridge process for TestStreamsCost")
	flagIdle         = flag.Duration("perf.idle", 30*time.Second, "TestStreamsCost: the idle window over which CPU is measured")
	flagStreamsKafka = flag.String("perf.streams-kafka", "", "extra lines of the bridge's kafka section in TestStreamsCost, e.g. 'batch_max_bytes: 256KiB' (-perf.gomemlimit applies too)")
	flagBusyBlocks   = flag.Int("perf.busy-blocks", 300, "TestStreamsCost: blocks mined at once for the busy phase (fairness) of 100 streams, at 20 tx per block, sent in microbatches of 10 blocks; a process of n streams gets 100/n times as many (busyBlocks)")
)

// streamsCost is one process's figures in TestStreamsCost's JSON result.
type streamsCost struct {
	Streams int `json:"streams"`
	// StartSeconds is from the process start to every stream having
	// committed the head.
	StartSeconds float64 `json:"start_seconds"`
	// RSSMiB is the resident set (VmRSS) at the end of the idle window,
	// PeakRSSMiB the peak (VmHWM) since start.
	RSSMiB     float64 `json:"rss_mib"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// SettledRSSMiB is the resident set once the runtime has collected
	// twice more (what an idle process reaches after its periodic GCs)
	// and had settleAfterGC to give freed memory back: RSSMiB still holds
	// what the catch-up left behind (franz-go's pooled request buffers,
	// garbage not yet collected, because an idle process allocates too
	// little to start a GC).
	SettledRSSMiB float64 `json:"settled_rss_mib"`
	// IdleCPUCores is the process's CPU over the idle window, in cores.
	IdleCPUCores float64 `json:"idle_cpu_cores"`
	// Goroutines and Threads at the end of the idle window.
	Goroutines float64 `json:"goroutines"`
	Threads    float64 `json:"threads"`
	// BusySeconds is how long all streams took to commit the blocks of the
	// busy phase. FairMinMax is the smallest over the largest per-stream
	// rate, Jain Jain's fairness index of the rates (1 is perfectly fair,
	// 1/n is one stream at a time): a stream's rate is the blocks it had
	// committed when the first stream had committed all of them, over that
	// time. Until then every stream had blocks waiting, so the rates are
	// how the bridge shared itself among busy streams.
	BusySeconds float64 `json:"busy_seconds"`
	FairMinMax  float64 `json:"fair_min_max"`
	Jain        float64 `json:"jain"`
	// BusyBlocks is how many blocks the busy phase mined (busyBlocks).
	BusyBlocks int `json:"busy_blocks"`
	// BusyPeakRSSMiB is the process's peak RSS (VmHWM) after the busy
	// phase: what a memory limit must hold for these streams at work.
	BusyPeakRSSMiB float64 `json:"busy_peak_rss_mib,omitempty"`
}

// streamsCostResult is the JSON TestStreamsCost writes to
// -perf.out/streams_cost.json.
type streamsCostResult struct {
	Date    string        `json:"date"`
	Load    string        `json:"load"`
	Broker  string        `json:"broker"`
	Runs    []streamsCost `json:"runs"`
	PerIdle struct {
		// RSSMiB and CPUPercentCore are the slopes between the smallest and
		// the largest process: what one more idle stream costs.
		RSSMiB         float64 `json:"rss_mib"`
		CPUPercentCore float64 `json:"cpu_percent_core"`
	} `json:"per_idle_stream"`
}

// TestStreamsCost measures what a stream costs in one bridge process
// (issue #13 item 4): for each of -perf.stream-counts it runs the bridge
// binary with that many streams (each its own query, topic and
// transactional producer) against the simulator, kfake in its own process
// and a private redis-server; waits until every stream has committed the
// head; measures RSS, goroutines and CPU over an idle window of -perf.idle;
// then mines -perf.busy-blocks blocks at once and reports how evenly the
// streams published them. It writes streams_cost.json into -perf.out, with
// the per-stream slopes between the smallest and the largest process.
func TestStreamsCost(t *testing.T) {
	if !*flagStreamsCost {
		t.Skip("stream cost harness: run with -perf.streams-cost")
	}
	var counts []int
	for s := range strings.SplitSeq(*flagStreamCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		require.NoError(t, err, "-perf.stream-counts %q: want numbers such as 1,10,100", *flagStreamCounts)
		require.Positive(t, n, "-perf.stream-counts: every count must be at least 1")
		counts = append(counts, n)
	}
	e := &env{out: *flagOut}
	if e.out == "" {
		e.out = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(e.out, 0o755))
	e.bridge = *flagBridge
	if e.bridge == "" {
		e.bridge = bridgetest.Build(t, false)
	}
	e.devstack = buildDevstack(t)
	res := streamsCostResult{Date: time.Now().UTC().Format(time.RFC3339), Broker: "kfake (separate process, records kept)"}
	for _, n := range counts {
		t.Run(fmt.Sprintf("streams_%d", n), func(t *testing.T) {
			c := runStreamsCost(t, e, n)
			t.Logf("%d streams: ready in %.1f s; RSS %.1f MiB (peak %.1f, settled %.1f); idle CPU %.2f%% of a core; %0.f goroutines, %.0f threads; busy: %d blocks each in %.1f s, peak RSS %.1f MiB, fairness min/max %.2f, Jain %.3f",
				n, c.StartSeconds, c.RSSMiB, c.PeakRSSMiB, c.SettledRSSMiB, 100*c.IdleCPUCores, c.Goroutines, c.Threads, c.BusyBlocks, c.BusySeconds, c.BusyPeakRSSMiB, c.FairMinMax, c.Jain)
			res.Runs = append(res.Runs, c)
		})
	}
	res.Load = loadAvg()
	if len(res.Runs) >= 2 {
		lo, hi := res.Runs[0], res.Runs[len(res.Runs)-1]
		if d := float64(hi.Streams - lo.Streams); d > 0 {
			res.PerIdle.RSSMiB = (hi.RSSMiB - lo.RSSMiB) / d
			res.PerIdle.CPUPercentCore = 100 * (hi.IdleCPUCores - lo.IdleCPUCores) / d
		}
		t.Logf("per idle stream (slope %d → %d streams): %.2f MiB RSS, %.3f%% of a core; load %s",
			lo.Streams, hi.Streams, res.PerIdle.RSSMiB, res.PerIdle.CPUPercentCore, res.Load)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	require.NoError(t, err)
	path := filepath.Join(e.out, "streams_cost.json")
	require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	t.Logf("result: %s", path)
}

// settleAfterGC is how long TestStreamsCost gives the runtime's background
// scavenger, after the two collections it asks for, before it reads the
// settled RSS.
const settleAfterGC = 10 * time.Second

// busyMicrobatchBlocks is the simulator's microbatch in TestStreamsCost.
const busyMicrobatchBlocks = 10

func runStreamsCost(t *testing.T, e *env, n int) streamsCost {
	dir := filepath.Join(e.out, fmt.Sprintf("streams_%d", n))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	const txPerBlock = 20
	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 50, TxPerBlock: txPerBlock, LogsPerTx: -1},
		// Microbatches of 10 blocks: a stream's progress through the busy
		// phase shows in its committed block, transaction by transaction.
		MaxMicrobatchBlocks: busyMicrobatchBlocks,
	})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	rs := testenv.StartRedisServer(t)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	t.Cleanup(reg.Close)
	br := startKfakeStoring(t, e, dir)

	name := fmt.Sprintf("cost%d-%d", n, time.Now().UnixNano()%1_000_000)
	var streams strings.Builder
	for i := range n {
		fmt.Fprintf(&streams, "  - id: s%03d\n    sql: %q\n    topic: %s.s%03d\n    partitions: 1\n",
			i, "SELECT "+txColumns+" FROM eth_rpc.transactions SETTINGS stream = true", name, i)
	}
	httpAddr := freeAddr(t)
	cfg := fmt.Sprintf(`amp:
  addr: %s
kafka:
  brokers: [%s]
  transactional_id_prefix: %s
  control_topic: %s.control
  replication_factor: 1
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
%s`, sim.Addr(), br.addr, name, name, kafkaLines(*flagStreamsKafka), reg.URL, rs.Addr(), name, httpAddr, streams.String())
	cfgPath := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	logPath := filepath.Join(dir, "bridge.log")
	cmd := exec.CommandContext(context.Background(), e.bridge, "run", "-c", cfgPath)
	cmd.Env = bridgetest.Env()
	if *flagMemLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+*flagMemLimit)
	}
	start := time.Now()
	proc, err := testenv.StartProcess(cmd, logPath)
	require.NoError(t, err)
	t.Cleanup(proc.Kill9)
	pid := cmd.Process.Pid
	metrics := "http://" + httpAddr + "/metrics"
	ctx := t.Context()

	// caughtUp waits until every stream's committed_block is at least
	// head and returns, per stream, when it got there, and every stream's
	// committed block when the first got there.
	// With heapAt, a heap profile is saved there at every new peak of RSS
	// (25% above the last profiled one).
	caughtUp := func(head uint64, limit time.Duration, heapAt string) (map[string]time.Duration, map[string]float64) {
		t.Helper()
		t0 := time.Now()
		deadline := t0.Add(limit)
		at := map[string]time.Duration{}
		var first map[string]float64
		profiled := 0.0
		for {
			require.False(t, proc.Exited(), "bridge exited (%v); log tail:\n%s", proc.Err(), testenv.Tail(logPath, 40))
			if rss := procStatusMiB(pid, "VmRSS:"); heapAt != "" && rss > max(128, profiled*1.25) {
				profiled = rss
				if err := saveURL(ctx, "http://"+httpAddr+"/debug/pprof/heap", heapAt); err != nil {
					t.Logf("heap profile: %v", err)
				}
			}
			if time.Now().After(deadline) {
				ms, _ := scrapeByStream(ctx, metrics)
				var behind []string
				for i := range n {
					id := fmt.Sprintf("s%03d", i)
					if _, ok := at[id]; !ok {
						b, known := ms["amp_bridge_committed_block"][id]
						behind = append(behind, fmt.Sprintf("%s at %v (known %v, up %v)", id, b, known, ms["amp_bridge_stream_up"][id]))
					}
				}
				gpath := filepath.Join(dir, "goroutines.txt")
				if err := saveURL(ctx, "http://"+httpAddr+"/debug/pprof/goroutine?debug=2", gpath); err != nil {
					t.Logf("goroutine dump: %v", err)
				}
				require.Fail(t, "streams behind", "only %d of the %d streams committed block %d within %s; behind: %s; goroutines in %s; log tail:\n%s",
					len(at), n, head, limit, strings.Join(behind, ", "), gpath, testenv.Tail(logPath, 20))
			}
			if ms, err := scrapeByStream(ctx, metrics); err == nil {
				for id, b := range ms["amp_bridge_committed_block"] {
					if _, ok := at[id]; !ok && uint64(b) >= head {
						at[id] = time.Since(t0)
					}
				}
				if first == nil && len(at) > 0 {
					first = maps.Clone(ms["amp_bridge_committed_block"])
				}
				if len(at) == n {
					return at, first
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	head, _ := sim.Head()
	caughtUp(head, 5*time.Minute, "")
	from := head
	c := streamsCost{Streams: n, StartSeconds: time.Since(start).Seconds()}

	// Idle: let the start-up garbage be collected, then measure.
	time.Sleep(5 * time.Second)
	cpu0, err := cpuSeconds(strconv.Itoa(pid))
	require.NoError(t, err)
	t0 := time.Now()
	time.Sleep(*flagIdle)
	cpu1, err := cpuSeconds(strconv.Itoa(pid))
	require.NoError(t, err)
	c.IdleCPUCores = (cpu1 - cpu0) / time.Since(t0).Seconds()
	c.RSSMiB, c.PeakRSSMiB = procStatusMiB(pid, "VmRSS:"), procStatusMiB(pid, "VmHWM:")
	c.Threads = procStatusMiB(pid, "Threads:") * 1024 // a count, not kB
	ms, err := scrape(ctx, metrics)
	require.NoError(t, err)
	c.Goroutines = ms["go_goroutines"]
	if err := saveURL(ctx, "http://"+httpAddr+"/debug/pprof/heap?gc=1", filepath.Join(dir, "heap.pprof")); err != nil {
		t.Logf("heap profile: %v", err)
	}
	// The second collection frees what sync.Pools still held after the
	// first (their victim caches).
	if err := saveURL(ctx, "http://"+httpAddr+"/debug/pprof/heap?gc=1", filepath.Join(dir, "heap-settled.pprof")); err != nil {
		t.Logf("heap profile: %v", err)
	}
	time.Sleep(settleAfterGC)
	c.SettledRSSMiB = procStatusMiB(pid, "VmRSS:")

	// Busy: every stream gets the same new blocks at once. A stream's rate
	// is what it committed while every stream still had blocks waiting:
	// until the first stream had committed them all.
	c.BusyBlocks = busyBlocks(*flagBusyBlocks, n)
	sim.Mine(c.BusyBlocks)
	head, _ = sim.Head()
	at, first := caughtUp(head, 10*time.Minute, filepath.Join(dir, "heap-busy.pprof"))
	firstAt := time.Duration(math.MaxInt64)
	for _, d := range at {
		c.BusySeconds = max(c.BusySeconds, d.Seconds())
		firstAt = min(firstAt, d)
	}
	var rates []float64
	for i := range n {
		b := first[fmt.Sprintf("s%03d", i)] // 0: none committed yet
		rates = append(rates, max(0, b-float64(from))/firstAt.Seconds())
	}
	c.FairMinMax, c.Jain = fairness(rates)
	c.BusyPeakRSSMiB = procStatusMiB(pid, "VmHWM:")
	require.Zero(t, proc.Term(60*time.Second), "bridge exit code; log tail:\n%s", testenv.Tail(logPath, 20))
	return c
}

// busyBlocks is how many blocks the busy phase of a process of n streams
// mines: per100 for 100 streams, and as many rows in all for fewer (ten
// times as many blocks for 10), so that the phase lasts seconds whatever
// n: with 300 blocks, 10 streams were done in well under a second, a
// stream's rate was whether its last commits had landed yet when the
// first stream's had, and Jain's index swung from run to run (0.51 once
// under make bench's load; 0.96 to 1.00 in three runs on an idle machine,
// against 0.99 in each of two with 3,000 blocks). One stream has no
// fairness to measure and gets per100.
func busyBlocks(per100, n int) int {
	if n < 2 || n >= 100 {
		return per100
	}
	return per100 * 100 / n
}

// fairness returns min/max and Jain's index (Σx)²/(n·Σx²) of xs.
func fairness(xs []float64) (minMax, jain float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if hi > 0 {
		minMax = lo / hi
	}
	if sq > 0 {
		jain = sum * sum / (float64(len(xs)) * sq)
	}
	return minMax, jain
}

// procStatusMiB returns a kB field of /proc/pid/status in MiB, NaN if
// unknown.
func procStatusMiB(pid int, field string) float64 {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return math.NaN()
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return f / 1024
			}
		}
	}
	return math.NaN()
}

// scrapeByStream returns, for each metric with a stream label, the sum of
// its series per stream.
func scrapeByStream(ctx context.Context, url string) (map[string]map[string]float64, error) {
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
	out := map[string]map[string]float64{}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.IndexByte(line, '{')
		j := strings.Index(line, `stream="`)
		if i < 0 || j < 0 {
			continue
		}
		id := line[j+len(`stream="`):]
		id = id[:strings.IndexByte(id, '"')]
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		m := out[line[:i]]
		if m == nil {
			m = map[string]float64{}
			out[line[:i]] = m
		}
		m[id] += v
	}
	return out, nil
}

// saveURL saves the body of a GET of url to path.
func saveURL(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("requesting %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("requesting %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("saving %s: %w", url, err)
	}
	return nil
}

// startKfakeStoring starts kfake in its own process, keeping records: the
// streams share the control topic, and a stream that starts after others
// committed reads it back (with -blackhole its offsets advance but the
// records are gone, and the read waits until kafka.read_timeout).
func startKfakeStoring(t *testing.T, e *env, dir string) broker {
	t.Helper()
	addrFile := filepath.Join(dir, "kfake.addr")
	if err := os.Remove(addrFile); err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	cmd := exec.CommandContext(context.Background(), e.devstack, "kfake", "-addr-file", addrFile)
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
