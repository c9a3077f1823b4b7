package perf

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// make bench's report: TestBenchReport reads the parts make bench wrote
// into one directory and writes BENCHMARKS.md and BENCHMARKS.json. Parts
// (each optional; a missing one is named in the report, never dropped
// silently):
//
//	encode.txt    go test -bench Encode -benchmem -cpu 1 -count N ./encode/
//	recover.txt   go test -bench RecoverRedisLess/kafka ./internal/pipeline/
//	readback.txt  go test -bench ReadBack -benchmem -count N ./sink/
//	e2e.json      TestThroughput -perf.json (the bridge and its peers)
//	star.json     TestThroughput -perf.json, kfake/p1 and kfake/p1/star
//	latency.json  TestLatency -perf.latency-json
//	takeover.json TestTakeover -perf.takeover-json (cluster mode)
//	memory/memory.json  TestMemory -perf.memory
//	streams_cost/streams_cost.json  TestStreamsCost -perf.streams-cost
var (
	flagReport    = flag.String("perf.report", "", "directory of make bench's parts: write the report (TestBenchReport)")
	flagReportMD  = flag.String("perf.report-md", "", "where TestBenchReport writes the Markdown report (default: DIR/BENCHMARKS.md)")
	flagReportOut = flag.String("perf.report-json", "", "where TestBenchReport writes the machine-readable report (default: DIR/BENCHMARKS.json)")
)

// e2eFile is what -perf.json holds.
type e2eFile struct {
	Results []e2eResult `json:"results"`
	Warmup  string      `json:"warmup"`
	Run     string      `json:"window"`
	Runs    int         `json:"windows"`
	// Rounds is -perf.rounds: Runs windows per configuration and round.
	Rounds     int    `json:"rounds,omitempty"`
	PeerWarmup string `json:"peer_warmup"`
	// BrokerWarmup is -perf.broker-warmup ("0s": none).
	BrokerWarmup string `json:"broker_warmup,omitempty"`
	// Turns is -perf.turns: the bridge's and the peers run again's turns
	// in alternation after the other peers.
	Turns int `json:"turns,omitempty"`
}

// figure is one line of the report: ours beside a peer.
type figure struct {
	Group string  `json:"group"`
	Name  string  `json:"name"`
	Ours  float64 `json:"ours"`
	Unit  string  `json:"unit"`
	Peer  string  `json:"peer,omitempty"`
	// PeerValue is the peer's figure in Unit.
	PeerValue float64 `json:"peer_value,omitempty"`
	// Ratio is how many times better ours is than the peer (> 1: ours is
	// better): ours/peer for rates, peer/ours for times, sizes and
	// allocations.
	Ratio   float64            `json:"ratio,omitempty"`
	Method  string             `json:"method"`
	Load    string             `json:"load_average"`
	Broker  string             `json:"broker"`
	Machine string             `json:"machine"`
	Date    string             `json:"date"`
	Extra   map[string]float64 `json:"extra,omitempty"`
}

// report is BENCHMARKS.json.
type report struct {
	Generated string            `json:"generated"`
	Machine   string            `json:"machine"`
	Commit    string            `json:"commit"`
	Versions  map[string]string `json:"versions"`
	Figures   []figure          `json:"figures"`
	Missing   []string          `json:"missing,omitempty"`
	E2E       *e2eFile          `json:"end_to_end,omitempty"`
	Latency   *latencyFile      `json:"latency,omitempty"`
	Takeover  *takeoverFile     `json:"takeover,omitempty"`
	Memory    json.RawMessage   `json:"memory,omitempty"`
	// StreamsCost is TestStreamsCost's streams_cost.json.
	StreamsCost *streamsCostResult `json:"streams_cost,omitempty"`
	Profile     []string           `json:"bridge_cpu_profile_top,omitempty"`
	ProfileOf   string             `json:"bridge_cpu_profile,omitempty"`
}

// TestBenchReport writes make bench's report from the parts in
// -perf.report. Skipped without it.
func TestBenchReport(t *testing.T) {
	if *flagReport == "" {
		t.Skip("make bench's report: run with -perf.report DIR")
	}
	md, js := *flagReportMD, *flagReportOut
	if md == "" {
		md = filepath.Join(*flagReport, "BENCHMARKS.md")
	}
	if js == "" {
		js = filepath.Join(*flagReport, "BENCHMARKS.json")
	}
	rep, err := buildReport(t.Context(), *flagReport, machine(), time.Now().UTC())
	require.NoError(t, err)
	require.NoError(t, writeJSON(js, rep))
	require.NoError(t, os.WriteFile(md, []byte(renderMarkdown(rep)), 0o644))
	t.Logf("wrote %s and %s (%d figures; missing: %v)", md, js, len(rep.Figures), rep.Missing)
}

// writeJSON writes v indented to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// readJSON reads path into v; errNoResults when it does not exist.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return errNoResults
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	return nil
}

// kafkaVersion is the Apache Kafka version of the brokers testenv starts
// (BRIDGE_TEST_KAFKA_VERSION, or the kafka_2.13 jar in
// BRIDGE_TEST_KAFKA_HOME).
func kafkaVersion() string {
	if v := os.Getenv("BRIDGE_TEST_KAFKA_VERSION"); v != "" {
		return v
	}
	jars, _ := filepath.Glob(filepath.Join(os.Getenv("BRIDGE_TEST_KAFKA_HOME"), "kafka_2.13-*.jar"))
	if len(jars) == 0 {
		return "?"
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jars[0]), "kafka_2.13-"), ".jar")
}

