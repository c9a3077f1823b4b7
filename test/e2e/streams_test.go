package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// TestIntegrationBrokerRestartDuringBackfill restarts the private broker
// (kill -9 and start) while the bridge backfills 400 blocks of history in
// steps of 4 blocks, after some steps committed and before half: the step
// in flight fails (the delivery timeout is below the broker's downtime),
// the stream restarts from its checkpoint in the same process and resumes
// the backfill after its committed steps, finishes it, goes live with the
// chain mining (with reorgs), stops on SIGTERM with exit 0, and bridge
// verify and the independent consumer check the whole range.
func TestIntegrationBrokerRestartDuringBackfill(t *testing.T) {
	t.Parallel() // with the network-fault tests: make test's time budget
	python := testenv.Python(t)
	bin := buildBridge(t)
	t.Cleanup(func() { holdOnFailure(t.Failed(), t.Logf) })
	sim := bridgetest.StartSim(t, ampsim.NetworkConfig{InitialBlocks: 400, TxPerBlock: 4, LogsPerTx: -1})
	broker := testenv.StartKafkaBroker(t,
		testenv.WithProperties("transaction.abort.timed.out.transaction.cleanup.interval.ms=1000"))
	rs := testenv.StartRedisServer(t)
	regs := testenv.RegistryBackends(t)
	s := &stack{t: t, redis: rs.Addr(), Stack: bridgetest.Stack{
		Sim: sim, Brokers: []string{broker.Addr()}, Registry: regs[len(regs)-1].Addr,
		Dir: runDir(t), Bin: bin, Stream: streamID,
	}}
	// One worker and 4 blocks a transaction: about 100 transactions, so
	// the backfill lasts long enough to be interrupted in its middle.
	const step = 4
	s.backfill = fmt.Sprintf(`backfill:
  enabled: true
  workers: 1
  partition_size: 100
  step_blocks: %d
  handover_margin: 12`, step)
	// A delivery timeout shorter than the broker's downtime (about 5 s):
	// the step in flight fails rather than waits.
	s.extra = bridgetest.Config{Kafka: "transaction_timeout: 10s\ndelivery_timeout: 2s\nend_txn_timeout: 5s"}
	s.writeConfig(testenv.UniqueName(t, "bfr"))

	logPath := filepath.Join(s.Dir, "bridge.log")
	p := bridgetest.Start(t, bin, s.CfgPath, logPath)
	pid := p.Pid()
	addr := waitHTTPAddr(t, p)

	// Wait until ten steps committed and at least half is left.
	var first, left float64
	deadline := time.Now().Add(90 * time.Second)
	for {
		require.False(t, p.Exited(), "the bridge exited during the backfill: %v; log tail:\n%s", p.Err(), p.Tail(40))
		require.Zero(t, grepCount(logPath, "backfill done"), "the backfill finished before the broker restart: make it slower; log tail:\n%s", p.Tail(20))
		require.True(t, time.Now().Before(deadline), "the backfill made no progress within 90s; log tail:\n%s", p.Tail(40))
		if v, ok := backfillRemaining(t, addr, streamID); ok && v > 0 {
			if first == 0 {
				first = v
			}
			left = v
			if first-left >= 10*step && left >= first/2 {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	brokerLogLevel(s.Brokers[0])
	broker.Restart()
	restart := time.Since(t0)
	// A killed broker may leave a transaction it was committing open for
	// ever (healHangingTxns): end it as its coordinator decided.
	notes := healHanging(t, 6, s.Brokers, s.Control, s.Topic)
	t.Logf("broker killed and restarted (%s) with %.0f of %.0f backfill blocks left; %v",
		restart.Round(time.Millisecond), left, first, notes)

	waitLog(logPath, "backfill done", 90*time.Second)
	require.False(t, p.Exited(), "the bridge exited after the broker restart: %v; log tail:\n%s", p.Err(), p.Tail(40))
	require.Positive(t, grepCount(logPath, "backfill done"), "the backfill did not finish within 90s of the broker restart; log tail:\n%s", p.Tail(40))
	v, _ := backfillRemaining(t, addr, streamID)
	assert.Zero(t, v, "amp_bridge_backfill_blocks_remaining after the backfill")
	// With a delivery timeout below the broker's downtime, the restart
	// fails the step in flight: the stream restarts from its checkpoint and
	// resumes the backfill where its committed steps end, not from the
	// start.
	plans := backfillPlanRe.FindAllStringSubmatch(testenv.Tail(logPath, 10000), -1)
	require.GreaterOrEqual(t, len(plans), 2, "the broker restart did not restart the backfill; log tail:\n%s", p.Tail(40))
	resumed, _ := strconv.ParseFloat(plans[len(plans)-1][2], 64)
	t.Logf("the backfill resumed with %.0f of %s blocks to run, after %d stream restart(s)", resumed, plans[len(plans)-1][1],
		grepCount(logPath, `msg="restarting`))
	assert.Positive(t, resumed)
	assert.LessOrEqual(t, resumed, left, "the resumed backfill runs blocks its committed steps had published")

	// Live, with the chain mining and reorging.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	m := startMiner(sim, rng, 150*time.Millisecond, 8, 3)
	defer m.Stop()
	hz := &readyz{t: t, p: p, addr: addr}
	hz.waitReady(60*time.Second, "after the backfill")
	live, _ := sim.Head()
	s.waitCommittedPast(t, p, live, 30*time.Second, "live, after the backfill")
	time.Sleep(2 * time.Second)
	m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	head, err := s.WaitCaughtUp(ctx, p, 300*time.Millisecond)
	cancel()
	require.NoError(t, err)
	require.False(t, p.Exited())
	assert.Equal(t, pid, p.Pid())
	assert.Equal(t, 1, grepCount(logPath, `msg="bridge starting"`), "one process, started once")
	code := p.Term(45 * time.Second)
	require.Equal(t, 0, code, "bridge run must exit 0 on SIGTERM; log tail:\n%s", p.Tail(30))
	t.Logf("head %d committed; %d reorgs mined live; stream restarts %d, reorgs handled %d", head, m.reorgs.Load(),
		grepCount(logPath, `msg="restarting`), grepCount(logPath, "msg=reorg"))
	checkTopic(t, s, python, head, t.Logf)
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		assert.Zero(t, grepCount(logPath, bad), "the bridge log contains %q:\n%s", bad, p.Tail(60))
	}
	if t.Failed() {
		t.Logf("bridge log tail:\n%s", p.Tail(80))
	}
}

// TestIntegrationTwoStreamsOnePermanentError runs one bridge process with
// two streams, one of them keyed by a column the query does not have
// (key_columns: [tx_hahs]): that stream fails at setup (failed on
// /readyz?stream=, the reason naming key_columns) and writes nothing, the
// other publishes on with the chain mining and reorging, in the same
// process. On SIGTERM the process exits 1 with the failed stream's error
// (cmd/bridge/run.go returns the failed streams' errors once every stream
// stopped), and bridge verify and the independent consumer check the good
// stream's topic.
func TestIntegrationTwoStreamsOnePermanentError(t *testing.T) {
	t.Parallel()
	python := testenv.Python(t)
	bin := buildBridge(t)
	t.Cleanup(func() { holdOnFailure(t.Failed(), t.Logf) })
	sim := bridgetest.StartSim(t, ampsim.NetworkConfig{InitialBlocks: 60, TxPerBlock: 4, LogsPerTx: -1})
	broker := testenv.StartKafkaBroker(t)
	rs := testenv.StartRedisServer(t)
	regs := testenv.RegistryBackends(t)
	s := &stack{t: t, redis: rs.Addr(), Stack: bridgetest.Stack{
		Sim: sim, Brokers: []string{broker.Addr()}, Registry: regs[len(regs)-1].Addr,
		Dir: runDir(t), Bin: bin, Stream: streamID,
	}}
	name := testenv.UniqueName(t, "two")
	s.writeConfig(name)
	badID, badTopic := streamID+"-bad", name+".bad"
	f, err := os.OpenFile(s.CfgPath, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "  - id: %s\n    sql: %q\n    topic: %s\n    partitions: 1\n    key: row\n    key_columns: [tx_hahs]\n",
		badID, streamSQL, badTopic)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	m := startMiner(sim, rng, 150*time.Millisecond, 8, 3)
	defer m.Stop()
	logPath := filepath.Join(s.Dir, "bridge.log")
	p := bridgetest.Start(t, bin, s.CfgPath, logPath)
	pid := p.Pid()
	addr := waitHTTPAddr(t, p)

	// The bad stream fails, named; the good one becomes ready.
	var code int
	var rep streamReady
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, rep = readyzStream(t, p, addr, badID)
		if rep.State == "failed" {
			break
		}
		require.False(t, p.Exited(), "the bridge exited: %v; log tail:\n%s", p.Err(), p.Tail(40))
		require.True(t, time.Now().Before(deadline), "stream %s not failed within 60s (%d %+v); log tail:\n%s", badID, code, rep, p.Tail(40))
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("/readyz?stream=%s: %d %+v", badID, code, rep)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, rep.Reason, `key_columns names "tx_hahs"`)
	assert.Contains(t, rep.Reason, "tx_hash", "the reason lists the query's columns")
	deadline = time.Now().Add(90 * time.Second)
	for {
		code, rep = readyzStream(t, p, addr, streamID)
		if code == http.StatusOK {
			break
		}
		require.False(t, p.Exited(), "the bridge exited: %v; log tail:\n%s", p.Err(), p.Tail(40))
		require.True(t, time.Now().Before(deadline), "stream %s not ready within 90s (%d %+v); log tail:\n%s", streamID, code, rep, p.Tail(40))
		time.Sleep(100 * time.Millisecond)
	}
	assert.Equal(t, "ready", rep.State)
	all, _ := (&readyz{t: t, p: p, addr: addr}).get()
	assert.Equal(t, http.StatusServiceUnavailable, all, "/readyz of the process is 503 while a stream has failed")

	// The good stream publishes on, in the same process, for a few seconds
	// of mining.
	for range 3 {
		s.waitCommittedPast(t, p, s.committed(t), 30*time.Second, "with the other stream failed")
		time.Sleep(time.Second)
	}
	require.False(t, p.Exited(), "the bridge exited with one stream failed: %v; log tail:\n%s", p.Err(), p.Tail(40))
	assert.Equal(t, pid, p.Pid())
	assert.Equal(t, 1, grepCount(logPath, `msg="bridge starting"`), "one process, started once")
	assert.Equal(t, 1, grepCount(logPath, "a stream stopped on a permanent error; the other streams go on"))
	code, rep = readyzStream(t, p, addr, badID)
	assert.Equal(t, "failed", rep.State, "a failed stream stays failed (%d)", code)

	m.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	head, err := s.WaitCaughtUp(ctx, p, 300*time.Millisecond)
	cancel()
	require.NoError(t, err)
	exit := p.Term(45 * time.Second)
	// A stop does not hide that a stream failed: the process exits 1 and
	// its last line is the failed stream's error.
	require.Equal(t, 1, exit, "bridge run must exit 1 on SIGTERM when a stream failed; log tail:\n%s", p.Tail(30))
	assert.Regexp(t, `(?m)^bridge: .*key_columns names "tx_hahs"`, p.Tail(5), "the exit names the failed stream's error")
	t.Logf("exit %d after SIGTERM; head %d committed; %d reorgs mined; stream restarts %d, reorgs handled %d; log tail:\n%s",
		exit, head, m.reorgs.Load(), grepCount(logPath, `msg="restarting`), grepCount(logPath, "msg=reorg"), p.Tail(3))

	checkTopic(t, s, python, head, t.Logf)
	requireNoRecords(t, s.Brokers, badTopic)
	for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
		assert.Zero(t, grepCount(logPath, bad), "the bridge log contains %q:\n%s", bad, p.Tail(60))
	}
	if t.Failed() {
		t.Logf("bridge log tail:\n%s", p.Tail(80))
	}
}

