package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/offsets"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/reorg"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

var flagClusterKills = flag.Int("e2e.cluster-kills", 3,
	"kill -9 of random members in TestIntegrationCluster (issue #14's full schedule: 10)")

// clusterStreams are the streams the cluster test's members share; the
// first two backfill the simulator's history.
var clusterStreams = []string{"c0", "c1", "c2", "c3", "c4", "c5"}

const clusterBackfills = 2

// TestIntegrationCluster runs issue #14's cluster under faults with the
// real binary, the real broker and redis-server: members (`bridge run`
// processes with one configuration, cluster.enabled) share six streams,
// two of them backfilling the history the simulator has, while the chain
// mines and reorgs. The schedule (seeded, -e2e.seed): random kill -9 of
// members (-e2e.cluster-kills, each restarted once the others took its
// streams over), a fourth member that joins and later leaves, one SIGSTOP
// of a stream's owner for longer than the session timeout then SIGCONT, and
// a rolling restart (SIGTERM, restart, wait for the rejoin, one member at a
// time). After each fault every stream has exactly one owner among the
// live members (amp_bridge_cluster_stream_owned) and the streams the fault
// moved commit again.
//
// The paused owner is proved unable to commit once it resumes: the data
// topics, read with franz-go, hold no committed record of its producer
// epochs past the offsets they had when it stopped, the new owner
// committed on every one of its streams before the SIGCONT, and no
// producer's committed epochs go backwards along a partition over the whole
// run (checkEpochs). The resumed process says its session ended, releases
// the streams and stays a member (it does not loop on fencing).
//
// At the end the chain stops, every stream commits the head, the members
// stop on SIGTERM (exit 0), and bridge verify and the independent Confluent
// consumer agree for every stream: nothing missing, duplicated or left
// unretracted.
func TestIntegrationCluster(t *testing.T) {
	t.Parallel()
	kills := *flagClusterKills
	require.GreaterOrEqual(t, kills, 1, "-e2e.cluster-kills must be at least 1")
	python := testenv.Python(t)
	bin := buildBridge(t)
	t.Cleanup(func() { holdOnFailure(t.Failed(), t.Logf) })
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 14))
	t0 := time.Now()

	// One transaction a block: six topics' worth of records for the
	// checkers, which take most of the time after the schedule.
	sim := bridgetest.StartSim(t, ampsim.NetworkConfig{InitialBlocks: 120, TxPerBlock: 1, LogsPerTx: -1})
	// No initial rebalance delay: the first members need not wait 3s for
	// more to come.
	broker := testenv.StartKafkaBroker(t, testenv.WithProperties("group.initial.rebalance.delay.ms=0",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"))
	rs := testenv.StartRedisServer(t)
	regs := testenv.RegistryBackends(t)
	s := &stack{t: t, redis: rs.Addr(), Stack: bridgetest.Stack{
		Sim: sim, Brokers: []string{broker.Addr()}, Registry: regs[len(regs)-1].Addr,
		Dir: runDir(t), Bin: bin, Stream: clusterStreams[0],
	}}
	name := testenv.UniqueName(t, "cl")
	c := newCluster(t, s, name)
	lf, err := os.Create(filepath.Join(s.Dir, "schedule.log"))
	require.NoError(t, err)
	defer lf.Close()
	c.tl = &trialLog{t: t, f: lf}
	c.tl.Logf("cluster: %d kills, seed %d (rerun with -e2e.seed=%d); logs in %s", kills, seed, seed, s.Dir)

	m := startMiner(sim, rng, 250*time.Millisecond, 8, 3)
	defer m.Stop()
	for range 3 {
		c.start()
	}
	c.waitStable("at the start", nil, 90*time.Second)

	// The schedule: kills spread around the join, the pause and the leave.
	killsAt := func(phase int) int { return (kills*(phase+1))/3 - (kills*phase)/3 }
	fourth := -1
	for phase := range 3 {
		for range killsAt(phase) {
			time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
			c.kill9(rng)
		}
		switch phase {
		case 0:
			fourth = c.start()
			c.waitFor("the 4th member owns a stream", 60*time.Second, func() bool { return len(c.owned(fourth)) > 0 })
			c.waitStable("after a 4th member joined", nil, 60*time.Second)
			c.tl.Logf("member %d joined and owns %v", fourth, c.owned(fourth))
		case 1:
			c.pause(rng)
		case 2:
			if c.members[fourth].gone { // killed meanwhile: the newest leaves
				live := c.live()
				fourth = live[len(live)-1].n
			}
			c.leave(fourth)
		}
	}
	c.rollingRestart()

	// Catch up with a fixed head, then stop every member gracefully.
	time.Sleep(time.Second)
	m.Stop()
	head, ok := sim.Head()
	require.True(t, ok)
	want, _ := sim.BlockHash(head)
	c.waitFor(fmt.Sprintf("every stream commits the head %d", head), 90*time.Second, func() bool {
		for _, id := range clusterStreams {
			if pt := c.ctl.point(id); pt.Number != head || pt.Hash != want {
				return false
			}
		}
		return true
	})
	for _, mb := range c.live() {
		code := mb.p.Term(45 * time.Second)
		assert.Equal(t, 0, code, "member %d must exit 0 on SIGTERM; log tail:\n%s", mb.n, mb.p.Tail(30))
	}
	c.tl.Logf("schedule done in %s: head %d, %d blocks mined and %d reorgs while running; %d members started, %d takeovers after kill -9 (%s)",
		time.Since(t0).Round(time.Millisecond), head, m.mined.Load(), m.reorgs.Load(), len(c.members), len(c.takeovers), c.takeoverFigures())

	// The paused owner's producers committed nothing once fenced.
	c.checkPausedFenced()
	// The oracles, per stream: bridge verify on one stream while the
	// consumer reads another (more at once starve a loaded machine).
	checked := time.Now()
	type result struct {
		vr  verifyResult
		cr  consumerResult
		err error
	}
	results := make([]result, len(clusterStreams))
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for i, id := range clusterStreams {
			results[i].cr, results[i].err = c.streamStack(id).runConsumer(python, head)
		}
	}()
	for i, id := range clusterStreams {
		// A verify that timed out on a service (a loaded machine) gave no
		// verdict: it runs again, twice at most.
		for try := 0; ; try++ {
			results[i].vr = c.streamStack(id).verify(t)
			if vr := results[i].vr; vr.exit == 0 || strings.Contains(vr.out, "verdict:") || !strings.Contains(vr.out, "did not answer") || try == 2 {
				break
			}
			c.tl.Logf("bridge verify -stream %s gave no verdict (%s): again", id, strings.TrimSpace(results[i].vr.out))
		}
	}
	verified := time.Since(checked)
	<-consumed
	for i, id := range clusterStreams {
		ss := c.streamStack(id)
		c.tl.Logf("stream %s (topic %s):", id, ss.Topic)
		require.NoError(t, results[i].err)
		checkTopicResults(t, ss, head, results[i].vr, results[i].cr, c.tl.Logf)
	}
	c.tl.Logf("bridge verify on %d streams took %s, with the consumer beside it %s", len(clusterStreams),
		verified.Round(time.Millisecond), time.Since(checked).Round(time.Millisecond))
	restarts, fenced := 0, 0
	for _, mb := range c.members {
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
			assert.Zero(t, grepCount(mb.p.Log, bad), "%s contains %q:\n%s", filepath.Base(mb.p.Log), bad, testenv.Tail(mb.p.Log, 60))
		}
		// A member stops what it loses before it rejoins: its streams
		// never outlive their release, and no new owner fences a member
		// that was not paused.
		const stuck = "did not stop within the bound"
		assert.Zero(t, grepCount(mb.p.Log, stuck), "%s: a released stream went on running:\n%s", filepath.Base(mb.p.Log), grepLines(mb.p.Log, stuck))
		f := grepCount(mb.p.Log, "another producer took the stream's transactional id")
		if mb.n != c.pausedMember {
			assert.Zero(t, f, "%s: a stream of a member that was not paused was fenced", filepath.Base(mb.p.Log))
		}
		restarts += grepCount(mb.p.Log, `msg="restarting`)
		fenced += f
	}
	c.tl.Logf("over every member: %d stream restarts, %d fenced streams; wall time %s", restarts, fenced, time.Since(t0).Round(time.Millisecond))
}

