package perf

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// The takeover harness (issue #14 item 3): cluster mode's figures, measured,
// never asserted on. TestTakeover runs it on Apache Kafka and redis-server
// for make bench; BenchmarkTakeover runs one short round of it on kfake and
// miniredis in the unit pass (BRIDGE_TEST_BENCH_SMOKE=1), so that it cannot
// rot.
var (
	flagTakeover          = flag.Bool("perf.takeover", false, "run TestTakeover (cluster mode: kill -9 of a stream's owner, a rolling restart, the bare franz-go group failover; minutes; needs the Kafka jars and redis-server)")
	flagTakeoverKills     = flag.Int("perf.takeover-kills", 20, "kill -9s of the watched stream's owner that TestTakeover measures")
	flagTakeoverPeerKills = flag.Int("perf.takeover-peer-kills", 0, "kill -9s of the bare franz-go group member that TestTakeover measures (0: -perf.takeover-kills)")
	flagTakeoverMembers   = flag.Int("perf.takeover-members", 3, "bridge processes (and bare franz-go group members) of TestTakeover")
	flagTakeoverStreams   = flag.Int("perf.takeover-streams", 4, "streams the members of TestTakeover share (at least -perf.takeover-members)")
	flagTakeoverSession   = flag.Duration("perf.takeover-session", 6*time.Second, "cluster.session_timeout of TestTakeover (and the peer's session timeout)")
	flagTakeoverHeartbeat = flag.Duration("perf.takeover-heartbeat", 500*time.Millisecond, "cluster.heartbeat_interval of TestTakeover (and the peer's)")
	flagTakeoverJSON      = flag.String("perf.takeover-json", "", "file to write TestTakeover's figures to as JSON (make bench's report reads it)")
)

// The bare franz-go group member of the peer (TestTakeoverPeerMember, a
// child of the test binary) is configured through these.
const (
	envTakeoverPeerBroker    = "PERF_TAKEOVER_PEER_BROKER"
	envTakeoverPeerGroup     = "PERF_TAKEOVER_PEER_GROUP"
	envTakeoverPeerTopic     = "PERF_TAKEOVER_PEER_TOPIC"
	envTakeoverPeerSession   = "PERF_TAKEOVER_PEER_SESSION"
	envTakeoverPeerHeartbeat = "PERF_TAKEOVER_PEER_HEARTBEAT"
	// takeoverPeerPrefix starts each event line the peer member prints:
	// "takeover-peer assigned|revoked|lost UNIXNANO p,p,...".
	takeoverPeerPrefix = "takeover-peer "
	// takeoverBlockInterval is how often the simulator mines a block.
	takeoverBlockInterval = 100 * time.Millisecond
)

// takeoverResult is one figure of the takeover harness.
type takeoverResult struct {
	// Name is kill9-takeover, rolling-restart-pause or
	// franz-go-group-failover.
	Name    string    `json:"name"`
	Method  string    `json:"method"`
	Samples int       `json:"samples"`
	P50Ms   float64   `json:"p50_ms"`
	MaxMs   float64   `json:"max_ms"`
	AllMs   []float64 `json:"all_ms"`
	// PerStreamMaxMs is, for the rolling restart, each stream's longest
	// pause.
	PerStreamMaxMs map[string]float64 `json:"per_stream_max_ms,omitempty"`
	Load           string             `json:"load_average"`
	Broker         string             `json:"broker"`
}

// takeoverFile is what -perf.takeover-json holds.
type takeoverFile struct {
	Results           []takeoverResult `json:"results"`
	Members           int              `json:"members"`
	Streams           int              `json:"streams"`
	SessionTimeout    string           `json:"session_timeout"`
	HeartbeatInterval string           `json:"heartbeat_interval"`
	BlockInterval     string           `json:"block_interval"`
}

// takeoverSetup is what one run of the harness talks to.
type takeoverSetup struct {
	brokers, redis, registry, broker string
	dir, bin                         string
	members, streams                 int
	kills, peerKills                 int
	session, heartbeat               time.Duration
	// peerSession and peerHeartbeat are the peer's (0: session and
	// heartbeat; the smoke's are shorter, to save seconds).
	peerSession, peerHeartbeat time.Duration
}