// streamReady is one stream's entry of /readyz.
type streamReady struct {
	State  string `json:"state"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// readyzStream returns /readyz?stream=id's status code and the stream's
// entry.
func readyzStream(t *testing.T, p *bridgetest.Proc, addr, id string) (int, streamReady) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz?stream="+id, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		require.False(t, p.Exited(), "the bridge exited: %v; log tail:\n%s", p.Err(), p.Tail(40))
	}
	require.NoError(t, err, "/readyz must always answer")
	defer resp.Body.Close()
	var rep struct {
		Streams map[string]streamReady `json:"streams"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	return resp.StatusCode, rep.Streams[id]
}

var backfillPlanRe = regexp.MustCompile(`msg=backfill .* blocks=(\d+) blocks_to_run=(\d+)`)

var backfillLeftRe = regexp.MustCompile(`(?m)^amp_bridge_backfill_blocks_remaining\{[^}]*stream="([^"]+)"[^}]*\} (\S+)$`)

// backfillRemaining returns amp_bridge_backfill_blocks_remaining of stream
// from /metrics (ok false when it is not there yet).
func backfillRemaining(t *testing.T, addr, stream string) (float64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "/metrics must always answer")
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, m := range backfillLeftRe.FindAllStringSubmatch(string(b), -1) {
		if m[1] == stream {
			v, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			return v, true
		}
	}
	return 0, false
}

// requireNoRecords checks that topic does not exist or has never held a
// record (every partition's high watermark 0: not even an aborted one).
func requireNoRecords(t *testing.T, brokers []string, topic string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
			return
		}
		require.NoError(t, o.Err, "%s/%d", o.Topic, o.Partition)
		assert.Zero(t, o.Offset, "%s/%d holds records", o.Topic, o.Partition)
	})
	t.Logf("%s: %d partitions, no record", topic, len(ends.Offsets()))
}