// machine describes this machine: CPU model, cores, memory, kernel.
func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				mem = fmt.Sprintf("%.0f GiB", kb/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%s, %d vCPU, %s RAM, %s/%s, %s", model, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// goBench is the medians of one benchmark's metrics over its -count runs.
type goBench map[string]float64

// parseGoBench reads `go test -bench` output: the median of each metric of
// each benchmark (the -N GOMAXPROCS suffix dropped), and the load average
// lines the Makefile adds ("load: ...").
func parseGoBench(text string) (map[string]goBench, string) {
	all := map[string]map[string][]float64{}
	var load []string
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "load:"); ok {
			load = append(load, strings.TrimSpace(v))
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if all[name] == nil {
			all[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				all[name][f[i+1]] = append(all[name][f[i+1]], v)
			}
		}
	}
	out := map[string]goBench{}
	for name, ms := range all {
		out[name] = goBench{}
		for unit, vs := range ms {
			slices.Sort(vs)
			out[name][unit] = vs[len(vs)/2]
		}
	}
	return out, strings.Join(load, " → ")
}

// buildReport reads the parts in dir.
func buildReport(ctx context.Context, dir, mach string, now time.Time) (*report, error) {
	rep := &report{Generated: now.Format(time.RFC3339), Machine: mach, Commit: gitCommit(ctx), Versions: map[string]string{
		"go": runtime.Version(), "kafka": "Apache Kafka " + kafkaVersion(),
		"kcat": os.Getenv("BRIDGE_BENCH_KCAT_VERSION"), "python": os.Getenv("BRIDGE_TEST_PYTHON_VERSIONS")}}
	date := now.Format("2006-01-02")
	add := func(f figure) {
		f.Machine, f.Date = mach, date
		rep.Figures = append(rep.Figures, f)
	}

	// Encoder.
	if b, err := os.ReadFile(filepath.Join(dir, "encode.txt")); err == nil {
		bs, load := parseGoBench(string(b))
		method := "go test -run '^$' -bench Encode -benchmem -cpu 1 ./encode/ (one goroutine; rows per CPU-second of the process, so the load of the machine " +
			"does not count; medians of -count); Arrow transactions batch (10k rows) to Confluent-framed Debezium Avro envelopes"
		for _, c := range []struct {
			cols              int
			ours, hamba, goav string
		}{{27, "BenchmarkEncode/hotpath", "BenchmarkEncode/hamba-structs", "BenchmarkEncode/goavro-maps"},
			{15, "BenchmarkEncode/hotpath-15cols", "BenchmarkEncode/hamba-structs-15cols", "BenchmarkEncode/goavro-maps-15cols"}} {
			o, ok := bs[c.ours]
			if !ok {
				rep.Missing = append(rep.Missing, c.ours)
				continue
			}
			for _, p := range []struct{ name, key string }{{"hamba/avro v2 from Go structs", c.hamba}, {"goavro v2 from maps", c.goav}} {
				pb, ok := bs[p.key]
				if !ok {
					rep.Missing = append(rep.Missing, p.key)
					continue
				}
				add(figure{Group: "encoder", Name: fmt.Sprintf("encoder hot path, %d columns", c.cols), Unit: "rows/s per core",
					Ours: o["rows/cpu-s"], Peer: p.name, PeerValue: pb["rows/cpu-s"], Ratio: ratio(o["rows/cpu-s"], pb["rows/cpu-s"]),
					Method: method, Load: load, Broker: "none",
					Extra: map[string]float64{"ours_allocs_per_row": o["allocs/row"], "peer_allocs_per_row": pb["allocs/row"],
						"ours_cpu_ns_per_row": o["cpu-ns/row"], "peer_cpu_ns_per_row": pb["cpu-ns/row"]}})
			}
		}
		if ref, ok := bs["BenchmarkEncode/reference-handwritten-15cols"]; ok {
			if o, ok := bs["BenchmarkEncode/hotpath-15cols"]; ok {
				add(figure{Group: "encoder", Name: "encoder hot path, 15 columns, against a hand-written row-only loop (calibration, not a product path)",
					Unit: "rows/s per core", Ours: o["rows/cpu-s"], Peer: "hand-written loop over the same 15 columns", PeerValue: ref["rows/cpu-s"],
					Ratio: ratio(o["rows/cpu-s"], ref["rows/cpu-s"]), Method: method, Load: load, Broker: "none"})
			}
		}
	} else {
		rep.Missing = append(rep.Missing, "encode.txt (encoder benchmarks)")
	}

	// End to end.
	var e2e e2eFile
	switch err := readJSON(filepath.Join(dir, "e2e.json"), &e2e); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "e2e.json (end to end on the real broker)")
	case err != nil:
		return nil, err
	default:
		rep.E2E = &e2e
		bridges := map[int]e2eResult{}
		for _, r := range e2e.Results {
			if r.Contender == "bridge" && strings.HasPrefix(r.Config, "kafka/") && !strings.Contains(r.Config, "backfill") && !strings.Contains(r.Config, "star") {
				bridges[r.Partitions] = r
			}
		}
		for _, r := range e2e.Results {
			b, ok := bridges[r.Partitions]
			if r.Contender == "bridge" || !ok {
				continue
			}
			load := strings.Join(append(slices.Clone(b.Load), r.Load...), ", ")
			extra := map[string]float64{"bridge_cpu_us_per_row": b.ClientUsPerRow, "bridge_broker_cpu_us_per_row": b.BrokerUsPerRow,
				"peer_cpu_us_per_row": r.ClientUsPerRow, "peer_broker_cpu_us_per_row": r.BrokerUsPerRow,
				"bridge_bytes_per_row": b.BytesPerRow, "peer_bytes_per_row": r.BytesPerRow}
			name := fmt.Sprintf("end to end, exactly-once, %d partition(s)", r.Partitions)
			add(figure{Group: "end to end", Name: name, Unit: "rows/s committed", Ours: b.RowsPerSec, Peer: r.Contender + ": " + r.Method,
				PeerValue: r.RowsPerSec, Ratio: ratio(b.RowsPerSec, r.RowsPerSec), Method: b.Method + fmt.Sprintf("; median of %d windows of %s after %s warm-up (peers: %s)",
					e2e.Runs, e2e.Run, e2e.Warmup, e2e.PeerWarmup), Load: load, Broker: b.Broker, Extra: extra})
			if r.Contender == "python-loader" && r.BytesPerRow > 0 && b.BytesPerRow > 0 {
				add(figure{Group: "end to end", Name: "bytes per row on the wire (key, value, headers)", Unit: "B/row", Ours: b.BytesPerRow,
					Peer: r.Contender, PeerValue: r.BytesPerRow, Ratio: r.BytesPerRow / b.BytesPerRow, Method: "the bridge: producer wire bytes per record; the Python loop: mean record size read back",
					Load: load, Broker: b.Broker})
			}
		}
		if b, ok := bridges[1]; ok && b.Profile != "" {
			rep.ProfileOf = relToModule(b.Profile)
			rep.Profile = profileTop(ctx, b.Profile)
		}
	}

	// SELECT * beside the 15-column query, on kfake.
	var star e2eFile
	switch err := readJSON(filepath.Join(dir, "star.json"), &star); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "star.json (SELECT * beside the 15-column query on kfake)")
	case err != nil:
		return nil, err
	default:
		for _, f := range starFigures(star) {
			add(f)
		}
	}

	// Latency.
	var lat latencyFile
	switch err := readJSON(filepath.Join(dir, "latency.json"), &lat); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "latency.json (reorg and restart latency)")
	case err != nil:
		return nil, err
	default:
		rep.Latency = &lat
		targets := map[string][2]float64{"reorg-depth-10": {25, 100}, "reorg-depth-128": {0, 250}, "restart-clean": {1000, 3000}, "restart-kill9": {0, 5000}}
		for _, r := range lat.Results {
			tg := targets[r.Name]
			for i, q := range []struct {
				name string
				v    float64
			}{{"p50", r.P50Ms}, {"p99", r.P99Ms}} {
				f := figure{Group: "latency", Name: fmt.Sprintf("%s %s (%d samples)", r.Name, q.name, r.Samples), Unit: "ms", Ours: q.v,
					Method: r.Method, Load: r.Load, Broker: r.Broker}
				if tg[i] > 0 {
					f.Peer, f.PeerValue, f.Ratio = "performance.md target", tg[i], tg[i]/math.Max(q.v, 1e-9)
				}
				if r.Rows > 0 {
					f.Extra = map[string]float64{"rows_in_the_commit": r.Rows}
				}
				add(f)
			}
			if r.Peer == nil {
				continue
			}
			// Beside a bare franz-go transaction of the same records: the
			// bridge's whole figure, and its own part when the wait for
			// Amp was measured (the peer does not wait for Amp).
			for _, q := range []struct {
				name      string
				ours, per float64
			}{{"p50", r.P50Ms, r.Peer.P50Ms}, {"p99", r.P99Ms, r.Peer.P99Ms},
				{"p50 without waiting for Amp", r.OwnP50Ms, r.Peer.P50Ms}, {"p99 without waiting for Amp", r.OwnP99Ms, r.Peer.P99Ms}} {
				if q.ours <= 0 {
					continue
				}
				add(figure{Group: "latency", Name: fmt.Sprintf("%s %s, beside a bare transaction of the same records (%d samples)", r.Name, q.name, r.Samples),
					Unit: "ms", Ours: q.ours, Peer: fmt.Sprintf("franz-go raw transactional producer, the same %s records (%s MB) in one transaction",
						num(r.Peer.Records), num(r.Peer.Bytes/1e6)), PeerValue: q.per, Ratio: q.per / math.Max(q.ours, 1e-9),
					Method: r.Peer.Method, Load: r.Load, Broker: r.Broker})
			}
		}
	}

	// Cluster mode's takeover.
	var tko takeoverFile
	switch err := readJSON(filepath.Join(dir, "takeover.json"), &tko); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "takeover.json (cluster mode: takeover after kill -9, rolling restart)")
	case err != nil:
		return nil, err
	default:
		rep.Takeover = &tko
		for _, f := range takeoverFigures(&tko, &rep.Missing) {
			add(f)
		}
	}

	// Redis-less start.
	if b, err := os.ReadFile(filepath.Join(dir, "recover.txt")); err == nil {
		bs, load := parseGoBench(string(b))
		o, ok1 := bs["BenchmarkRecoverRedisLess/kafka/events=100000"]
		p, ok2 := bs["BenchmarkRecoverRedisLess/kafka/events=100000/full-read"]
		if ok1 && ok2 {
			add(figure{Group: "recovery", Name: "Redis-less start over a control topic of 100,000 watermark events", Unit: "ms",
				Ours: o["ns/op"] / 1e6, Peer: "reading the whole control topic (the old way)", PeerValue: p["ns/op"] / 1e6, Ratio: p["ns/op"] / o["ns/op"],
				Method: "internal/pipeline BenchmarkRecoverRedisLess/kafka: offsets.Control.NewestState from the start of the log, four interleaved streams, " +
					"128 retained batches each, a full checkpoint copy every 64th event",
				Load: load, Broker: "Apache Kafka " + kafkaVersion() + " (single KRaft broker, testenv, log on disk)",
				Extra: map[string]float64{"records_read": o["records_read/op"], "peak_rss_delta_bytes": o["peak_rss_delta_bytes"],
					"full_read_peak_rss_delta_bytes": p["peak_rss_delta_bytes"]}})
		} else {
			rep.Missing = append(rep.Missing, "BenchmarkRecoverRedisLess/kafka/events=100000 in recover.txt")
		}
	} else {
		rep.Missing = append(rep.Missing, "recover.txt (Redis-less start)")
	}

	// The decode of a reorg's read back.
	if b, err := os.ReadFile(filepath.Join(dir, "readback.txt")); err == nil {
		bs, load := parseGoBench(string(b))
		o, ok1 := bs["BenchmarkReadBack/reader"]
		p, ok2 := bs["BenchmarkReadBack/franz-go-decode"]
		if ok1 && ok2 {
			add(figure{Group: "reorg read back", Name: "decoding a depth-128 reorg's read back (21,760 records of ~700 B in one fetch response)", Unit: "ms",
				Ours: o["ns/op"] / 1e6, Peer: "franz-go decoding the same response into its own records, nothing more", PeerValue: p["ns/op"] / 1e6,
				Ratio: p["ns/op"] / o["ns/op"],
				Method: "sink BenchmarkReadBack (medians of -count): 128 one-block transactions of 170 records with the bridge's five headers, uncompressed, " +
					"fetched once from kfake; ours decodes the response into the records ReadSpans returns (sink.Reader.appendDecoded, as the read back does), " +
					"the peer is kgo.ProcessFetchPartition alone",
				Load: load, Broker: "none (the response is in memory)",
				Extra: map[string]float64{"ours_bytes_per_op": o["B/op"], "peer_bytes_per_op": p["B/op"],
					"ours_allocs_per_op": o["allocs/op"], "peer_allocs_per_op": p["allocs/op"]}})
		} else {
			rep.Missing = append(rep.Missing, "BenchmarkReadBack/reader and BenchmarkReadBack/franz-go-decode in readback.txt")
		}
	} else {
		rep.Missing = append(rep.Missing, "readback.txt (decoding a reorg's read back)")
	}

	// Memory: TestMemory's figures beside issue #13's goal, and its file
	// as it wrote it in BENCHMARKS.json.
	var mem []memResult
	switch err := readJSON(filepath.Join(dir, "memory", "memory.json"), &mem); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "memory/memory.json (test/perf TestMemory -perf.memory did not run)")
	case err != nil:
		return nil, err
	default:
		b, _ := json.Marshal(mem)
		rep.Memory = json.RawMessage(b)
		for _, f := range memoryFigures(mem) {
			add(f)
		}
	}

	// Cost per stream: TestStreamsCost's figures beside issue #13's goals.
	var sc streamsCostResult
	switch err := readJSON(filepath.Join(dir, "streams_cost", "streams_cost.json"), &sc); {
	case errors.Is(err, errNoResults):
		rep.Missing = append(rep.Missing, "streams_cost/streams_cost.json (test/perf TestStreamsCost -perf.streams-cost did not run)")
	case err != nil:
		return nil, err
	default:
		rep.StreamsCost = &sc
		for _, f := range streamsCostFigures(&sc, &rep.Missing) {
			add(f)
		}
	}
	return rep, nil
}

