package perf

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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
	flagLatency        = flag.Bool("perf.latency", false, "run TestLatency (reorg retraction latency and restart times on a private Apache Kafka broker; minutes)")
	flagReorgSamples   = flag.Int("perf.reorg-samples", 100, "reorgs of depth 10 measured by TestLatency")
	flagReorgDeep      = flag.Int("perf.reorg-samples-deep", 20, "reorgs of depth 128 measured by TestLatency (each first mines 130 blocks one by one)")
	flagRestartSamples = flag.Int("perf.restart-samples", 10, "restarts of each kind measured by TestLatency")
	flagLatencyJSON    = flag.String("perf.latency-json", "", "file to write TestLatency's figures to as JSON")
)

// latencyResult is one latency figure of TestLatency.
type latencyResult struct {
	// Name is reorg-depth-10, reorg-depth-128, restart-clean or
	// restart-kill9.
	Name    string    `json:"name"`
	Method  string    `json:"method"`
	Samples int       `json:"samples"`
	P50Ms   float64   `json:"p50_ms"`
	P99Ms   float64   `json:"p99_ms"`
	MaxMs   float64   `json:"max_ms"`
	AllMs   []float64 `json:"all_ms"`
	Rows    float64   `json:"commit_rows_median,omitempty"`
	// AmpWaitMs is, per reorg, how long the bridge waited for Amp (the
	// simulator) to deliver the rest of the replacement microbatch after
	// the detection: in the figure, but not the bridge's own time.
	AmpWaitMs []float64 `json:"amp_wait_ms,omitempty"`
	// OwnP50Ms and OwnP99Ms are the quantiles of each reorg's figure
	// less its AmpWaitMs: the bridge's own part (set with AmpWaitMs).
	OwnP50Ms float64 `json:"own_p50_ms,omitempty"`
	OwnP99Ms float64 `json:"own_p99_ms,omitempty"`
	// Peer is a bare franz-go transactional producer writing, after each
	// reorg, the records of the bridge's reorg transaction (reorgs only).
	Peer   *latencyPeer `json:"peer,omitempty"`
	Load   string       `json:"load_average"`
	Broker string       `json:"broker"`
}

// latencyPeer is the peer of a reorg latency figure: per reorg, the records
// the bridge's reorg transaction wrote to the data topic (its retractions
// and replacement rows, read back read_committed), produced again by a bare
// franz-go transactional producer with the bridge's producer settings into
// a topic of its own on the same broker, timed from BeginTransaction to the
// end of the commit. It does what no bridge can skip (the same bytes in one
// Kafka transaction) and nothing else: no read-back, no encoding, no wait
// for Amp, no control event, no checkpoint.
type latencyPeer struct {
	Method  string    `json:"method"`
	P50Ms   float64   `json:"p50_ms"`
	P99Ms   float64   `json:"p99_ms"`
	MaxMs   float64   `json:"max_ms"`
	AllMs   []float64 `json:"all_ms"`
	Records float64   `json:"records_median"`
	Bytes   float64   `json:"bytes_median"`
}

// latencyFile is what -perf.latency-json holds.
type latencyFile struct {
	Results []latencyResult `json:"results"`
}