// TestTakeover measures cluster mode's takeover with real `bridge run`
// processes (-perf.takeover-members, 3) sharing -perf.takeover-streams (4)
// streams on a private Apache Kafka broker and redis-server, the simulator
// mining a block every 100 ms, cluster.session_timeout 6s and
// heartbeat_interval 500ms:
//
//   - kill9-takeover: kill -9 of the owner of a watched stream (its
//     amp_bridge_cluster_stream_owned on /metrics), then the time to the
//     first record of that stream a read_committed consumer receives from
//     the new owner: at or above the data topic's end offset taken a
//     second after the kill, when everything the dead owner sent is in the
//     log and no other member can own the stream yet (the group gives it
//     away only after the session timeout); the producer epoch cannot
//     tell, since Kafka 4's transactions (KIP-890) bump it at every
//     commit. The killed member is restarted and the cluster settles
//     before the next kill (-perf.takeover-kills, 20);
//   - rolling-restart-pause: SIGTERM of each member in turn, restarted and
//     owning streams again before the next; the longest gap, per stream,
//     between two fetches of that stream's committed records by a
//     read_committed consumer (publishing paused for the consumer);
//   - franz-go-group-failover, the peer: bare franz-go group members
//     (TestTakeoverPeerMember, children of the test binary, the same
//     session timeout and heartbeat, cooperative-sticky) on a one-partition
//     topic; kill -9 of the partition's owner, then the time until another
//     member's OnPartitionsAssigned gets it: the group protocol's floor.
//
// Nothing is asserted on the timings. Skipped unless -perf.takeover is
// given (make bench).
func TestTakeover(t *testing.T) {
	if !*flagTakeover {
		t.Skip("takeover harness: run with -perf.takeover (make bench)")
	}
	dir := *flagOut
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, "takeover")
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	bin := *flagBridge
	if bin == "" {
		bin = bridgetest.Build(t, false)
	}
	rs := testenv.StartRedisServer(t)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	t.Cleanup(reg.Close)
	br := startKafka(t, dir)
	peerKills := *flagTakeoverPeerKills
	if peerKills == 0 {
		peerKills = *flagTakeoverKills
	}
	out := runTakeover(t, takeoverSetup{brokers: br.addr, redis: rs.Addr(), registry: reg.URL,
		broker: kafkaBrokerName(), dir: dir, bin: bin,
		members: *flagTakeoverMembers, streams: *flagTakeoverStreams, kills: *flagTakeoverKills, peerKills: peerKills,
		session: *flagTakeoverSession, heartbeat: *flagTakeoverHeartbeat})
	if *flagTakeoverJSON != "" {
		require.NoError(t, writeJSON(*flagTakeoverJSON, out))
	}
}

// BenchmarkTakeover is TestTakeover's smoke: one kill -9, one rolling
// restart and one kill of the peer, on kfake and miniredis in the test
// process (three with -perf.takeover-kills unless BRIDGE_TEST_BENCH_SMOKE=1),
// the peer with a 1 s session timeout to save seconds in make test.
// Its figures are reported as metrics but mean little: kfake is not Kafka.
func BenchmarkTakeover(b *testing.B) {
	kills := min(*flagTakeoverKills, 3)
	if testenv.BenchSmoke() {
		kills = 1
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1), kfake.GroupMinSessionTimeout(time.Second))
	require.NoError(b, err)
	b.Cleanup(kc.Close)
	mr := miniredis.RunT(b)
	reg := httptest.NewServer(srfake.NewRegistry().Handler())
	b.Cleanup(reg.Close)
	bin := *flagBridge
	if bin == "" {
		bin = bridgetest.Build(b, false)
	}
	for b.Loop() {
		dir := b.TempDir()
		out := runTakeover(b, takeoverSetup{brokers: strings.Join(kc.ListenAddrs(), ","), redis: mr.Addr(), registry: reg.URL,
			broker: "kfake (in the test process)", dir: dir, bin: bin, members: 3, streams: 3, kills: kills, peerKills: kills,
			session: 6 * time.Second, heartbeat: 500 * time.Millisecond, peerSession: time.Second, peerHeartbeat: 300 * time.Millisecond})
		for _, r := range out.Results {
			b.ReportMetric(r.MaxMs, r.Name+"-max-ms")
		}
	}
}