// starGoalRowsPerSec is issue 13's goal for SELECT * (27 columns) on kfake.
const starGoalRowsPerSec = 600_000

// starFigures are the 27-column SELECT * on kfake beside issue #13's goal
// (600k rows/s), and its MB/s beside the 15-column query's in the same run
// (goal: at least 0.9×).
func starFigures(f e2eFile) []figure {
	var narrow, wide *e2eResult
	for i := range f.Results {
		r := &f.Results[i]
		if r.Contender != "bridge" || r.Partitions != 1 || strings.Contains(r.Config, "backfill") {
			continue
		}
		if strings.HasSuffix(r.Config, "/star") {
			wide = r
		} else {
			narrow = r
		}
	}
	if wide == nil {
		return nil
	}
	method := fmt.Sprintf("%s; median of %d windows of %s after %s warm-up", wide.Method, f.Runs*max(f.Rounds, 1), f.Run, f.Warmup)
	out := []figure{{Group: "SELECT *", Name: "SELECT * (27 columns), exactly-once, 1 partition, rows/s", Unit: "rows/s committed",
		Ours: wide.RowsPerSec, Peer: "issue #13 goal", PeerValue: starGoalRowsPerSec, Ratio: ratio(wide.RowsPerSec, starGoalRowsPerSec),
		Method: method, Load: strings.Join(wide.Load, ", "), Broker: wide.Broker,
		Extra: map[string]float64{"bytes_per_row": wide.BytesPerRow, "bridge_cpu_us_per_row": wide.ClientUsPerRow}}}
	if narrow == nil {
		return out
	}
	both := strings.Join(append(slices.Clone(wide.Load), narrow.Load...), ", ") // the load of both configurations' windows
	if narrow.RowsPerSec > 0 && narrow.BytesPerRow > 0 {
		mb := func(r *e2eResult) float64 { return r.RowsPerSec * r.BytesPerRow / 1e6 }
		out = append(out, figure{Group: "SELECT *", Name: "SELECT * against the 15-column query, MB/s of records (goal: at least 0.9×)", Unit: "MB/s",
			Ours: mb(wide), Peer: "the 15-column query, same run", PeerValue: mb(narrow), Ratio: ratio(mb(wide), mb(narrow)),
			Method: fmt.Sprintf("rows/s × bytes per row: SELECT * %s rows/s × %s B, the 15-column query %s rows/s × %s B", num(wide.RowsPerSec),
				num(wide.BytesPerRow), num(narrow.RowsPerSec), num(narrow.BytesPerRow)),
			Load: both, Broker: wide.Broker})
	}
	if narrow.ClientUsPerRow > 0 && wide.ClientUsPerRow > 0 && narrow.BytesPerRow > 0 {
		// The bridge, the broker and the simulator share the machine's
		// cores, so MB/s also moves with what the other two spend per byte
		// (the simulator serves SELECT *'s wider Arrow rows): the bridge's
		// own CPU per byte is its part alone.
		perCPU := func(r *e2eResult) float64 { return r.BytesPerRow / r.ClientUsPerRow } // B/µs = MB per CPU-second
		out = append(out, figure{Group: "SELECT *", Name: "SELECT * against the 15-column query, MB of records per second of the bridge's CPU", Unit: "MB/CPU-s",
			Ours: perCPU(wide), Peer: "the 15-column query, same run", PeerValue: perCPU(narrow), Ratio: ratio(perCPU(wide), perCPU(narrow)),
			Method: fmt.Sprintf("bytes per row ÷ the bridge's CPU µs per row (median of the windows); CPU µs per row of the bridge / broker / simulator: SELECT * %.2f / %.2f / %.2f, the 15-column query %.2f / %.2f / %.2f",
				wide.ClientUsPerRow, wide.BrokerUsPerRow, wide.SimUsPerRow, narrow.ClientUsPerRow, narrow.BrokerUsPerRow, narrow.SimUsPerRow),
			Load: both, Broker: wide.Broker})
	}
	return out
}