// clusterMember is one `bridge run` process of the cluster test.
type clusterMember struct {
	n      int
	p      *bridgetest.Proc
	addr   string
	paused bool
	gone   bool
}

// clusterRun is the state of the cluster test.
type clusterRun struct {
	t       *testing.T
	s       *stack
	name    string
	tl      *trialLog
	ctl     *controlWatch
	members []*clusterMember
	// takeovers are the times from a kill -9 of a stream's owner to every
	// stream committing again.
	takeovers []time.Duration
	// pausedAt are the high watermarks of the paused owner's data topics
	// right after its SIGSTOP, and resumedAt right before its SIGCONT.
	pausedAt, resumedAt map[string]map[int32]int64
	pausedOwned         []string
	pausedMember        int
}

func newCluster(t *testing.T, s *stack, name string) *clusterRun {
	t.Helper()
	stream := `retention_blocks: 128
transaction:
  max_rows: 400
  max_age: 100ms`
	s.WriteConfig(t, bridgetest.Config{
		Name:  name,
		SQL:   streamSQL,
		Kafka: "compression: lz4",
		Sections: fmt.Sprintf(`checkpoint:
  store: redis
  redis:
    addr: %s
    key_prefix: %s
cluster:
  enabled: true
  topic: %s.cluster
  session_timeout: 6s
  heartbeat_interval: 500ms
  release_timeout: 10s
http:
  addr: 127.0.0.1:0
log:
  level: info`, s.redis, name, name),
		Stream: stream + "\n" + clusterBackfill,
	})
	f, err := os.OpenFile(s.CfgPath, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	for i, id := range clusterStreams[1:] {
		extra := stream
		if i+1 < clusterBackfills {
			extra += "\n" + clusterBackfill
		}
		_, err = fmt.Fprintf(f, "  - id: %s\n    sql: %q\n    topic: %s.%s\n    partitions: 2\n%s\n", id, streamSQL, name, id, indentYAML(extra, 4))
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	c := &clusterRun{t: t, s: s, name: name}
	c.ctl = watchControl(t, s.Brokers, s.Control)
	return c
}

// clusterBackfill is the backfill section of the backfilling streams: the
// simulator's 120 blocks of history in steps of 10, by two workers.
const clusterBackfill = `backfill:
  enabled: true
  workers: 2
  partition_size: 40
  step_blocks: 10
  handover_margin: 12`

// streamStack is the stack of one stream, for verify and the consumer.
func (c *clusterRun) streamStack(id string) *stack {
	ss := *c.s
	ss.Stream = id
	ss.Topic = c.topic(id)
	return &ss
}

func (c *clusterRun) topic(id string) string {
	if id == clusterStreams[0] {
		return c.s.Topic
	}
	return c.name + "." + id
}

// start starts a new member and returns its number.
func (c *clusterRun) start() int {
	c.t.Helper()
	n := len(c.members)
	p := bridgetest.Start(c.t, c.s.Bin, c.s.CfgPath, filepath.Join(c.s.Dir, fmt.Sprintf("member-%02d.log", n)))
	mb := &clusterMember{n: n, p: p}
	mb.addr = waitHTTPAddr(c.t, p)
	c.members = append(c.members, mb)
	return n
}

// live are the members running (paused ones included).
func (c *clusterRun) live() []*clusterMember {
	var out []*clusterMember
	for _, mb := range c.members {
		if !mb.gone {
			out = append(out, mb)
		}
	}
	return out
}

// metric returns the value of the sample series (name and labels as
// /metrics prints them) of member n, 0 when it has none.
func (c *clusterRun) metric(n int, series string) float64 {
	c.t.Helper()
	for line := range strings.Lines(c.scrape(n)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(c.t, err, "%s", line)
			return f
		}
	}
	return 0
}

var ownedRe = regexp.MustCompile(`(?m)^amp_bridge_cluster_stream_owned\{stream="([^"]+)"\} (\S+)$`)

// scrape returns member n's /metrics ("" when it does not answer).
func (c *clusterRun) scrape(n int) string {
	mb := c.members[n]
	if mb.gone || mb.paused {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mb.addr+"/metrics", nil)
	require.NoError(c.t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		require.False(c.t, mb.p.Exited(), "member %d exited: %v; log tail:\n%s", n, mb.p.Err(), mb.p.Tail(40))
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	return string(b)
}

// owned returns the cluster items (streams, backfill workers) member n
// reports owning (nil when it does not answer).
func (c *clusterRun) owned(n int) []string {
	var out []string
	for _, m := range ownedRe.FindAllStringSubmatch(c.scrape(n), -1) {
		if m[2] == "1" {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	return out
}

// owners returns, per stream, the live members that report owning it.
func (c *clusterRun) owners() map[string][]int {
	out := map[string][]int{}
	for _, mb := range c.live() {
		for _, id := range c.owned(mb.n) {
			out[id] = append(out[id], mb.n)
		}
	}
	return out
}

// waitFor polls cond until it holds or timeout passes (then the test
// fails, naming what it waited for).
func (c *clusterRun) waitFor(what string, timeout time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, mb := range c.live() {
			require.False(c.t, mb.p.Exited(), "member %d exited while waiting until %s: %v; log tail:\n%s", mb.n, what, mb.p.Err(), mb.p.Tail(40))
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("not within %s: %s; owners %v; committed %v", timeout, what, c.owners(), c.ctl.counts())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitStable waits until every stream has exactly one owner among the
// answering members and every stream of progress committed more watermarks
// than it names; it returns the owners.
func (c *clusterRun) waitStable(when string, progress map[string]int, timeout time.Duration) map[string]int {
	c.t.Helper()
	var own map[string][]int
	c.waitFor("every stream has one owner and commits, "+when, timeout, func() bool {
		own = c.owners()
		for _, id := range clusterStreams {
			if len(own[id]) != 1 || c.ctl.count(id) <= progress[id] {
				return false
			}
		}
		return true
	})
	out := map[string]int{}
	for id, ns := range own {
		out[id] = ns[0]
	}
	return out
}

// kill9 kills a random live member, starts a member in its place, and
// waits until every stream, the killed member's included, committed again.
func (c *clusterRun) kill9(rng *rand.Rand) {
	c.t.Helper()
	live := c.live()
	mb := live[rng.IntN(len(live))]
	owned := c.owned(mb.n)
	before := c.ctl.counts()
	// Those the killed member owned must commit again; the others must go
	// on committing too.
	t0 := time.Now()
	mb.p.Kill9()
	mb.gone = true
	// Restarted at once, as a supervisor would: it joins while the group
	// waits out the killed member's session.
	n := c.start()
	own := c.waitStable(fmt.Sprintf("after kill -9 of member %d", mb.n), before, 60*time.Second)
	took := time.Since(t0)
	if slices.ContainsFunc(owned, func(it string) bool { return slices.Contains(clusterStreams, it) }) {
		// Only the kills of a stream's owner are takeovers (a member
		// may own only backfill workers, idle once the backfill is done).
		c.takeovers = append(c.takeovers, took)
	}
	moved := map[string]int{}
	for _, id := range owned {
		if o, ok := own[id]; ok { // an idle backfill worker may have none
			moved[id] = o
		}
	}
	c.tl.Logf("kill -9 of member %d (owned %v): taken over in %s by %v; member %d started in its place",
		mb.n, owned, took.Round(time.Millisecond), moved, n)
}

// leave stops member n with SIGTERM (it leaves the group) and waits until
// the others took its streams over.
func (c *clusterRun) leave(n int) {
	c.t.Helper()
	mb := c.members[n]
	owned := c.owned(n)
	before := c.ctl.counts()
	t0 := time.Now()
	code := mb.p.Term(45 * time.Second)
	mb.gone = true
	require.Equal(c.t, 0, code, "member %d must exit 0 on SIGTERM; log tail:\n%s", n, mb.p.Tail(30))
	c.waitStable(fmt.Sprintf("after member %d left", n), before, 60*time.Second)
	c.tl.Logf("member %d left (SIGTERM, exit 0, owned %v): taken over in %s", n, owned, time.Since(t0).Round(time.Millisecond))
}

// rollingRestart restarts the live members one at a time: SIGTERM, a new
// member in its place, and every stream owned and committing before the
// next.
func (c *clusterRun) rollingRestart() {
	c.t.Helper()
	t0 := time.Now()
	olds := c.live()
	for _, mb := range olds {
		before := c.ctl.counts()
		code := mb.p.Term(45 * time.Second)
		mb.gone = true
		require.Equal(c.t, 0, code, "member %d must exit 0 on SIGTERM in the rolling restart; log tail:\n%s", mb.n, mb.p.Tail(30))
		n := c.start()
		waitLog(c.members[n].p.Log, "cluster assignment", 60*time.Second)
		c.waitStable(fmt.Sprintf("in the rolling restart, member %d replaced by %d", mb.n, n), before, 60*time.Second)
	}
	c.tl.Logf("rolling restart of %d members in %s", len(olds), time.Since(t0).Round(time.Millisecond))
}

// pause stops (SIGSTOP) the owner of a random stream for longer than the
// session timeout: the group gives its streams to the others, whose
// producers fence it. Before the SIGCONT every stream it owned committed
// on its new owner; after it, the resumed member logs that its session
// ended, releases the streams, and stays a member without looping on
// fencing.
func (c *clusterRun) pause(rng *rand.Rand) {
	c.t.Helper()
	own := c.waitStable("before the pause", nil, 60*time.Second)
	// A live (not backfilling) stream's owner, so the pause meets open
	// transactions.
	id := clusterStreams[clusterBackfills+rng.IntN(len(clusterStreams)-clusterBackfills)]
	mb := c.members[own[id]]
	owned := c.owned(mb.n)
	require.NotEmpty(c.t, owned)
	lostBefore := grepCount(mb.p.Log, "the cluster session ended")
	fencedBefore := grepCount(mb.p.Log, "another producer took the stream's transactional id")

	t0 := time.Now()
	require.NoError(c.t, syscall.Kill(mb.p.Pid(), syscall.SIGSTOP))
	mb.paused = true
	defer func() {
		if mb.paused {
			_ = syscall.Kill(mb.p.Pid(), syscall.SIGCONT)
		}
	}()
	// Produce requests in flight at the stop land meanwhile.
	time.Sleep(500 * time.Millisecond)
	c.pausedOwned, c.pausedMember = streamsOf(owned), mb.n
	c.pausedAt = c.highWatermarks(c.pausedOwned)
	before := c.ctl.counts()
	// Every stream commits again, those of the paused member on others.
	c.waitStable(fmt.Sprintf("with member %d paused", mb.n), before, 60*time.Second)
	// Longer than the session timeout in any case.
	if d := 8*time.Second - time.Since(t0); d > 0 {
		time.Sleep(d)
	}
	// The new owners' first commits may hold no rows of a stream (a block
	// may have none for its topic): wait until each paused stream's topic
	// has a record committed past the stop, which checkPausedFenced needs.
	c.waitCommittedSince(mb.n, 2*time.Minute)
	c.resumedAt = c.highWatermarks(c.pausedOwned)
	paused := time.Since(t0)
	require.NoError(c.t, syscall.Kill(mb.p.Pid(), syscall.SIGCONT))
	mb.paused = false
	c.waitFor(fmt.Sprintf("member %d logs that its session ended", mb.n), 30*time.Second, func() bool {
		return grepCount(mb.p.Log, "the cluster session ended") > lostBefore
	})
	after := c.ctl.counts()
	own = c.waitStable(fmt.Sprintf("after member %d resumed", mb.n), after, 60*time.Second)
	require.False(c.t, mb.p.Exited(), "the resumed member exited: %v; log tail:\n%s", mb.p.Err(), mb.p.Tail(40))
	// Let a looping member show itself: it would fence the new owners in
	// turn, over and over.
	time.Sleep(3 * time.Second)
	c.waitStable(fmt.Sprintf("3s after member %d resumed", mb.n), after, 60*time.Second)
	fenced := grepCount(mb.p.Log, "another producer took the stream's transactional id") - fencedBefore
	assert.LessOrEqual(c.t, fenced, len(owned), "the resumed member was fenced more often than it had streams: it loops")
	assert.Positive(c.t, grepCount(mb.p.Log, "why=lost"),
		"the resumed member did not release its streams as lost; log tail:\n%s", mb.p.Tail(40))
	assert.Positive(c.t, c.metric(mb.n, `amp_bridge_cluster_rebalances_total{kind="lost"}`),
		"the resumed member's amp_bridge_cluster_rebalances_total{kind=\"lost\"}")
	c.tl.Logf("SIGSTOP of member %d (owned %v) for %s, then SIGCONT: its session ended, it released them, fenced %d time(s); owners now %v; "+
		"data topics' high watermarks at the stop %v, at the SIGCONT %v",
		mb.n, owned, paused.Round(time.Millisecond), fenced, own, c.pausedAt, c.resumedAt)
}

// streamsOf returns the streams of cluster items: a stream's id, or a
// backfill worker's (stream#backfill.k), each once.
func streamsOf(items []string) []string {
	var out []string
	for _, it := range items {
		id, _, _ := strings.Cut(it, "#")
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// highWatermarks returns the high watermarks of the data topics of streams.
func (c *clusterRun) highWatermarks(streams []string) map[string]map[int32]int64 {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.s.Brokers...))
	require.NoError(c.t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := make([]string, 0, len(streams))
	for _, id := range streams {
		topics = append(topics, c.topic(id))
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	require.NoError(c.t, err)
	require.NoError(c.t, ends.Error())
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

// waitCommittedSince waits until a record is committed past the high
// watermark at the stop (pausedAt) on every paused stream's topic, reading
// them read_committed from there with one client.
func (c *clusterRun) waitCommittedSince(member int, timeout time.Duration) {
	c.t.Helper()
	from := map[string]map[int32]kgo.Offset{}
	waiting := map[string]bool{}
	for _, id := range c.pausedOwned {
		tp := c.topic(id)
		waiting[tp] = true
		from[tp] = map[int32]kgo.Offset{}
		for p, o := range c.pausedAt[tp] {
			from[tp][p] = kgo.NewOffset().At(o)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.s.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(from))
	require.NoError(c.t, err)
	defer cl.Close()
	for deadline := time.Now().Add(timeout); len(waiting) > 0; {
		for _, mb := range c.live() {
			require.False(c.t, mb.p.Exited(), "member %d exited while the paused member's streams moved: %v; log tail:\n%s",
				mb.n, mb.p.Err(), mb.p.Tail(40))
		}
		if time.Now().After(deadline) {
			var held []string
			for _, tp := range slices.Sorted(maps.Keys(waiting)) {
				held = append(held, c.describeTopic(tp))
			}
			c.t.Fatalf("not within %s: member %d's streams %v commit records on their new owners past the high watermarks at "+
				"the stop %v; nothing yet on %s; owners %v; committed %v", timeout, member, c.pausedOwned, c.pausedAt,
				strings.Join(held, "; "), c.owners(), c.ctl.counts())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { delete(waiting, r.Topic) })
		cancel()
	}
}

// describeTopic says, for a topic whose readers wait, each partition's last
// stable offset and high watermark and the transactions open on it
// (producer id, epoch, start offset, transactional id).
func (c *clusterRun) describeTopic(topic string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.s.Brokers...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return fmt.Sprintf("%s: %v", topic, err)
	}
	hwm, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Sprintf("%s: %v", topic, err)
	}
	set := kadm.TopicsSet{}
	for p := range lso[topic] {
		set.Add(topic, p)
	}
	prods, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return fmt.Sprintf("%s: %v", topic, err)
	}
	ids := map[int64]string{}
	if txns, err := adm.ListTransactions(ctx, nil, nil); err == nil {
		for _, t := range txns.Sorted() {
			ids[t.ProducerID] = t.TxnID
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s:", topic)
	for _, p := range slices.Sorted(maps.Keys(lso[topic])) {
		h, _ := hwm.Lookup(topic, p)
		fmt.Fprintf(&b, " partition %d last stable %d high watermark %d", p, lso[topic][p].Offset, h.Offset)
		for _, dp := range prods[topic].Partitions[p].ActiveProducers.Sorted() {
			if dp.CurrentTxnStartOffset >= 0 {
				fmt.Fprintf(&b, ", open transaction of producer %d epoch %d (%q) from offset %d", dp.ProducerID, dp.ProducerEpoch,
					ids[dp.ProducerID], dp.CurrentTxnStartOffset)
			}
		}
		b.WriteString(";")
	}
	return b.String()
}

// checkPausedFenced reads the paused owner's data topics, all records
// (read_uncommitted) and the committed ones (read_committed), and checks
// that nothing of the paused producers' epochs was committed after the stop,
// that the new owners committed during the pause, and that along every
// partition each producer's committed epochs never go backwards.
func (c *clusterRun) checkPausedFenced() {
	c.t.Helper()
	require.NotNil(c.t, c.pausedAt, "no pause ran")
	var topics []string
	for _, id := range c.pausedOwned {
		topics = append(topics, c.topic(id))
	}
	all := readBatches(c.t, c.s.Brokers, kgo.ReadUncommitted(), topics...)
	committed := readBatches(c.t, c.s.Brokers, kgo.ReadCommitted(), topics...)
	for _, tp := range topics {
		took := false
		for part, stop := range c.pausedAt[tp] {
			key := topicPartition{tp, part}
			rep, newOwner, err := checkPausedPartition(all[key], committed[key], stop, c.resumedAt[tp][part])
			c.tl.Logf("%s/%d: %s", tp, part, rep)
			require.NoError(c.t, err, "%s/%d", tp, part)
			took = took || newOwner
		}
		assert.True(c.t, took, "%s: the new owner committed nothing while the owner was paused: the check proves nothing", tp)
	}
	// Over the whole run, on every topic.
	var every []string
	for _, id := range clusterStreams {
		every = append(every, c.topic(id))
	}
	for key, recs := range readBatches(c.t, c.s.Brokers, kgo.ReadCommitted(), every...) {
		assert.NoError(c.t, checkEpochs(recs), "%s/%d", key.topic, key.partition)
	}
}

// takeoverFigures summarises the takeover times after kill -9.
func (c *clusterRun) takeoverFigures() string {
	if len(c.takeovers) == 0 {
		return "none"
	}
	d := slices.Clone(c.takeovers)
	slices.Sort(d)
	return fmt.Sprintf("p50 %s, max %s", d[len(d)/2].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
}

type topicPartition struct {
	topic     string
	partition int32
}

// producedRecord is where one record landed and which producer wrote it.
type producedRecord struct {
	Offset int64
	PID    int64
	Epoch  int16
}

// readBatches reads topics from their start with the isolation level and
// returns each partition's records in offset order. The bridges are
// stopped: once records came, a quiet poll means all were read.
func readBatches(t *testing.T, brokers []string, iso kgo.IsolationLevel, topics ...string) map[topicPartition][]producedRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	require.NoError(t, err)
	defer cl.Close()
	out := map[topicPartition][]producedRecord{}
	seen := 0
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		if fs.NumRecords() == 0 {
			if seen > 0 {
				break
			}
			continue
		}
		seen += fs.NumRecords()
		fs.EachRecord(func(r *kgo.Record) {
			k := topicPartition{r.Topic, r.Partition}
			out[k] = append(out[k], producedRecord{Offset: r.Offset, PID: r.ProducerID, Epoch: r.ProducerEpoch})
		})
	}
	require.Positive(t, seen, "no record in %v", topics)
	for _, recs := range out {
		sort.Slice(recs, func(i, j int) bool { return recs[i].Offset < recs[j].Offset })
	}
	return out
}

// checkEpochs checks one partition's committed records: along the
// offsets, each producer id's epochs never go backwards. A producer fenced
// by a newer epoch of its transactional id that still committed would
// break it.
func checkEpochs(recs []producedRecord) error {
	newest := map[int64]producedRecord{}
	for _, r := range recs {
		if n, ok := newest[r.PID]; ok && r.Epoch < n.Epoch {
			return fmt.Errorf("producer %d committed epoch %d at offset %d after epoch %d at offset %d: a fenced producer committed",
				r.PID, r.Epoch, r.Offset, n.Epoch, n.Offset)
		}
		newest[r.PID] = r
	}
	return nil
}

// checkPausedPartition checks one partition of a data topic of the paused
// owner: stop and resumed are its high watermarks right after the SIGSTOP
// and right before the SIGCONT; all its records (read_uncommitted) and its
// committed ones. The paused producers' epochs are the newest each
// producer id had below stop. No committed record at or past stop may
// carry one of them (or an older one), the new owner must have committed
// in [stop, resumed) (newOwner: on this partition), and past
// resumed no producer's epoch may go below the one its new owner committed
// with.
func checkPausedPartition(all, committed []producedRecord, stop, resumed int64) (rep string, newOwner bool, err error) {
	pausedEpoch := map[int64]int16{}
	for _, r := range all {
		if r.Offset < stop {
			pausedEpoch[r.PID] = max(pausedEpoch[r.PID], r.Epoch)
		}
	}
	first := map[int64]producedRecord{}
	after := 0
	for _, r := range committed {
		if r.Offset < stop {
			continue
		}
		if e, ok := pausedEpoch[r.PID]; ok && r.Epoch <= e {
			return "", false, fmt.Errorf("producer %d committed epoch %d at offset %d, past the high watermark %d at the pause: the paused owner's epoch was %d",
				r.PID, r.Epoch, r.Offset, stop, e)
		}
		if r.Offset < resumed {
			if _, ok := first[r.PID]; !ok {
				first[r.PID] = r
			}
			continue
		}
		after++
		if n, ok := first[r.PID]; ok && r.Epoch < n.Epoch {
			return "", false, fmt.Errorf("producer %d committed epoch %d at offset %d, after the new owner's first committed batch (epoch %d at offset %d)",
				r.PID, r.Epoch, r.Offset, n.Epoch, n.Offset)
		}
	}
	if len(first) == 0 {
		return fmt.Sprintf("paused producers' epochs %v below offset %d; nothing committed here during the pause; %d committed records after the SIGCONT, none of a paused epoch",
			pausedEpoch, stop, after), false, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "paused producers' epochs %v below offset %d; new owner's first committed:", pausedEpoch, stop)
	for pid, r := range first {
		fmt.Fprintf(&b, " producer %d epoch %d at offset %d;", pid, r.Epoch, r.Offset)
	}
	fmt.Fprintf(&b, " %d committed records after the SIGCONT (offset %d on), none of a paused epoch", after, resumed)
	return b.String(), true, nil
}

// controlWatch follows the control topic (read_committed) and keeps, per
// stream, how many watermarks were committed and the newest cursor point.
type controlWatch struct {
	mu     sync.Mutex
	n      map[string]int
	points map[string]reorg.Point
}

func watchControl(t *testing.T, brokers []string, topic string) *controlWatch {
	t.Helper()
	codec, err := offsets.NewControlCodec()
	require.NoError(t, err)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	w := &controlWatch{n: map[string]int{}, points: map[string]reorg.Point{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				if r.Value == nil {
					return
				}
				ev, err := codec.Decode(r.Value)
				if err != nil || ev.Watermark == nil {
					return
				}
				w.mu.Lock()
				w.n[string(r.Key)]++
				if p, ok := ev.Watermark.Cursor[ampsim.DefaultNetwork]; ok {
					w.points[string(r.Key)] = p
				}
				w.mu.Unlock()
			})
		}
	}()
	return w
}

func (w *controlWatch) count(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n[id]
}

func (w *controlWatch) counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.n))
	for k, v := range w.n {
		out[k] = v
	}
	return out
}

func (w *controlWatch) point(id string) reorg.Point {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.points[id]
}

// TestClusterEpochCheckers feeds the checkers of TestIntegrationCluster
// the records a fenced producer that still committed would leave: they must
// fail.
func TestClusterEpochCheckers(t *testing.T) {
	// Producer 7: epoch 3 before the pause at offset 10, the new owner's
	// epoch 5 during it, and after the SIGCONT (offset 20 on).
	good := []producedRecord{{0, 7, 3}, {4, 7, 3}, {12, 7, 5}, {15, 7, 5}, {22, 7, 6}}
	require.NoError(t, checkEpochs(good))
	rep, took, err := checkPausedPartition(good, good, 10, 20)
	require.NoError(t, err)
	require.True(t, took)
	t.Log(rep)

	zombie := append(slices.Clone(good), producedRecord{25, 7, 3})
	require.ErrorContains(t, checkEpochs(zombie), "producer 7 committed epoch 3 at offset 25 after epoch 6")
	_, _, err = checkPausedPartition(good, zombie, 10, 20)
	require.ErrorContains(t, err, "the paused owner's epoch was 3")
	// The paused producer's next epoch (transactions v2 bump it at each
	// commit) committed after the new owner's.
	next := append(slices.Clone(good[:4]), producedRecord{22, 7, 4})
	_, _, err = checkPausedPartition(good, next, 10, 20)
	require.ErrorContains(t, err, "after the new owner's first committed batch (epoch 5 at offset 12)")
	// Nothing committed during the pause: the caller refuses a stream
	// where no partition saw the new owner.
	_, took, err = checkPausedPartition(good, good[:2], 10, 20)
	require.NoError(t, err)
	require.False(t, took)
}