// runTakeover runs the harness of TestTakeover on s and returns its
// figures.
func runTakeover(tb testing.TB, s takeoverSetup) takeoverFile {
	tb.Helper()
	require.GreaterOrEqual(tb, s.streams, s.members, "-perf.takeover-streams: want at least one stream per member")
	require.GreaterOrEqual(tb, s.members, 2, "-perf.takeover-members: want 2 or more")
	sim, err := ampsim.New(ampsim.Config{
		NetworkConfig:       ampsim.NetworkConfig{InitialBlocks: 20, TxPerBlock: 5, LogsPerTx: -1},
		MaxMicrobatchBlocks: 10,
	})
	require.NoError(tb, err)
	require.NoError(tb, sim.Start(tb.Context()))
	tb.Cleanup(func() { _ = sim.Close() })
	mining := make(chan struct{})
	mined := make(chan struct{})
	go func() {
		defer close(mined)
		tick := time.NewTicker(takeoverBlockInterval)
		defer tick.Stop()
		for {
			select {
			case <-mining:
				return
			case <-tick.C:
				sim.Mine(1)
			}
		}
	}()
	defer func() { close(mining); <-mined }()

	c := newTakeoverCluster(tb, s, sim.Addr())
	for i := range s.members {
		c.start(i)
	}
	c.settle()
	w := newCommitWatch(tb, s.brokers, c.topics)
	c.watch = w
	c.settle()

	out := takeoverFile{Members: s.members, Streams: s.streams, SessionTimeout: s.session.String(),
		HeartbeatInterval: s.heartbeat.String(), BlockInterval: takeoverBlockInterval.String()}

	// kill -9 of the watched stream's owner.
	watched, topic := c.streams[0], c.topics[0]
	acl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(s.brokers, ",")...))
	require.NoError(tb, err)
	defer acl.Close()
	adm := kadm.NewClient(acl)
	var killed []float64
	for tries := 0; len(killed) < s.kills; tries++ {
		require.Less(tb, tries, 2*s.kills+5, "too many kills discarded (the end offset read too late after the kill)")
		owner := c.ownerOf(watched)
		killPause(s.heartbeat)
		w.waitRecord(topic, time.Now(), c.tails)
		at := time.Now()
		c.procs[owner].Kill9()
		time.Sleep(time.Second)
		ends, err := adm.ListEndOffsets(tb.Context(), topic)
		require.NoError(tb, err)
		end, ok := ends.Lookup(topic, 0)
		require.True(tb, ok, "no end offset of %s", topic)
		require.NoError(tb, end.Err)
		// Read later than the session timeout minus a heartbeat after the
		// kill (a starved machine), the end offset may hold the new owner's
		// records already: the kill is not counted.
		readAfter := time.Since(at)
		late := readAfter >= s.session-s.heartbeat
		d := w.waitFrom(topic, at, end.Offset, 2*time.Minute, c.tails)
		// The records above the end offset are the new owner's only if the
		// killed member was the owner: the stream must have moved.
		moved := c.ownerOther(watched, owner)
		if late {
			tb.Logf("kill %d: the end offset was read %v after it: not counted", tries+1, readAfter.Round(time.Millisecond))
		} else {
			killed = append(killed, ms(d))
			tb.Logf("kill %d of %d: member %d owned %s, member %d took it over; its first record %v after the kill; load %s", len(killed), s.kills, owner, watched,
				moved, d.Round(time.Millisecond), loadAvg())
		}
		c.start(owner)
		c.settle()
	}
	r := takeoverOf("kill9-takeover", killed, s.broker)
	r.Method = fmt.Sprintf("%d bridge run processes in cluster mode sharing %d streams (session_timeout %s, heartbeat_interval %s, a block mined every %s): "+
		"kill -9 of the owner of one stream (amp_bridge_cluster_stream_owned on /metrics; 1 s plus a random part of a heartbeat after the streams spread), to the first record of that stream "+
		"a read_committed consumer receives at or above the data topic's end offset taken 1 s after the kill (the new owner's); the killed member restarted and the streams spread again before the next kill",
		s.members, s.streams, s.session, s.heartbeat, takeoverBlockInterval)
	out.Results = append(out.Results, r)
	tb.Logf("%s: p50 %.0f ms, max %.0f ms over %d kills; load %s", r.Name, r.P50Ms, r.MaxMs, r.Samples, r.Load)

	// A rolling restart.
	from := time.Now()
	for i := range s.members {
		code := c.procs[i].Term(30 * time.Second)
		require.Zero(tb, code, "member %d exit code after SIGTERM; log tail:\n%s", i, c.procs[i].Tail(20))
		c.start(i)
		c.settle()
	}
	to := time.Now()
	per := map[string]float64{}
	var gaps []float64
	for i, tp := range c.topics {
		g := w.longestGap(tp, from, to)
		per[c.streams[i]] = ms(g)
		gaps = append(gaps, ms(g))
	}
	r = takeoverOf("rolling-restart-pause", gaps, s.broker)
	r.PerStreamMaxMs = per
	r.Method = fmt.Sprintf("SIGTERM of each of the %d members in turn (it stops its streams, committing at a watermark or aborting, and leaves the group), "+
		"restarted and owning streams again before the next; per stream, the longest gap between two fetches of its committed records by a read_committed "+
		"consumer from the first SIGTERM to the end (%s)", s.members, to.Sub(from).Round(time.Second))
	out.Results = append(out.Results, r)
	tb.Logf("%s: longest pause %.0f ms (per stream %v) in %s; load %s", r.Name, r.MaxMs, per, to.Sub(from).Round(time.Millisecond), r.Load)

	// The peer.
	r = peerFailover(tb, s)
	out.Results = append(out.Results, r)
	tb.Logf("%s: p50 %.0f ms, max %.0f ms over %d kills; load %s", r.Name, r.P50Ms, r.MaxMs, r.Samples, r.Load)
	for i := range s.members {
		require.Zero(tb, c.procs[i].Term(30*time.Second), "member %d exit code after SIGTERM; log tail:\n%s", i, c.procs[i].Tail(20))
	}
	return out
}