// memoryFigures are TestMemory's peaks beside issue #13's goal (256 MiB),
// and the slope over microbatch sizes (the largest peak over the smallest)
// beside its goal (1.10).
func memoryFigures(rs []memResult) []figure {
	var out []figure
	lo, hi := 0.0, 0.0
	var slopeLoad []string
	for _, r := range rs {
		runs := ""
		if len(r.RunsMiB) > 1 {
			vs := make([]string, 0, len(r.RunsMiB))
			for _, v := range r.RunsMiB {
				vs = append(vs, num(v))
			}
			runs = fmt.Sprintf("; the median of %d runs (%s MiB)", len(r.RunsMiB), strings.Join(vs, ", "))
		}
		limit := "no GOMEMLIMIT"
		if r.GOMEMLIMIT != "" {
			limit = "GOMEMLIMIT=" + r.GOMEMLIMIT
		}
		if r.MemoryLimitMiB > 0 {
			limit += fmt.Sprintf(", a soft memory limit of %s MiB", num(r.MemoryLimitMiB))
		} else {
			limit += ", no soft memory limit"
		}
		name := memCaseTitle(r)
		out = append(out, figure{Group: "memory", Name: name, Unit: "MiB peak RSS", Ours: r.PeakRSSMiB, Peer: "issue #13 goal", PeerValue: r.GoalMiB,
			Ratio: r.GoalMiB / math.Max(r.PeakRSSMiB, 1e-9),
			Method: fmt.Sprintf("test/perf TestMemory: the bridge binary as a process, %s, %s, Redis checkpoints, %s; its VmHWM until every stream committed the head block%s",
				r.Delivery, r.Broker, limit, runs),
			Load: r.Load, Broker: r.Broker, Extra: map[string]float64{"rows": float64(r.Rows), "seconds": r.Seconds}})
		if strings.HasPrefix(r.Name, "slope-") {
			if lo == 0 || r.PeakRSSMiB < lo {
				lo = r.PeakRSSMiB
			}
			hi = max(hi, r.PeakRSSMiB)
			slopeLoad = append(slopeLoad, r.Load)
		}
	}
	if lo > 0 {
		out = append(out, figure{Group: "memory", Name: "peak RSS over microbatches of 100 / 300 / 1000 / 3000 blocks: the largest over the smallest",
			Unit: "×", Ours: hi / lo, Peer: "issue #13 goal (flat within 10%)", PeerValue: 1.10, Ratio: 1.10 / (hi / lo),
			Method: "the slope-* cases above", Load: strings.Join(slopeLoad, ", "), Broker: rs[0].Broker})
	}
	return out
}