// TestLatency measures, with the bridge binary as a process against a
// private Apache Kafka broker, redis-server (appendfsync always) and the
// simulator at mainnet density (171 transactions per block, SELECT * of
// eth_rpc.transactions, streaming at the tip):
//
//   - reorg retraction latency at depth 10 and 128: from the bridge's
//     detection (its "reorg" log line) to the commit that carries the
//     retractions, after the Kafka transaction and the Redis checkpoint
//     write (its "committed" log line); both times are the bridge's own
//     clock, read from its JSON log;
//   - restart to the first new committed record: the time from exec of the
//     bridge to the first record a read_committed consumer (already
//     positioned at the end of the data topic) receives, after a clean
//     stop (SIGTERM) and after kill -9 while a transaction was open on the
//     data topic (its high watermark above its last stable offset).
//
// Skipped unless -perf.latency is given (make bench).
func TestLatency(t *testing.T) {
	if !*flagLatency {
		t.Skip("latency harness: run with -perf.latency (make bench)")
	}
	dir := *flagOut
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, "latency")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	bin := *flagBridge
	if bin == "" {
		bin = bridgetest.Build(t, false)
	}
	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig: ampsim.NetworkConfig{InitialBlocks: 50, TxPerBlock: ampsim.DefaultTxPerBlock, LogsPerTx: -1},
		KeepAlive:     ampsim.KeepAliveOff,
	})
	require.NoError(t, err)
	require.NoError(t, sim.Start(t.Context()))
	t.Cleanup(func() { _ = sim.Close() })
	rs := testenv.StartRedisServer(t)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	t.Cleanup(reg.Close)
	br := startKafka(t, dir)
	brokerName := kafkaBrokerName()
	name := fmt.Sprintf("lat-%d", time.Now().UnixNano()%1_000_000)
	topic := name + ".transactions"
	cl, err := kgo.NewClient(kgo.SeedBrokers(br.addr))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	_, err = adm.CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": new("delete")}, topic)
	require.NoError(t, err)
	peerTopic := name + ".peer"
	_, err = adm.CreateTopic(t.Context(), 1, 1, map[string]*string{"cleanup.policy": new("delete")}, peerTopic)
	require.NoError(t, err)
	// The peer has the bridge's producer settings (sink's defaults and
	// compression: none below).
	peer, err := kgo.NewClient(kgo.SeedBrokers(br.addr), kgo.TransactionalID(name+"-peer"), kgo.DefaultProduceTopic(peerTopic),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedBytes(32<<20),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	require.NoError(t, err)
	t.Cleanup(peer.Close)
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
registry:
  url: %s
checkpoint:
  store: redis
  redis:
    addr: %s
    key_prefix: %s
http:
  addr: %s
log:
  level: debug
  format: json
streams:
  - id: lat
    sql: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"
    topic: %s
    partitions: 1
    retention_blocks: 256
    head_poll_interval: -1s
`, sim.Addr(), br.addr, name, name, reg.URL, rs.Addr(), name, freeAddr(t), topic)
	cfgPath := filepath.Join(dir, "bridge.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	logPath := filepath.Join(dir, "bridge.log")
	// The log is read from its start: a log of an earlier run in the same
	// -perf.out must not be.
	if err := os.Remove(logPath); err != nil && !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	var proc *testenv.Process
	start := func() time.Time {
		t.Helper()
		cmd := exec.CommandContext(context.Background(), bin, "run", "-c", cfgPath)
		cmd.Env = bridgetest.Env()
		at := time.Now()
		p, err := testenv.StartProcess(cmd, logPath)
		require.NoError(t, err)
		proc = p
		t.Cleanup(p.Kill9)
		return at
	}
	ctx := t.Context()
	lastStable := func() int64 {
		lo, err := adm.ListCommittedOffsets(ctx, topic)
		require.NoError(t, err)
		o, _ := lo.Lookup(topic, 0)
		return o.Offset
	}
	highWater := func() int64 {
		lo, err := adm.ListEndOffsets(ctx, topic)
		require.NoError(t, err)
		o, _ := lo.Lookup(topic, 0)
		return o.Offset
	}
	// caughtUp waits until the bridge committed the simulator's head.
	logs := &logReader{path: logPath}
	caughtUp := func() {
		t.Helper()
		head, _ := sim.Head()
		poll := 20 * time.Millisecond
		if logs.committedBlock() >= head-1 {
			poll = 2 * time.Millisecond
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			require.False(t, proc.Exited(), "bridge exited (%v); log tail:\n%s", proc.Err(), testenv.Tail(logPath, 20))
			require.True(t, time.Now().Before(deadline), "the bridge did not commit block %d in 2 minutes; log tail:\n%s", head, testenv.Tail(logPath, 20))
			if logs.committedBlock() >= head {
				return
			}
			time.Sleep(poll)
		}
	}
	start()
	caughtUp()

	var results []latencyResult
	for _, depth := range []int{10, 128} {
		var ms, rows, amp, own, peerMs, peerRecs, peerBytes []float64
		samples := *flagReorgSamples
		if depth > 10 {
			samples = *flagReorgDeep
		}
		for range samples {
			// Blocks one by one, each committed before the next: the
			// reorg then replaces depth one-block batches, as at the tip
			// (a batch that starts below the fork point is retracted
			// whole and replayed from its start).
			for range depth + 2 {
				sim.Mine(1)
				caughtUp()
			}
			logs.skip()
			from := highWater()
			require.NoError(t, sim.Reorg(depth, depth+1))
			deadline := time.Now().Add(time.Minute)
			for {
				require.True(t, time.Now().Before(deadline), "no commit after a reorg of depth %d in a minute; log tail:\n%s", depth, testenv.Tail(logPath, 20))
				require.False(t, proc.Exited(), "bridge exited (%v); log tail:\n%s", proc.Err(), testenv.Tail(logPath, 20))
				if d, n, ok := logs.reorgToCommit(); ok {
					ms = append(ms, d.Seconds()*1000)
					rows = append(rows, n)
					amp = append(amp, logs.ampWait.Seconds()*1000)
					own = append(own, (d-logs.ampWait).Seconds()*1000)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			recs := committedRecords(t, br.addr, topic, from, highWater())
			took, size := replayInTransaction(t, peer, recs)
			peerMs = append(peerMs, took.Seconds()*1000)
			peerRecs = append(peerRecs, float64(len(recs)))
			peerBytes = append(peerBytes, float64(size))
		}
		r := latencyOf(fmt.Sprintf("reorg-depth-%d", depth), ms, brokerName)
		r.Method = fmt.Sprintf("reorg of the last %d blocks (one-block batches, %d new blocks) at the tip, SELECT * at %d tx/block: the bridge's \"reorg\" log line (detection) "+
			"to its next \"committed\" line (retractions and replacement rows committed with the control event, then the Redis checkpoint written)",
			depth, depth+1, ampsim.DefaultTxPerBlock)
		slices.Sort(rows)
		r.Rows = rows[len(rows)/2]
		if logs.ampSeen {
			r.AmpWaitMs = amp
		}
		pr := latencyOf(r.Name, peerMs, brokerName)
		r.Peer = &latencyPeer{
			Method: "after each reorg, the records the bridge's reorg transaction wrote to the data topic (retractions and replacement rows, read back " +
				"read_committed) produced again by a bare franz-go transactional producer with the bridge's producer settings (linger 5 ms, 1 MiB batches, " +
				"no compression, acks all) into a 1-partition topic of its own on the same broker, BeginTransaction to the end of the commit; " +
				"no read-back, encoding, wait for Amp, control event or checkpoint",
			P50Ms: pr.P50Ms, P99Ms: pr.P99Ms, MaxMs: pr.MaxMs, AllMs: peerMs,
			Records: median(peerRecs), Bytes: median(peerBytes),
		}
		t.Logf("%s: p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d reorgs (%.0f replacement rows in the commit, median); load %s", r.Name, r.P50Ms, r.P99Ms, r.MaxMs, r.Samples, r.Rows, r.Load)
		t.Logf("%s peer (franz-go, the same %.0f records, %.0f bytes, in one transaction): p50 %.1f ms, p99 %.1f ms", r.Name, r.Peer.Records, r.Peer.Bytes, r.Peer.P50Ms, r.Peer.P99Ms)
		// The window includes Amp delivering the replacement microbatch
		// (here the simulator, in this process, on the same cores): the
		// bridge's own part is the rest.
		if !logs.ampSeen {
			results = append(results, r)
			t.Logf("%s: the bridge logs no \"replacement complete\" line (built before it): no split of Amp's part", r.Name)
			continue
		}
		ownR := latencyOf(r.Name, own, brokerName)
		r.OwnP50Ms, r.OwnP99Ms = ownR.P50Ms, ownR.P99Ms
		results = append(results, r)
		t.Logf("%s without waiting for Amp (the bridge's own part): p50 %.1f ms, p99 %.1f ms; waited for Amp: p50 %.1f ms",
			r.Name, ownR.P50Ms, ownR.P99Ms, latencyOf(r.Name, amp, brokerName).P50Ms)
	}

	// firstNew returns the time until the first committed record after
	// the data topic's current end.
	firstNew := func(restart func() time.Time) time.Duration {
		t.Helper()
		from := highWater()
		cons, err := kgo.NewClient(kgo.SeedBrokers(br.addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
			kgo.FetchMaxWait(50*time.Millisecond))
		require.NoError(t, err)
		defer cons.Close()
		at := restart()
		got := make(chan time.Time, 1)
		go func() {
			for {
				fs := cons.PollFetches(ctx)
				if ctx.Err() != nil {
					return
				}
				if fs.NumRecords() > 0 {
					got <- time.Now()
					return
				}
			}
		}()
		select {
		case when := <-got:
			return when.Sub(at)
		case <-time.After(2 * time.Minute):
			t.Fatalf("no new committed record 2 minutes after the restart; log tail:\n%s", testenv.Tail(logPath, 20))
			return 0
		}
	}
	var clean []float64
	for range *flagRestartSamples {
		caughtUp()
		require.Zero(t, proc.Term(30*time.Second), "bridge exit code; log tail:\n%s", testenv.Tail(logPath, 20))
		sim.Mine(5)
		d := firstNew(start)
		clean = append(clean, d.Seconds()*1000)
	}
	r := latencyOf("restart-clean", clean, brokerName)
	r.Method = "SIGTERM, 5 new blocks, exec of the bridge to the first new record a read_committed consumer positioned at the data topic's end receives"
	results = append(results, r)
	t.Logf("%s: p50 %.0f ms, max %.0f ms over %d; load %s", r.Name, r.P50Ms, r.MaxMs, r.Samples, r.Load)

	var killed []float64
	tries := 0
	for len(killed) < *flagRestartSamples {
		caughtUp()
		// Blocks keep coming so that a transaction is open most of the time.
		var mining atomic.Bool
		mining.Store(true)
		mined := make(chan struct{})
		go func() {
			defer close(mined)
			for mining.Load() {
				sim.Mine(1)
				time.Sleep(10 * time.Millisecond)
			}
		}()
		open := false
		deadline := time.Now().Add(20 * time.Second)
		for !open && time.Now().Before(deadline) {
			if highWater() > lastStable() {
				proc.Kill9()
				open = highWater() > lastStable()
				if !open {
					// Committed between the check and the kill: start again.
					mining.Store(false)
					<-mined
					break
				}
			}
		}
		mining.Store(false)
		<-mined
		tries++
		require.Less(t, tries, 5*(*flagRestartSamples)+10, "could not kill the bridge with a transaction open")
		if !open {
			if proc.Exited() {
				start()
			}
			continue
		}
		sim.Mine(5)
		d := firstNew(start)
		killed = append(killed, d.Seconds()*1000)
	}
	r = latencyOf("restart-kill9", killed, brokerName)
	r.Method = "kill -9 while a transaction is open on the data topic (high watermark above the last stable offset), 5 new blocks, exec of the bridge " +
		"to the first new record a read_committed consumer positioned at the data topic's end receives (includes fencing the zombie's transaction)"
	results = append(results, r)
	t.Logf("%s: p50 %.0f ms, max %.0f ms over %d (%d tries); load %s", r.Name, r.P50Ms, r.MaxMs, r.Samples, tries, r.Load)
	require.Zero(t, proc.Term(30*time.Second), "bridge exit code; log tail:\n%s", testenv.Tail(logPath, 20))
	if *flagLatencyJSON != "" {
		require.NoError(t, writeJSON(*flagLatencyJSON, latencyFile{Results: results}))
	}
}

// latencyOf summarizes samples in ms.
func latencyOf(name string, ms []float64, broker string) latencyResult {
	s := slices.Clone(ms)
	slices.Sort(s)
	return latencyResult{Name: name, Samples: len(s), P50Ms: quantile(s, 0.5), P99Ms: quantile(s, 0.99), MaxMs: s[len(s)-1],
		AllMs: ms, Load: loadAvg(), Broker: broker}
}

// median is the median of s (0 if empty).
func median(s []float64) float64 {
	c := slices.Clone(s)
	slices.Sort(c)
	return quantile(c, 0.5)
}

// committedRecords reads the committed records of partition 0 of topic in
// [from, until) with a read_committed consumer of its own.
func committedRecords(t *testing.T, addr, topic string, from, until int64) []*kgo.Record {
	t.Helper()
	if from >= until {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(20*time.Millisecond))
	require.NoError(t, err)
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		require.NoError(t, t.Context().Err())
		n := 0
		done := false
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			// The partition's last stable offset is at or past until:
			// every committed record before it has been returned once a
			// fetch comes back empty at or past the last one read.
			if p.LastStableOffset >= until && len(p.Records) == 0 {
				done = true
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < until {
				out = append(out, r)
				n++
			}
			if r.Offset >= until-1 {
				done = true
			}
		})
		if done || (n == 0 && len(out) > 0 && fs.Empty()) {
			return out
		}
		require.True(t, time.Now().Before(deadline), "reading %s@[%d, %d): %d records after 30 s", topic, from, until, len(out))
	}
}

// replayInTransaction produces recs (their keys, values and headers) in one
// transaction of cl and returns the time from BeginTransaction to the end of
// the commit, and the records' bytes (keys and values).
func replayInTransaction(t *testing.T, cl *kgo.Client, recs []*kgo.Record) (time.Duration, int) {
	t.Helper()
	ctx := t.Context()
	size := 0
	out := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		out[i] = &kgo.Record{Key: r.Key, Value: r.Value, Headers: r.Headers}
		size += len(r.Key) + len(r.Value)
	}
	var failed atomic.Pointer[error]
	at := time.Now()
	require.NoError(t, cl.BeginTransaction())
	for _, r := range out {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	require.NoError(t, cl.Flush(ctx))
	if e := failed.Load(); e != nil {
		require.NoError(t, *e, "the peer's produce")
	}
	require.NoError(t, cl.EndTransaction(ctx, kgo.TryCommit))
	return time.Since(at), size
}

// quantile is the nearest-rank quantile q of sorted s.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// logReader reads the bridge's JSON log as it grows.
type logReader struct {
	path   string
	offset int64
	// lastBlock is the highest block of a "committed" line.
	lastBlock uint64
	// reorgAt is the time of the first "reorg" line after skip, reorgRows
	// the rows the "retract" lines after it named.
	reorgAt time.Time
	// ampWait is the waited_for_amp of the "replacement complete" line
	// after reorgAt; ampSeen is set once such a line was read (a bridge
	// built before it logs none).
	ampWait time.Duration
	ampSeen bool
}

// logLine is the part of a bridge log line the harness reads.
type logLine struct {
	Time time.Time `json:"time"`
	Msg  string    `json:"msg"`
	To   string    `json:"to"`
	Rows float64   `json:"rows"`
	// WaitedForAmp is a "replacement complete" line's wait, in ns.
	WaitedForAmp int64 `json:"waited_for_amp"`
}

// lines reads the lines appended since the last call.
func (l *logReader) lines(f func(logLine)) {
	fh, err := os.Open(l.path)
	if err != nil {
		return
	}
	defer fh.Close()
	if _, err := fh.Seek(l.offset, 0); err != nil {
		return
	}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		b := sc.Bytes()
		if len(b) == 0 || b[0] != '{' {
			l.offset += int64(len(b)) + 1
			continue
		}
		var ln logLine
		if err := json.Unmarshal(b, &ln); err != nil {
			return // a line being written: read it next time
		}
		l.offset += int64(len(b)) + 1
		f(ln)
	}
}

// committedBlock returns the highest block a "committed" line named.
func (l *logReader) committedBlock() uint64 {
	l.lines(func(ln logLine) {
		if ln.Msg == "committed" {
			if b, ok := lastBlockOf(ln.To); ok {
				l.lastBlock = max(l.lastBlock, b)
			}
		}
	})
	return l.lastBlock
}

// skip reads past every line written so far.
func (l *logReader) skip() {
	l.committedBlock()
	l.reorgAt, l.ampWait = time.Time{}, 0
}

// reorgToCommit returns the time from the first "reorg" line after skip to
// the first "committed" line after it, and that commit's rows.
func (l *logReader) reorgToCommit() (time.Duration, float64, bool) {
	var d time.Duration
	var rows float64
	var ok bool
	l.lines(func(ln logLine) {
		switch {
		case ok:
		case ln.Msg == "reorg" && l.reorgAt.IsZero():
			l.reorgAt = ln.Time
		case ln.Msg == "replacement complete" && !l.reorgAt.IsZero():
			l.ampWait, l.ampSeen = time.Duration(ln.WaitedForAmp), true
		case ln.Msg == "committed" && !l.reorgAt.IsZero():
			d, rows, ok = ln.Time.Sub(l.reorgAt), ln.Rows, true
		}
		if ln.Msg == "committed" {
			if b, bok := lastBlockOf(ln.To); bok {
				l.lastBlock = max(l.lastBlock, b)
			}
		}
	})
	return d, rows, ok
}

// lastBlockOf parses the end block of the last range of a "committed"
// line's "to" attribute, as fmt prints []reorg.BlockRange
// ("[mainnet 100..=105 (0x…)]").
func lastBlockOf(s string) (uint64, bool) {
	i := strings.LastIndex(s, "..=")
	if i < 0 {
		return 0, false
	}
	rest := s[i+3:]
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j < 0 {
		j = len(rest)
	}
	n, err := strconv.ParseUint(rest[:j], 10, 64)
	return n, err == nil
}