// killPause waits a second and a random part of a heartbeat interval
// before a kill, in both harnesses: a kill right after a rebalance (when the
// coordinator last heard of the member) would take a whole session timeout,
// one a heartbeat later up to a heartbeat less, so the kill must not be in
// step with the heartbeats.
func killPause(heartbeat time.Duration) {
	time.Sleep(time.Second + rand.N(heartbeat))
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return d.Seconds() * 1000 }

// takeoverOf summarizes samples in ms.
func takeoverOf(name string, all []float64, broker string) takeoverResult {
	s := slices.Clone(all)
	slices.Sort(s)
	r := takeoverResult{Name: name, Samples: len(s), AllMs: all, Load: loadAvg(), Broker: broker}
	if len(s) > 0 {
		r.P50Ms, r.MaxMs = quantile(s, 0.5), s[len(s)-1]
	}
	return r
}

// takeoverCluster is the members of one cluster: the same configuration,
// each with its own /metrics address.
type takeoverCluster struct {
	tb      testing.TB
	bin     string
	dir     string
	cfgs    []string
	metrics []string
	procs   []*bridgetest.Proc
	starts  []int
	streams []string
	topics  []string
	watch   *commitWatch
}

// newTakeoverCluster writes the members' configurations.
func newTakeoverCluster(tb testing.TB, s takeoverSetup, ampAddr string) *takeoverCluster {
	tb.Helper()
	name := fmt.Sprintf("tko-%d", time.Now().UnixNano()%1_000_000)
	c := &takeoverCluster{tb: tb, bin: s.bin, dir: s.dir, procs: make([]*bridgetest.Proc, s.members), starts: make([]int, s.members)}
	var streams strings.Builder
	for i := range s.streams {
		id := fmt.Sprintf("s%d", i)
		c.streams = append(c.streams, id)
		c.topics = append(c.topics, name+"."+id)
		fmt.Fprintf(&streams, `  - id: %s
    sql: "SELECT * FROM eth_rpc.transactions SETTINGS stream = true"
    topic: %s
    partitions: 1
    retention_blocks: 256
    head_poll_interval: -1s
`, id, name+"."+id)
	}
	for i := range s.members {
		addr := freeAddr(tb)
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
cluster:
  enabled: true
  group: %s.cluster
  topic: %s.cluster
  session_timeout: %s
  heartbeat_interval: %s
http:
  addr: %s
log:
  level: info
  format: json
streams:
%s`, ampAddr, s.brokers, name, name, s.registry, s.redis, name, name, name, s.session, s.heartbeat, addr, streams.String())
		path := filepath.Join(s.dir, fmt.Sprintf("member-%d.yaml", i))
		require.NoError(tb, os.WriteFile(path, []byte(cfg), 0o644))
		c.cfgs = append(c.cfgs, path)
		c.metrics = append(c.metrics, "http://"+addr+"/metrics")
	}
	return c
}

// start starts member i (again), its log in its own file per start.
func (c *takeoverCluster) start(i int) {
	c.tb.Helper()
	c.starts[i]++
	log := filepath.Join(c.dir, fmt.Sprintf("member-%d.%d.log", i, c.starts[i]))
	c.procs[i] = bridgetest.Start(c.tb, c.bin, c.cfgs[i], log)
}

// tails is the end of every member's log, for failure messages.
func (c *takeoverCluster) tails() string {
	var b strings.Builder
	for i, p := range c.procs {
		if p != nil {
			fmt.Fprintf(&b, "--- member %d (exited %v):\n%s\n", i, p.Exited(), p.Tail(15))
		}
	}
	return b.String()
}

// owned returns, per live member, the streams its /metrics say it owns
// (nil when it cannot be scraped).
func (c *takeoverCluster) owned() [][]string {
	out := make([][]string, len(c.procs))
	for i, p := range c.procs {
		if p == nil || p.Exited() {
			continue
		}
		ctx, cancel := context.WithTimeout(c.tb.Context(), 2*time.Second)
		m, err := scrapeByStream(ctx, c.metrics[i])
		cancel()
		if err != nil {
			continue
		}
		for id, v := range m["amp_bridge_cluster_stream_owned"] {
			if v == 1 {
				out[i] = append(out[i], id)
			}
		}
	}
	return out
}

// ownerOf returns the member that owns stream id now.
func (c *takeoverCluster) ownerOf(id string) int {
	c.tb.Helper()
	for i, ids := range c.owned() {
		if slices.Contains(ids, id) {
			return i
		}
	}
	require.FailNow(c.tb, "no member owns stream "+id, c.tails())
	return -1
}

// ownerOther waits (a minute at most) until a member other than old owns
// stream id, and returns it.
func (c *takeoverCluster) ownerOther(id string, old int) int {
	c.tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		for i, ids := range c.owned() {
			if i != old && slices.Contains(ids, id) {
				return i
			}
		}
		require.True(c.tb, time.Now().Before(deadline), "stream %s did not move from member %d in a minute: %v; logs:\n%s", id, old, c.owned(), c.tails())
		time.Sleep(20 * time.Millisecond)
	}
}

// settle waits until every stream has one owner, every member owns a
// stream, and (once the watch runs) every stream committed records after
// that.
func (c *takeoverCluster) settle() {
	c.tb.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		for i, p := range c.procs {
			require.False(c.tb, p.Exited(), "member %d exited (%v); logs:\n%s", i, p.Err(), c.tails())
		}
		require.True(c.tb, time.Now().Before(deadline), "the streams did not spread over the members in 3 minutes: %v; logs:\n%s", c.owned(), c.tails())
		if c.spread() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if c.watch == nil {
		return
	}
	at := time.Now()
	for _, tp := range c.topics {
		c.watch.waitRecord(tp, at, c.tails)
	}
}

// spread reports whether every stream has exactly one owner and every
// member owns one or more.
func (c *takeoverCluster) spread() bool {
	n := map[string]int{}
	for _, ids := range c.owned() {
		if len(ids) == 0 {
			return false
		}
		for _, id := range ids {
			n[id]++
		}
	}
	for _, id := range c.streams {
		if n[id] != 1 {
			return false
		}
	}
	return true
}

// fetchSeen is one fetch of a topic's committed records.
type fetchSeen struct {
	at time.Time
	// last is the offset of its last record.
	last int64
}

// commitWatch reads the data topics read_committed from their end and
// notes when each fetch of each topic arrived and its last offset (the
// topics have one partition).
type commitWatch struct {
	tb   testing.TB
	cl   *kgo.Client
	mu   sync.Mutex
	seen map[string][]fetchSeen
	done chan struct{}
}

// newCommitWatch starts reading topics (which must exist); it stops when
// the test ends.
func newCommitWatch(tb testing.TB, brokers string, topics []string) *commitWatch {
	tb.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(50*time.Millisecond))
	require.NoError(tb, err)
	w := &commitWatch{tb: tb, cl: cl, seen: map[string][]fetchSeen{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(w.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			w.mu.Lock()
			fs.EachTopic(func(ft kgo.FetchTopic) {
				last := int64(-1)
				ft.EachRecord(func(r *kgo.Record) { last = max(last, r.Offset) })
				if last >= 0 {
					w.seen[ft.Topic] = append(w.seen[ft.Topic], fetchSeen{at: now, last: last})
				}
			})
			w.mu.Unlock()
		}
	}()
	tb.Cleanup(func() { cancel(); <-w.done; cl.Close() })
	return w
}

// waitRecord waits (a minute at most) until a fetch of topic arrives after
// since.
func (w *commitWatch) waitRecord(topic string, since time.Time, tails func() string) {
	w.tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		w.mu.Lock()
		s := w.seen[topic]
		ok := len(s) > 0 && s[len(s)-1].at.After(since)
		w.mu.Unlock()
		if ok {
			return
		}
		require.True(w.tb, time.Now().Before(deadline), "no committed record of %s in a minute; logs:\n%s", topic, tails())
		time.Sleep(5 * time.Millisecond)
	}
}

// waitFrom waits until a record of topic at offset from or above arrives,
// and returns the time from at to its arrival.
func (w *commitWatch) waitFrom(topic string, at time.Time, from int64, limit time.Duration, tails func() string) time.Duration {
	w.tb.Helper()
	deadline := at.Add(limit)
	for {
		w.mu.Lock()
		for _, f := range w.seen[topic] {
			if f.last >= from {
				w.mu.Unlock()
				return f.at.Sub(at)
			}
		}
		w.mu.Unlock()
		require.True(w.tb, time.Now().Before(deadline), "no committed record of %s at offset %d or above (a new owner's) %s after the kill; logs:\n%s", topic, from, limit, tails())
		time.Sleep(5 * time.Millisecond)
	}
}

// longestGap returns the longest time in [from, to] without a fetch of
// topic's committed records.
func (w *commitWatch) longestGap(topic string, from, to time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	last := from
	var gap time.Duration
	for _, f := range w.seen[topic] {
		if f.at.Before(from) {
			continue
		}
		if f.at.After(to) {
			break
		}
		gap = max(gap, f.at.Sub(last))
		last = f.at
	}
	return max(gap, to.Sub(last))
}

// TestTakeoverPeerMember is the peer of the takeover harness, run as a child
// of the test binary: a bare franz-go consumer group member (kgo defaults:
// the cooperative-sticky balancer) of PERF_TAKEOVER_PEER_GROUP on
// PERF_TAKEOVER_PEER_TOPIC, which prints a line per assignment, revocation
// and loss with the time, until SIGTERM. Without PERF_TAKEOVER_PEER_GROUP it
// returns at once.
func TestTakeoverPeerMember(t *testing.T) {
	group := os.Getenv(envTakeoverPeerGroup)
	if group == "" {
		return // not a child of the harness: nothing to do
	}
	session, err := time.ParseDuration(os.Getenv(envTakeoverPeerSession))
	require.NoError(t, err)
	heartbeat, err := time.ParseDuration(os.Getenv(envTakeoverPeerHeartbeat))
	require.NoError(t, err)
	topic := os.Getenv(envTakeoverPeerTopic)
	event := func(kind string) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			var ps []string
			for _, p := range m[topic] {
				ps = append(ps, strconv.Itoa(int(p)))
			}
			fmt.Printf("%s%s %d %s\n", takeoverPeerPrefix, kind, time.Now().UnixNano(), strings.Join(ps, ","))
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(os.Getenv(envTakeoverPeerBroker), ",")...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.SessionTimeout(session), kgo.HeartbeatInterval(heartbeat),
		kgo.OnPartitionsAssigned(event("assigned")), kgo.OnPartitionsRevoked(event("revoked")), kgo.OnPartitionsLost(event("lost")))
	require.NoError(t, err)
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	for ctx.Err() == nil {
		cl.PollFetches(ctx)
	}
}

// peerMember is one running TestTakeoverPeerMember.
type peerMember struct {
	p   *testenv.Process
	log string
}

// peerEvent is a line TestTakeoverPeerMember printed.
type peerEvent struct {
	kind  string
	at    time.Time
	parts []string
}

// events returns the member's event lines so far.
func (m peerMember) events() []peerEvent {
	b, err := os.ReadFile(m.log)
	if err != nil {
		return nil
	}
	var out []peerEvent
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), takeoverPeerPrefix)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		ev := peerEvent{kind: f[0], at: time.Unix(0, ns)}
		if len(f) > 2 {
			ev.parts = strings.Split(f[2], ",")
		}
		out = append(out, ev)
	}
	return out
}

// joined reports whether the member completed a rebalance.
func (m peerMember) joined() bool {
	return slices.ContainsFunc(m.events(), func(e peerEvent) bool { return e.kind == "assigned" })
}

// owns reports whether the member holds partition 0 now.
func (m peerMember) owns() bool {
	own := false
	for _, e := range m.events() {
		if slices.Contains(e.parts, "0") {
			own = e.kind == "assigned"
		}
	}
	return own
}

// assignedAfter returns when the member got partition 0 after at.
func (m peerMember) assignedAfter(at time.Time) (time.Time, bool) {
	for _, e := range m.events() {
		if e.kind == "assigned" && e.at.After(at) && slices.Contains(e.parts, "0") {
			return e.at, true
		}
	}
	return time.Time{}, false
}

// peerFailover measures the bare franz-go group failover: s.members members
// of a group on a one-partition topic, s.peerKills kill -9s of the owner.
func peerFailover(tb testing.TB, s takeoverSetup) takeoverResult {
	tb.Helper()
	session, heartbeat := s.session, s.heartbeat
	if s.peerSession > 0 {
		session, heartbeat = s.peerSession, s.peerHeartbeat
	}
	name := fmt.Sprintf("tko-peer-%d", time.Now().UnixNano()%1_000_000)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(s.brokers, ",")...))
	require.NoError(tb, err)
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(tb.Context(), 1, 1, nil, name)
	require.NoError(tb, err)
	self, err := os.Executable()
	require.NoError(tb, err)
	members := make([]peerMember, s.members)
	starts := make([]int, s.members)
	start := func(i int) {
		starts[i]++
		log := filepath.Join(s.dir, fmt.Sprintf("peer-%d.%d.log", i, starts[i]))
		cmd := exec.CommandContext(context.Background(), self, "-test.run", "^TestTakeoverPeerMember$", "-test.count", "1")
		cmd.Env = append(os.Environ(), envTakeoverPeerBroker+"="+s.brokers, envTakeoverPeerGroup+"="+name, envTakeoverPeerTopic+"="+name,
			envTakeoverPeerSession+"="+session.String(), envTakeoverPeerHeartbeat+"="+heartbeat.String())
		p, err := testenv.StartProcess(cmd, log)
		require.NoError(tb, err)
		tb.Cleanup(p.Kill9)
		members[i] = peerMember{p: p, log: log}
	}
	tails := func() string {
		var b strings.Builder
		for i, m := range members {
			fmt.Fprintf(&b, "--- peer member %d (exited %v):\n%s\n", i, m.p.Exited(), testenv.Tail(m.log, 10))
		}
		return b.String()
	}
	// settle waits until every member joined and one owns the partition.
	settle := func() int {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			owner, owners, joined := -1, 0, true
			for i, m := range members {
				require.False(tb, m.p.Exited(), "peer member %d exited; logs:\n%s", i, tails())
				joined = joined && m.joined()
				if m.owns() {
					owner, owners = i, owners+1
				}
			}
			if joined && owners == 1 {
				return owner
			}
			require.True(tb, time.Now().Before(deadline), "the peer members did not settle in 2 minutes; logs:\n%s", tails())
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range members {
		start(i)
	}
	var all []float64
	for k := range s.peerKills {
		owner := settle()
		killPause(heartbeat)
		at := time.Now()
		members[owner].p.Kill9()
		deadline := at.Add(2 * time.Minute)
		var d time.Duration
		for found := false; !found; {
			for i, m := range members {
				if i == owner {
					continue
				}
				if when, ok := m.assignedAfter(at); ok {
					d, found = when.Sub(at), true
				}
			}
			require.True(tb, found || time.Now().Before(deadline), "no peer member got the partition 2 minutes after the kill; logs:\n%s", tails())
			time.Sleep(5 * time.Millisecond)
		}
		all = append(all, ms(d))
		tb.Logf("peer kill %d of %d: member %d owned the partition; another got it %v after the kill", k+1, s.peerKills, owner, d.Round(time.Millisecond))
		start(owner)
	}
	settle()
	for _, m := range members {
		m.p.Term(10 * time.Second)
	}
	r := takeoverOf("franz-go-group-failover", all, s.broker)
	r.Method = fmt.Sprintf("the peer: %d bare franz-go consumer group members (kgo defaults, cooperative-sticky; session timeout %s, heartbeat %s; children of the test binary) "+
		"on a one-partition topic: kill -9 of the partition's owner (1 s plus a random part of a heartbeat after every member joined) to another member's OnPartitionsAssigned with it (its clock); the killed member restarted "+
		"and joined before the next kill. The group protocol's floor for any takeover", s.members, session, heartbeat)
	return r
}

// TestTakeoverHarness checks the harness's bookkeeping on made-up events:
// the longest gap counts the window's edges, a fetch below the end offset
// taken after the kill is not the new owner's, and the peer member's log
// says who holds the partition.
func TestTakeoverHarness(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := &commitWatch{tb: t, seen: map[string][]fetchSeen{"s0": {
		{at: at(-500), last: 10}, {at: at(100), last: 20}, {at: at(250), last: 30}, {at: at(3250), last: 42}, {at: at(3300), last: 50},
	}}}
	require.Equal(t, 3*time.Second, w.longestGap("s0", at(0), at(3400)), "the gap from 250 to 3250 ms")
	require.Equal(t, 2*time.Second, w.longestGap("s0", at(3300), at(5300)), "the gap to the window's end")
	require.Equal(t, 3250*time.Millisecond, w.waitFrom("s0", at(0), 32, time.Hour, func() string { return "" }),
		"fetches below the end offset taken after the kill (the old owner's) do not count")

	log := filepath.Join(t.TempDir(), "peer.log")
	require.NoError(t, os.WriteFile(log, []byte("=== RUN   TestTakeoverPeerMember\n"+
		takeoverPeerPrefix+"assigned 1000 \n"+
		takeoverPeerPrefix+"assigned 2000 0\n"+
		takeoverPeerPrefix+"revoked 3000 0\n"+
		takeoverPeerPrefix+"assigned 4000 0\n"), 0o644))
	m := peerMember{log: log}
	require.True(t, m.joined())
	require.True(t, m.owns())
	got, ok := m.assignedAfter(time.Unix(0, 2500))
	require.True(t, ok)
	require.Equal(t, time.Unix(0, 4000), got)
	require.NoError(t, os.WriteFile(log, []byte(takeoverPeerPrefix+"assigned 1000 \n"+takeoverPeerPrefix+"assigned 2000 0\n"+takeoverPeerPrefix+"lost 3000 0\n"), 0o644))
	require.False(t, m.owns(), "a lost partition is not held")
	_, ok = m.assignedAfter(time.Unix(0, 2500))
	require.False(t, ok)
}