// memCaseTitle names a TestMemory case for the report.
func memCaseTitle(r memResult) string {
	switch {
	case strings.HasPrefix(r.Name, "catchup-"):
		return fmt.Sprintf("peak RSS: catch-up of %d blocks (~%d transactions each) in %d-block microbatches, SELECT *", r.Blocks, r.TxPerBlock, r.MicrobatchBlocks)
	case strings.HasPrefix(r.Name, "slope-"):
		return fmt.Sprintf("peak RSS, microbatch slope: %d blocks (~%d transactions each) in %d-block microbatches, SELECT *", r.Blocks, r.TxPerBlock, r.MicrobatchBlocks)
	case r.BackfillWorkers > 0:
		return fmt.Sprintf("peak RSS: backfill of %d blocks (~%d transactions each), %d workers", r.Blocks, r.TxPerBlock, r.BackfillWorkers)
	case r.Streams > 1:
		return fmt.Sprintf("peak RSS: %d streams in one process (%d blocks × %d transactions each)", r.Streams, r.Blocks, r.TxPerBlock)
	}
	return "peak RSS: " + r.Name
}

// streamsCostFigures are TestStreamsCost's figures beside issue #13's
// goals: per idle stream, RSS (≤ 4 MiB) and CPU (≤ 0.5% of a core), from
// the smallest process to each larger one; per busy process, how evenly
// its streams published (the slowest stream's rate over the fastest's, and
// Jain's index, beside a perfectly fair 1).
func streamsCostFigures(sc *streamsCostResult, missing *[]string) []figure {
	runs := slices.Clone(sc.Runs)
	slices.SortFunc(runs, func(a, b streamsCost) int { return a.Streams - b.Streams })
	if len(runs) < 2 {
		*missing = append(*missing, "cost per idle stream (streams_cost.json has fewer than two stream counts)")
		if len(runs) == 0 {
			return nil
		}
	}
	const method = "test/perf TestStreamsCost: the bridge binary as a process with N streams of the 15-column query, each its own topic and transactional producer, " +
		"kfake in its own process, Redis checkpoints; once every stream committed the head, 5 s to settle, then RSS (VmRSS) and CPU over the idle window"
	broker := sc.Broker
	lo := runs[0]
	var out []figure
	for _, hi := range runs[1:] {
		d := float64(hi.Streams - lo.Streams)
		if d <= 0 {
			continue
		}
		between := fmt.Sprintf("from %d to %d streams", lo.Streams, hi.Streams)
		extra := map[string]float64{"rss_mib_low": lo.RSSMiB, "rss_mib_high": hi.RSSMiB, "idle_cpu_cores_low": lo.IdleCPUCores,
			"idle_cpu_cores_high": hi.IdleCPUCores, "goroutines_high": hi.Goroutines, "threads_high": hi.Threads}
		rss := (hi.RSSMiB - lo.RSSMiB) / d
		out = append(out, figure{Group: "cost per stream", Name: "RSS per idle stream, " + between, Unit: "MiB", Ours: rss,
			Peer: "issue #13 goal", PeerValue: 4, Ratio: 4 / math.Max(rss, 1e-9),
			Method: method + fmt.Sprintf(" (%s MiB with %d, %s MiB with %d)", num(lo.RSSMiB), lo.Streams, num(hi.RSSMiB), hi.Streams),
			Load:   sc.Load, Broker: broker, Extra: extra})
		if lo.SettledRSSMiB > 0 && hi.SettledRSSMiB > 0 {
			settled := (hi.SettledRSSMiB - lo.SettledRSSMiB) / d
			out = append(out, figure{Group: "cost per stream", Name: "RSS per idle stream, settled, " + between, Unit: "MiB", Ours: settled,
				Peer: "issue #13 goal", PeerValue: 4, Ratio: 4 / math.Max(settled, 1e-9),
				Method: method + fmt.Sprintf("; then two garbage collections (the heap profile's gc=1, twice: an idle process allocates too little to start one "+
					"until the runtime's 2-minute forced GC) and %s for the scavenger, then VmRSS (%s MiB with %d, %s MiB with %d)",
					settleAfterGC, num(lo.SettledRSSMiB), lo.Streams, num(hi.SettledRSSMiB), hi.Streams),
				Load: sc.Load, Broker: broker, Extra: map[string]float64{"settled_rss_mib_low": lo.SettledRSSMiB, "settled_rss_mib_high": hi.SettledRSSMiB}})
		}
		cpu := 100 * (hi.IdleCPUCores - lo.IdleCPUCores) / d
		cpuRatio := 0.0 // none when below what /proc's clock ticks resolve
		if cpu > 0 {
			cpuRatio = 0.5 / cpu
		}
		out = append(out, figure{Group: "cost per stream", Name: "idle CPU per stream, " + between, Unit: "% of a core", Ours: cpu,
			Peer: "issue #13 goal", PeerValue: 0.5, Ratio: cpuRatio,
			Method: method + fmt.Sprintf(" (%.3f%% of a core with %d, %.3f%% with %d)", 100*lo.IdleCPUCores, lo.Streams, 100*hi.IdleCPUCores, hi.Streams),
			Load:   sc.Load, Broker: broker, Extra: extra})
	}
	for _, r := range runs {
		if r.Streams < 2 {
			continue
		}
		busy := fmt.Sprintf("then %d blocks mined for all %d streams at once (Amp's microbatches of %d blocks), committed by all in %.1f s; "+
			"a stream's rate is the blocks it had committed when the first stream had committed them all, over that time (until then every stream had blocks waiting)",
			r.BusyBlocks, r.Streams, busyMicrobatchBlocks, r.BusySeconds)
		out = append(out, figure{Group: "cost per stream", Name: fmt.Sprintf("fairness of %d busy streams: the slowest stream's rate over the fastest's", r.Streams),
			Unit: "×", Ours: r.FairMinMax, Peer: "perfectly fair", PeerValue: 1, Ratio: r.FairMinMax, Method: method + "; " + busy,
			Load: sc.Load, Broker: broker, Extra: map[string]float64{"busy_seconds": r.BusySeconds}})
		if r.BusyPeakRSSMiB > 0 {
			out = append(out, figure{Group: "cost per stream", Name: fmt.Sprintf("peak RSS of %d streams in one process, through the busy phase", r.Streams),
				Unit: "MiB", Ours: r.BusyPeakRSSMiB, Method: method + "; " + busy + "; VmHWM after the busy phase",
				Load: sc.Load, Broker: broker, Extra: map[string]float64{"busy_seconds": r.BusySeconds}})
		}
		out = append(out, figure{Group: "cost per stream", Name: fmt.Sprintf("fairness of %d busy streams: Jain's index of their rates", r.Streams),
			Unit: "index (1/n to 1)", Ours: r.Jain, Peer: "perfectly fair", PeerValue: 1, Ratio: r.Jain, Method: method + "; " + busy,
			Load: sc.Load, Broker: broker, Extra: map[string]float64{"busy_seconds": r.BusySeconds}})
	}
	return out
}

