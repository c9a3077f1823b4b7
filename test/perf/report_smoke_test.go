package perf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBenchReportSmoke runs make bench's report generator on parts shaped
// as make bench writes them (a second, in make test), so that it cannot
// rot: every figure is read, its ratio computed the right way round, and
// a missing part is named in the report.
func TestBenchReportSmoke(t *testing.T) {
	dir := t.TempDir()
	encode := `goos: linux
load: 1.00 2.00 3.00
BenchmarkEncode/hotpath         	     100	  1 ns/op	 0 allocs/row	 200.0 cpu-ns/row	 5000000 rows/cpu-s
BenchmarkEncode/hotpath         	     100	  1 ns/op	 0 allocs/row	 210.0 cpu-ns/row	 4000000 rows/cpu-s
BenchmarkEncode/hotpath         	     100	  1 ns/op	 0 allocs/row	 190.0 cpu-ns/row	 6000000 rows/cpu-s
BenchmarkEncode/hamba-structs   	     100	  1 ns/op	 29 allocs/row	 2000 cpu-ns/row	 500000 rows/cpu-s
BenchmarkEncode/goavro-maps-2   	     100	  1 ns/op	 96 allocs/row	 7000 cpu-ns/row	 140000 rows/cpu-s
BenchmarkEncode/hotpath-15cols  	     100	  1 ns/op	 0 allocs/row	 100 cpu-ns/row	 10000000 rows/cpu-s
BenchmarkEncode/hamba-structs-15cols  	     100	  1 ns/op	 11 allocs/row	 760 cpu-ns/row	 1300000 rows/cpu-s
load: 2.00 2.00 3.00
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "encode.txt"), []byte(encode), 0o644))
	recover := `BenchmarkRecoverRedisLess/kafka/events=100000-2         	      20	  11000000 ns/op	 669 records_read/op	 5000000 peak_rss_delta_bytes
BenchmarkRecoverRedisLess/kafka/events=100000/full-read-2 	      20	 220000000 ns/op	 100000 records_read/op	 300000000 peak_rss_delta_bytes
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "recover.txt"), []byte(recover), 0o644))
	readback := `BenchmarkReadBack/reader-2         	     100	   8000000 ns/op	       360 ns/record	13000000 B/op	  131115 allocs/op
BenchmarkReadBack/franz-go-decode-2 	     100	   6000000 ns/op	       300 ns/record	10000000 B/op	  131114 allocs/op
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "readback.txt"), []byte(readback), 0o644))
	bridge := e2eResult{Config: "kafka/p1", Partitions: 1, Contender: "bridge", Method: "m", Broker: "Apache Kafka x",
		RowsPerSec: 400_000, ClientUsPerRow: 1.6, BrokerUsPerRow: 1.3, BytesPerRow: 600, Load: []string{"3 3 3"}}
	kcat := e2eResult{Config: "kafka/p1", Partitions: 1, Contender: "kcat-idempotent", Method: "kcat", RowsPerSec: 320_000, Load: []string{"4 4 4"}}
	py := e2eResult{Config: "kafka/p1", Partitions: 1, Contender: "python-loader", Method: "py", RowsPerSec: 2_000, BytesPerRow: 1_200}
	franz6 := e2eResult{Config: "kafka/p6", Partitions: 6, Contender: "franz-go-txn", Method: "franz", RowsPerSec: 800_000}
	require.NoError(t, writeJSON(filepath.Join(dir, "e2e.json"), e2eFile{Results: []e2eResult{bridge, kcat, py, franz6}, Runs: 3, Run: "30s", Warmup: "60s"}))
	require.NoError(t, writeJSON(filepath.Join(dir, "star.json"), e2eFile{Runs: 3, Run: "20s", Warmup: "20s", Results: []e2eResult{
		{Config: "kfake/p1", Partitions: 1, Contender: "bridge", Method: "narrow", Broker: "kfake", RowsPerSec: 700_000, BytesPerRow: 600,
			ClientUsPerRow: 1.5, BrokerUsPerRow: 1.0, SimUsPerRow: 0.5},
		{Config: "kfake/p1/star", Partitions: 1, Contender: "bridge", Method: "star", Broker: "kfake", RowsPerSec: 480_000, BytesPerRow: 700,
			ClientUsPerRow: 2.0, BrokerUsPerRow: 1.2, SimUsPerRow: 0.8}}}))
	require.NoError(t, writeJSON(filepath.Join(dir, "latency.json"), latencyFile{Results: []latencyResult{
		{Name: "reorg-depth-10", Samples: 100, P50Ms: 50, P99Ms: 80, OwnP50Ms: 40, OwnP99Ms: 64, Method: "r",
			Peer: &latencyPeer{Method: "bare", P50Ms: 30, P99Ms: 48, Records: 3750, Bytes: 2.6e6}},
		{Name: "reorg-depth-128", Samples: 20, P50Ms: 300, P99Ms: 360, Method: "r128", Peer: &latencyPeer{Method: "bare128", P50Ms: 240, P99Ms: 300}},
		{Name: "restart-kill9", Samples: 10, P50Ms: 2500, P99Ms: 4000, Method: "k"}}}))

	require.NoError(t, writeJSON(filepath.Join(dir, "takeover.json"), takeoverFile{Members: 3, Streams: 4, SessionTimeout: "6s", HeartbeatInterval: "500ms",
		BlockInterval: "100ms", Results: []takeoverResult{
			{Name: "kill9-takeover", Samples: 20, P50Ms: 7000, MaxMs: 8000, AllMs: []float64{7000, 8000}, Method: "kill"},
			{Name: "rolling-restart-pause", Samples: 4, P50Ms: 500, MaxMs: 1500, PerStreamMaxMs: map[string]float64{"s0": 1500}, Method: "roll"},
			{Name: "franz-go-group-failover", Samples: 20, P50Ms: 6300, MaxMs: 6400, Method: "floor"}}}))

	require.NoError(t, os.MkdirAll(filepath.Join(dir, "memory"), 0o755))
	require.NoError(t, writeJSON(filepath.Join(dir, "memory", "memory.json"), []memResult{
		{Name: "catchup-3000-blocks-mb1000", PeakRSSMiB: 128, GoalMiB: 256, Blocks: 3000, TxPerBlock: 300, MicrobatchBlocks: 1000, Streams: 1, RunsMiB: []float64{120, 128, 140}, Broker: "kfake", Delivery: "exactly-once"},
		{Name: "slope-mb100", PeakRSSMiB: 100, GoalMiB: 256, Blocks: 3000, MicrobatchBlocks: 100, Streams: 1, Broker: "kfake"},
		{Name: "slope-mb3000", PeakRSSMiB: 120, GoalMiB: 256, Blocks: 3000, MicrobatchBlocks: 3000, Streams: 1, Broker: "kfake"},
		{Name: "streams-100", PeakRSSMiB: 320, GoalMiB: 256, Blocks: 200, TxPerBlock: 20, Streams: 100, Broker: "kfake"}}))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "streams_cost"), 0o755))
	require.NoError(t, writeJSON(filepath.Join(dir, "streams_cost", "streams_cost.json"), streamsCostResult{Load: "5 5 5", Broker: "kfake", Runs: []streamsCost{
		{Streams: 100, RSSMiB: 340, IdleCPUCores: 0.06, BusySeconds: 13, FairMinMax: 0.45, Jain: 0.91, BusyPeakRSSMiB: 250},
		{Streams: 1, RSSMiB: 43, SettledRSSMiB: 40, IdleCPUCores: 0.001},
		{Streams: 10, RSSMiB: 70, SettledRSSMiB: 58, IdleCPUCores: 0.004, BusySeconds: 2, FairMinMax: 0.8, Jain: 0.99}}}))

	rep, err := buildReport(t.Context(), dir, "test machine", time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	byName := map[string]figure{}
	for _, f := range rep.Figures {
		byName[f.Name+" / "+shortPeer(f.Peer)] = f
		assert.Equal(t, "test machine", f.Machine)
		assert.Equal(t, "2026-12-01", f.Date)
	}
	enc := byName["encoder hot path, 27 columns / hamba/avro v2 from Go structs"]
	assert.InDelta(t, 10.0, enc.Ratio, 1e-9, "median 5M rows/s over hamba's 500k")
	assert.Equal(t, "1.00 2.00 3.00 → 2.00 2.00 3.00", enc.Load)
	assert.InDelta(t, 5e6/140e3, byName["encoder hot path, 27 columns / goavro v2 from maps"].Ratio, 1e-9, "the -2 suffix is dropped")
	assert.InDelta(t, 1.25, byName["end to end, exactly-once, 1 partition(s) / kcat-idempotent"].Ratio, 1e-9)
	assert.InDelta(t, 200.0, byName["end to end, exactly-once, 1 partition(s) / python-loader"].Ratio, 1e-9)
	assert.InDelta(t, 2.0, byName["bytes per row on the wire (key, value, headers) / python-loader"].Ratio, 1e-9, "peer/ours for sizes")
	assert.InDelta(t, 0.5, byName["reorg-depth-10 p50 (100 samples) / performance.md target"].Ratio, 1e-9, "25 ms target / 50 ms")
	beside := "franz-go raw transactional producer, the same 3,750 records (2.60 MB) in one transaction"
	assert.InDelta(t, 30.0/50, byName["reorg-depth-10 p50, beside a bare transaction of the same records (100 samples) / "+beside].Ratio, 1e-9, "a time: peer/ours")
	assert.InDelta(t, 48.0/80, byName["reorg-depth-10 p99, beside a bare transaction of the same records (100 samples) / "+beside].Ratio, 1e-9)
	own := byName["reorg-depth-10 p50 without waiting for Amp, beside a bare transaction of the same records (100 samples) / "+beside]
	assert.InDelta(t, 40.0, own.Ours, 1e-9, "the bridge's own part")
	assert.InDelta(t, 30.0/40, own.Ratio, 1e-9)
	assert.InDelta(t, 300.0/360, byName["reorg-depth-128 p99, beside a bare transaction of the same records (20 samples) / franz-go raw transactional producer, the same 0 records (0 MB) in one transaction"].Ratio, 1e-9)
	_, ok := byName["reorg-depth-128 p50 without waiting for Amp, beside a bare transaction of the same records (20 samples) / franz-go raw transactional producer, the same 0 records (0 MB) in one transaction"]
	assert.False(t, ok, "no own part without the wait for Amp measured")
	assert.InDelta(t, 20.0, byName["Redis-less start over a control topic of 100,000 watermark events / reading the whole control topic (the old way)"].Ratio, 1e-9)
	rb := byName["decoding a depth-128 reorg's read back (21,760 records of ~700 B in one fetch response) / franz-go decoding the same response into its own records, nothing more"]
	assert.InDelta(t, 8.0, rb.Ours, 1e-9, "ms: 8,000,000 ns/op")
	assert.InDelta(t, 6.0/8, rb.Ratio, 1e-9, "a time: peer/ours")
	assert.InDelta(t, 13e6, rb.Extra["ours_bytes_per_op"], 1e-9)
	kill := byName["kill -9 of a stream's owner to the first new committed record on the new owner, p50 (20 kills) / bare franz-go group failover (the protocol's floor)"]
	assert.InDelta(t, 6300.0/7000, kill.Ratio, 1e-9, "a time: peer/ours")
	assert.InDelta(t, 7000.0/6300, kill.Extra["bridge_over_peer"], 1e-9)
	assert.InDelta(t, 10000.0/8000, byName["kill -9 takeover, max (20 kills), against the goal / issue #14 goal with a 6s session timeout"].Ratio, 1e-9)
	roll := byName["longest pause in publishing of a stream during a rolling restart of 3 members / the session timeout (the bound)"]
	assert.InDelta(t, 4.0, roll.Ratio, 1e-9, "6 s session timeout / 1.5 s pause")
	assert.InDelta(t, 1500.0, roll.Extra["stream_s0_max_ms"], 1e-9)
	assert.InDelta(t, 0.8, byName["SELECT * (27 columns), exactly-once, 1 partition, rows/s / issue #13 goal"].Ratio, 1e-9, "480k over the 600k goal")
	perByte := byName["SELECT * against the 15-column query, MB/s of records (goal: at least 0.9×) / the 15-column query, same run"]
	assert.InDelta(t, 336.0, perByte.Ours, 1e-9, "480k rows/s × 700 B")
	assert.InDelta(t, 0.8, perByte.Ratio, 1e-9, "336 MB/s over 420")
	perCPU := byName["SELECT * against the 15-column query, MB of records per second of the bridge's CPU / the 15-column query, same run"]
	assert.InDelta(t, 350.0, perCPU.Ours, 1e-9, "700 B per 2.0 µs of the bridge's CPU")
	assert.InDelta(t, 350.0/400, perCPU.Ratio, 1e-9, "over 600 B per 1.5 µs")
	assert.Contains(t, perCPU.Method, "SELECT * 2.00 / 1.20 / 0.80, the 15-column query 1.50 / 1.00 / 0.50")
	_, ok = byName["end to end, exactly-once, 6 partition(s) / franz-go-txn"]
	assert.False(t, ok, "a peer without a bridge figure on its configuration has no ratio")
	assert.Contains(t, strings.Join(rep.Missing, ";"), "BenchmarkEncode/goavro-maps-15cols", "a missing peer is named")
	assert.NotContains(t, strings.Join(rep.Missing, ";"), "memory.json")
	assert.NotContains(t, strings.Join(rep.Missing, ";"), "streams_cost.json")
	catchup := byName["peak RSS: catch-up of 3000 blocks (~300 transactions each) in 1000-block microbatches, SELECT * / issue #13 goal"]
	assert.InDelta(t, 2.0, catchup.Ratio, 1e-9, "256 MiB goal / 128 MiB: peer/ours for sizes")
	assert.Contains(t, catchup.Method, "the median of 3 runs (120, 128, 140 MiB)")
	assert.InDelta(t, 256.0/320, byName["peak RSS: 100 streams in one process (200 blocks × 20 transactions each) / issue #13 goal"].Ratio, 1e-9)
	slope := byName["peak RSS over microbatches of 100 / 300 / 1000 / 3000 blocks: the largest over the smallest / issue #13 goal (flat within 10%)"]
	assert.InDelta(t, 1.2, slope.Ours, 1e-9, "120 / 100")
	assert.InDelta(t, 1.1/1.2, slope.Ratio, 1e-9)
	rss := byName["RSS per idle stream, from 1 to 100 streams / issue #13 goal"]
	assert.InDelta(t, 3.0, rss.Ours, 1e-9, "(340 - 43) / 99, the runs sorted by stream count")
	assert.InDelta(t, 4.0/3, rss.Ratio, 1e-9)
	assert.InDelta(t, 3.0, byName["RSS per idle stream, from 1 to 10 streams / issue #13 goal"].Ours, 1e-9, "(70 - 43) / 9")
	settled := byName["RSS per idle stream, settled, from 1 to 10 streams / issue #13 goal"]
	assert.InDelta(t, 2.0, settled.Ours, 1e-9, "(58 - 40) / 9")
	assert.InDelta(t, 2.0, settled.Ratio, 1e-9)
	assert.Contains(t, settled.Method, "(40.0 MiB with 1, 58.0 MiB with 10)")
	_, ok = byName["RSS per idle stream, settled, from 1 to 100 streams / issue #13 goal"]
	assert.False(t, ok, "a run without the settled RSS has no such figure")
	cpu := byName["idle CPU per stream, from 1 to 100 streams / issue #13 goal"]
	assert.InDelta(t, 100*0.059/99, cpu.Ours, 1e-9, "percent of a core")
	assert.InDelta(t, 0.5/(100*0.059/99), cpu.Ratio, 1e-9)
	assert.InDelta(t, 0.45, byName["fairness of 100 busy streams: the slowest stream's rate over the fastest's / perfectly fair"].Ratio, 1e-9)
	assert.InDelta(t, 0.99, byName["fairness of 10 busy streams: Jain's index of their rates / perfectly fair"].Ours, 1e-9)
	assert.InDelta(t, 250.0, byName["peak RSS of 100 streams in one process, through the busy phase / "].Ours, 1e-9)
	_, ok = byName["peak RSS of 10 streams in one process, through the busy phase / "]
	assert.False(t, ok, "a run without the figure has none")
	_, ok = byName["fairness of 1 busy streams: Jain's index of their rates / perfectly fair"]
	assert.False(t, ok, "one stream has no fairness")

	md := renderMarkdown(rep)
	for _, want := range []string{"| encoder hot path, 27 columns | 5,000,000 | hamba/avro v2 from Go structs | 500,000 | 10.00× |",
		"| end to end, exactly-once, 1 partition(s) | 400,000 | kcat-idempotent | 320,000 | 1.25× |", "Not measured in this run:",
		"reproduces the Amp Python SDK Kafka loader's loop", "## Memory", "## SELECT *", "## Reorg read back", "No profile in this run.", "## Takeover", "## Cost per stream",
		"| RSS per idle stream, from 1 to 100 streams | 3.00 | issue #13 goal | 4.00 | 1.33× | MiB |",
		"| peak RSS: 100 streams in one process (200 blocks × 20 transactions each) | 320 | issue #13 goal | 256 | 0.80× | MiB peak RSS |",
		"| kill -9 takeover, max (20 kills), against the goal | 8,000 | issue #14 goal with a 6s session timeout | 10,000 | 1.25× |",
		"- **reorg-depth-10, its peer**: bare.", "- **reorg-depth-10**: r.",
		"- **franz-go-group-failover** (p50 6,300 ms, max 6,400 ms over 20): floor.", "- **kill9-takeover** (p50 7,000 ms, max 8,000 ms over 20; each: 7,000, 8,000 ms): kill."} {
		assert.Contains(t, md, want)
	}
}