// takeoverFigures are the figures of TestTakeover's results: the takeover
// after kill -9 beside the bare franz-go group failover (the protocol's
// floor) and beside the goal, the rolling restart's longest pause beside
// the session timeout. What is missing is added to missing.
func takeoverFigures(tko *takeoverFile, missing *[]string) []figure {
	by := map[string]takeoverResult{}
	for _, r := range tko.Results {
		by[r.Name] = r
	}
	var out []figure
	session, _ := time.ParseDuration(tko.SessionTimeout)
	kill, ok := by["kill9-takeover"]
	peer, pok := by["franz-go-group-failover"]
	if !pok {
		*missing = append(*missing, "franz-go-group-failover in takeover.json (the peer of the takeover)")
	}
	if ok {
		for _, q := range []struct {
			name       string
			ours, peer float64
		}{{"p50", kill.P50Ms, peer.P50Ms}, {"max", kill.MaxMs, peer.MaxMs}} {
			f := figure{Group: "takeover", Name: fmt.Sprintf("kill -9 of a stream's owner to the first new committed record on the new owner, %s (%d kills)", q.name, kill.Samples),
				Unit: "ms", Ours: q.ours, Method: kill.Method, Load: kill.Load, Broker: kill.Broker}
			if pok && q.peer > 0 {
				f.Peer, f.PeerValue, f.Ratio = "bare franz-go group failover (the protocol's floor): "+peer.Method, q.peer, q.peer/math.Max(q.ours, 1e-9)
				f.Load = kill.Load + ", " + peer.Load
				f.Extra = map[string]float64{"bridge_over_peer": q.ours / q.peer, "peer_samples": float64(peer.Samples)}
			}
			out = append(out, f)
		}
		out = append(out, figure{Group: "takeover", Name: fmt.Sprintf("kill -9 takeover, max (%d kills), against the goal", kill.Samples), Unit: "ms", Ours: kill.MaxMs,
			Peer: fmt.Sprintf("issue #14 goal with a %s session timeout", tko.SessionTimeout), PeerValue: 10_000, Ratio: 10_000 / math.Max(kill.MaxMs, 1e-9),
			Method: kill.Method, Load: kill.Load, Broker: kill.Broker})
	} else {
		*missing = append(*missing, "kill9-takeover in takeover.json")
	}
	if r, ok := by["rolling-restart-pause"]; ok {
		f := figure{Group: "takeover", Name: fmt.Sprintf("longest pause in publishing of a stream during a rolling restart of %d members", tko.Members), Unit: "ms",
			Ours: r.MaxMs, Method: r.Method, Load: r.Load, Broker: r.Broker, Extra: map[string]float64{}}
		if session > 0 {
			f.Peer, f.PeerValue, f.Ratio = "the session timeout (the bound)", ms(session), ms(session)/math.Max(r.MaxMs, 1e-9)
		}
		for id, v := range r.PerStreamMaxMs {
			f.Extra["stream_"+id+"_max_ms"] = v
		}
		out = append(out, f)
	} else {
		*missing = append(*missing, "rolling-restart-pause in takeover.json")
	}
	return out
}

// relToModule returns path relative to the module root when it is inside
// it (the report is committed: no machine's absolute paths).
func relToModule(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	for dir := wd; filepath.Dir(dir) != dir; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, path); err == nil && !strings.HasPrefix(rel, "..") {
				return rel
			}
			return path
		}
	}
	return path
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// profileTop lists the top functions of a CPU profile (go tool pprof -top).
func profileTop(ctx context.Context, path string) []string {
	if _, err := os.Stat(path); err != nil {
		return []string{fmt.Sprintf("no profile: %v", err)}
	}
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return []string{fmt.Sprintf("go tool pprof -top %s: %v: %s", path, err, out)}
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// gitCommit is the commit of the working tree, "+dirty" when it has changes.
func gitCommit(ctx context.Context) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "?"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "+dirty"
	}
	return c
}

// num prints v with thousands separators and digits that fit its size.
func num(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return "0"
	case a >= 1000:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		var b strings.Builder
		for i, r := range s {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				b.WriteByte(',')
			}
			b.WriteRune(r)
		}
		return b.String()
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// cell escapes a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// renderMarkdown writes BENCHMARKS.md.
func renderMarkdown(rep *report) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# Benchmarks\n\n")
	w("Generated by `make bench` (test/perf TestBenchReport) on %s; do not edit by hand, rerun `make bench`.\n\n", rep.Generated)
	w("- machine: %s\n- commit: %s\n", rep.Machine, rep.Commit)
	keys := make([]string, 0, len(rep.Versions))
	for k := range rep.Versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if rep.Versions[k] != "" {
			w("- %s: %s\n", k, rep.Versions[k])
		}
	}
	w("\nEvery figure below was measured on this machine in this run, beside its peer. The machine is shared: the load\n" +
		"average (1, 5, 15 min, at the end of each window) is given per figure. **ratio** is how many times better ours is\n" +
		"than the peer (> 1: ours is better): ours/peer for rates, peer/ours for times and sizes.\n\n")
	if len(rep.Missing) > 0 {
		w("Not measured in this run: %s.\n\n", strings.Join(rep.Missing, "; "))
	}
	groups := []string{"encoder", "end to end", "SELECT *", "latency", "reorg read back", "takeover", "recovery", "memory", "cost per stream"}
	for _, g := range groups {
		var fs []figure
		for _, f := range rep.Figures {
			if f.Group == g {
				fs = append(fs, f)
			}
		}
		if len(fs) == 0 {
			continue
		}
		w("## %s\n\n", strings.ToUpper(g[:1])+g[1:])
		w("| figure | ours | peer | peer's | ratio | unit | load average | broker |\n| --- | ---: | --- | ---: | ---: | --- | --- | --- |\n")
		for _, f := range fs {
			peer, pv, r := "–", "–", "–"
			if f.Peer != "" {
				peer, pv = shortPeer(f.Peer), num(f.PeerValue)
			}
			if f.Ratio > 0 {
				r = fmt.Sprintf("%.2f×", f.Ratio)
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", cell(f.Name), num(f.Ours), cell(peer), pv, r, f.Unit, cell(f.Load), cell(f.Broker))
		}
		w("\n")
		switch g {
		case "encoder":
			w("Allocations per row and CPU ns per row:\n\n| figure | peer | ours: allocs/row | peer: allocs/row | ours: CPU ns/row | peer: CPU ns/row |\n| --- | --- | ---: | ---: | ---: | ---: |\n")
			for _, f := range fs {
				if f.Extra != nil {
					w("| %s | %s | %s | %s | %s | %s |\n", cell(f.Name), cell(f.Peer), num(f.Extra["ours_allocs_per_row"]), num(f.Extra["peer_allocs_per_row"]),
						num(f.Extra["ours_cpu_ns_per_row"]), num(f.Extra["peer_cpu_ns_per_row"]))
				}
			}
			w("\n")
		case "end to end":
			if rep.E2E != nil {
				w("Every contender, medians (CPU µs per row: the client process, then the broker's):\n\n" +
					"| configuration | contender | rows/s | windows | CPU µs/row client / broker | cores client / broker | B/row | peak RSS | load average |\n" +
					"| --- | --- | ---: | --- | --- | --- | ---: | ---: | --- |\n")
				for _, r := range rep.E2E.Results {
					var win []string
					for _, v := range r.Windows {
						win = append(win, num(v))
					}
					w("| %s | %s | %s | %s | %.2f / %.2f | %.2f / %.2f | %s | %s MiB | %s |\n", r.Config, r.Contender, num(r.RowsPerSec), strings.Join(win, ", "),
						r.ClientUsPerRow, r.BrokerUsPerRow, r.ClientCores, r.BrokerCores, num(r.BytesPerRow), num(r.PeakRSSMiB), cell(strings.Join(r.Load, "; ")))
				}
				w("\nMethods:\n\n")
				seen := map[string]bool{}
				for _, r := range rep.E2E.Results {
					if !seen[r.Contender] {
						seen[r.Contender] = true
						w("- **%s**: %s.\n", r.Contender, r.Method)
					}
				}
				fresh := "a fresh broker"
				if bw := rep.E2E.BrokerWarmup; bw != "" && bw != "0s" {
					fresh = "a broker warmed for " + bw + " by a franz-go transactional producer of synthetic ~620 B records into a scratch topic, deleted after"
				}
				w("\nWindows: the bridge %d × %s after a %s warm-up on %s; each peer then %s of warm-up and the same windows on the\n"+
					"same (warm) broker, into a fresh topic with the same partitions, deleted after its windows; then the bridge again, resumed from its checkpoint, after\n"+
					"%s of warm-up, for as many windows more. The bridge's figure is the median of its windows before and after its peers, so\n"+
					"the broker's drift over the run (its JVM, its log) does not fall on one side; a peer whose method says it ran twice ran first and\n"+
					"again after the other peers, its figure the median of both runs' windows. Rows/s are counted from the topic's last stable offsets\n"+
					"(read_committed); CPU from /proc of each process.\n", rep.E2E.Runs, rep.E2E.Run, rep.E2E.Warmup, fresh, rep.E2E.PeerWarmup, rep.E2E.PeerWarmup)
				if n := rep.E2E.Turns; n > 0 {
					w("Between those, after the other peers, the bridge and the peer run again took %d more turns each (the bridge's windows, then\n"+
						"the peer's, each after %s of warm-up): the same windows for both, alternated, so that a slow spell of the machine (its\n"+
						"neighbours, the broker's JVM) does not fall on one of them only.\n", n, rep.E2E.PeerWarmup)
				}
				w("The Python figure reproduces the Amp Python SDK Kafka loader's loop (see its method above); it is not the SDK's own code.\n\n")
			}
		case "latency":
			w("Methods:\n\n")
			for _, f := range fs {
				switch {
				case strings.Contains(f.Name, " p50, beside "):
					w("- **%s, its peer**: %s.\n", strings.Fields(f.Name)[0], f.Method)
				case strings.Contains(f.Name, " p50 ") && !strings.Contains(f.Name, "beside"):
					w("- **%s**: %s.\n", strings.Fields(f.Name)[0], f.Method)
				}
			}
			w("\n")
		case "takeover":
			if t := rep.Takeover; t != nil {
				w("Cluster mode: %d members, %d streams, `cluster.session_timeout: %s`, `heartbeat_interval: %s`, a block every %s. Methods:\n\n",
					t.Members, t.Streams, t.SessionTimeout, t.HeartbeatInterval, t.BlockInterval)
				for _, r := range t.Results {
					all := ""
					if len(r.AllMs) > 0 {
						vs := make([]string, 0, len(r.AllMs))
						for _, v := range r.AllMs {
							vs = append(vs, num(v))
						}
						all = "; each: " + strings.Join(vs, ", ") + " ms"
					}
					w("- **%s** (p50 %s ms, max %s ms over %d%s): %s.\n", r.Name, num(r.P50Ms), num(r.MaxMs), r.Samples, all, r.Method)
				}
				w("\n")
			}
		case "memory", "cost per stream", "SELECT *":
			w("Methods:\n\n")
			seen := map[string]bool{}
			for _, f := range fs {
				if !seen[f.Method] {
					seen[f.Method] = true
					w("- **%s**: %s.\n", cell(f.Name), f.Method)
				}
			}
			w("\n")
		case "reorg read back":
			for _, f := range fs {
				w("%s. Allocated per read back: %s MiB in %s allocations (the peer: %s MiB in %s).\n\n", f.Method,
					num(f.Extra["ours_bytes_per_op"]/(1<<20)), num(f.Extra["ours_allocs_per_op"]), num(f.Extra["peer_bytes_per_op"]/(1<<20)),
					num(f.Extra["peer_allocs_per_op"]))
			}
		case "recovery":
			for _, f := range fs {
				w("%s. Records read: %s; peak RSS growth: %s MiB (full read: %s MiB).\n\n", f.Method, num(f.Extra["records_read"]),
					num(f.Extra["peak_rss_delta_bytes"]/(1<<20)), num(f.Extra["full_read_peak_rss_delta_bytes"]/(1<<20)))
			}
		}
	}
	w("## CPU profile of the bridge, Apache Kafka, 1 partition\n\n")
	if len(rep.Profile) > 0 {
		w("`go tool pprof -top -nodecount=25 %s` (saved by make bench during the middle window):\n\n```\n%s\n```\n", rep.ProfileOf, strings.Join(rep.Profile, "\n"))
	} else {
		w("No profile in this run.\n")
	}
	return b.String()
}

// shortPeer is the peer's name without its method.
func shortPeer(p string) string {
	if i := strings.Index(p, ": "); i > 0 {
		return p[:i]
	}
	return p
}
