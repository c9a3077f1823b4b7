package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/bridgetest"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/internal/testenv"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/sink"
	"github.com/amp-kafka-bridge/amp-kafka-bridge/source/ampsim"
)

// faultEnv is the Kafka, Redis and registry a fault run uses, with the
// faults each supports (nil: not supported by that backend).
type faultEnv struct {
	name          string
	brokers       []string
	restartBroker func()
	redis         string
	restartRedis  func()
	registry      string
}

// TestIntegrationFaultSIGKILL is the fault-injection harness on the real
// services: a private Kafka broker (so it can be restarted), a private
// redis-server (so it can be killed and flushed) and the registry of
// `make services` (srfake in-process when BRIDGE_TEST_REGISTRY_URL is unset).
// Conformance: amp-protocol.md §8 F2 (a crash between the sink write and the
// commit: the restart replays without duplicates), at random kill points.
func TestIntegrationFaultSIGKILL(t *testing.T) {
	// Not in parallel with the others: its race-detector bridge restarts
	// every few seconds, and beside it TestIntegrationCluster's members
	// once missed their 6 s sessions (a member that was not paused was
	// fenced, a takeover took 37 s) in a clean-clone make test.
	python := testenv.Python(t)
	broker := testenv.StartKafkaBroker(t)
	rs := testenv.StartRedisServer(t)
	regs := testenv.RegistryBackends(t)
	env := faultEnv{
		name:          "real",
		brokers:       []string{broker.Addr()},
		restartBroker: broker.Restart,
		redis:         rs.Addr(),
		restartRedis:  func() { rs.Kill9(); time.Sleep(200 * time.Millisecond); rs.Restart() },
		registry:      regs[len(regs)-1].Addr,
	}
	runFaultHarness(t, env, python, *flagTrials)
}

// TestIntegrationFaultFakes runs a shorter schedule of the same harness
// against the in-process stand-ins (kfake, miniredis, srfake), so the two
// can be compared. kfake cannot be restarted and miniredis cannot rebind its
// port while the bridge holds connections, so there is no broker or Redis
// restart; the FLUSHALL stays. Conformance: amp-protocol.md §8 F2, as above.
func TestIntegrationFaultFakes(t *testing.T) {
	t.Parallel() // in-process stand-ins, nothing shared: beside the other parallel tests, for make test's time budget
	python := testenv.Python(t)
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000"}))
	require.NoError(t, err)
	t.Cleanup(kc.Close)
	mr := miniredis.NewMiniRedis()
	require.NoError(t, mr.StartAddr("127.0.0.1:0"))
	t.Cleanup(mr.Close)
	regs := testenv.RegistryBackends(t)
	env := faultEnv{
		name:     "fakes",
		brokers:  kc.ListenAddrs(),
		redis:    mr.Addr(),
		registry: regs[0].Addr,
	}
	runFaultHarness(t, env, python, max(3, *flagTrials/4))
}

var reconciledRe = regexp.MustCompile(`msg="checkpoint reconciled".* outcome=(\S+) .*cursor=(?:"\{\\"[^\\]+\\":\{\\"number\\":(\d+)|(\(start\)))`)

func runFaultHarness(t *testing.T, env faultEnv, python string, trials int) {
	require.GreaterOrEqual(t, trials, 3, "-e2e.trials must be at least 3 (a broker restart, a Redis restart and a FLUSHALL each take one)")
	bin := buildBridge(t)
	// Registered after the services' cleanups, so it runs before them.
	t.Cleanup(func() { holdOnFailure(t.Failed(), t.Logf) })
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("%s: %d trials, seed %d (rerun with -e2e.seed=%d)", env.name, trials, seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))

	// 300 blocks of history: the first trials run (and are killed in) the
	// backfill, in steps of 15 blocks, before the hand-over 12 blocks below
	// the head (deeper than any reorg below).
	sim := bridgetest.StartSim(t, ampsim.NetworkConfig{InitialBlocks: 300, TxPerBlock: 4, LogsPerTx: -1})

	dir := t.TempDir()
	if keep := os.Getenv("E2E_KEEP_LOGS"); keep != "" {
		dir = filepath.Join(keep, t.Name())
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	s := &stack{t: t, redis: env.redis, Stack: bridgetest.Stack{
		Sim: sim, Brokers: env.brokers, Registry: env.registry, Dir: dir, Bin: bin, Stream: streamID,
	}}
	s.writeConfig(testenv.UniqueName(t, "e2e"))
	if keep := os.Getenv("E2E_KEEP_LOGS"); keep != "" && env.restartBroker != nil {
		t.Cleanup(func() { keepBroker(env.brokers[0], dir, t.Failed()) })
	}
	lf, err := os.Create(filepath.Join(dir, "trials.log"))
	require.NoError(t, err)
	defer lf.Close()
	tl := &trialLog{t: t, f: lf}

	m := startMiner(sim, rng, 150*time.Millisecond, 8, 3)
	defer m.Stop()

	brokerAt, redisAt, flushAt := trials/4, trials/2, (3*trials)/4
	if env.restartBroker == nil {
		brokerAt = -1
	}
	if env.restartRedis == nil {
		redisAt = -1
	}
	selfExits, slowStarts := 0, 0
	for i := range trials {
		var healed []string
		if brokerAt >= 0 && i > brokerAt {
			healed = healHanging(t, 1, s.Brokers, s.Control, s.Topic)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("trial-%02d.log", i))
		p := bridgetest.Start(t, bin, s.CfgPath, logPath)
		// Mostly 0.5–3.5 s of publishing (a race-detector binary needs about
		// 0.5 s to start); one trial in five is killed within its first
		// 400 ms (while it fences the previous producer or reconciles).
		run := time.Duration(500+rng.IntN(3000)) * time.Millisecond
		if rng.IntN(5) == 0 {
			run = time.Duration(20+rng.IntN(380)) * time.Millisecond
		}
		notes := healed
		switch i {
		case 0, 1:
			// The first trials are killed inside the backfill of the 300
			// blocks of history, 0.1-0.5 s after its first step began
			// (the first step's transaction may be open or committed).
			waitLog(logPath, "msg=backfill ", 20*time.Second)
			time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
			if grepCount(logPath, "msg=backfill ") > 0 && grepCount(logPath, "backfill done") == 0 {
				notes = append(notes, fmt.Sprintf("killed inside the backfill after %d transaction(s)", grepCount(logPath, "end transaction response successfully received")))
			}
		case brokerAt:
			// Kill the broker while the bridge publishes, not while it starts.
			waitLog(logPath, "checkpoint reconciled", 15*time.Second)
			time.Sleep(run / 2)
			t0 := time.Now()
			brokerLogLevel(s.Brokers[0])
			env.restartBroker()
			notes = append(notes, fmt.Sprintf("broker killed -9 and restarted (%s)", time.Since(t0).Round(time.Millisecond)))
			// Kafka may leave a transaction it was committing open for
			// ever (healHangingTxns): end it as its coordinator decided,
			// before the bridge's next transaction joins it.
			notes = append(notes, healHanging(t, 6, s.Brokers, s.Control, s.Topic)...)
			// Give the bridge time to ride it out before the SIGKILL.
			time.Sleep(run/2 + 3*time.Second)
		case redisAt:
			time.Sleep(run / 2)
			env.restartRedis()
			notes = append(notes, "redis killed -9 and restarted while the bridge ran")
			time.Sleep(run / 2)
		case flushAt + 1:
			// The first start after the FLUSHALL rebuilds the checkpoint from
			// the whole control topic, which takes seconds with the race
			// detector: let it finish, or the following trials all die
			// during the rebuild and the run makes no progress.
			waitLog(logPath, "checkpoint reconciled", 30*time.Second)
			time.Sleep(run)
		default:
			time.Sleep(run)
		}
		state := "SIGKILL"
		if p.Exited() {
			selfExits++
			state = fmt.Sprintf("EXITED BY ITSELF (%v)", p.Err())
			t.Errorf("trial %d: the bridge exited by itself (%v) before the SIGKILL (%s); log tail:\n%s",
				i, p.Err(), strings.Join(notes, "; "), testenv.Tail(logPath, 8))
		}
		up := time.Since(p.Started).Round(time.Millisecond)
		p.Kill9()
		if rng.IntN(100) < 35 {
			d := 1 + rng.IntN(5)
			if err := sim.Reorg(d, d+1); err == nil {
				notes = append(notes, fmt.Sprintf("reorg of depth %d while down", d))
			}
		}
		if i == flushAt {
			flushRedis(t, env.redis)
			notes = append(notes, "redis FLUSHALL while down (checkpoint must be rebuilt from the control topic)")
		}
		resumed := "did not reconcile before the kill"
		if mm := reconciledRe.FindStringSubmatch(testenv.Tail(logPath, 1000)); mm != nil {
			resumed = fmt.Sprintf("reconciled %s in %s, resumes after block %s", mm[1], startupTime(logPath), cmp.Or(mm[2], "(start)"))
		} else if up > 2*time.Second {
			slowStarts++
			tl.Logf("trial %2d did not reconcile in %s; the broker's transactions:\n%s", i, up, txnState(s.Brokers, s.Control, s.Topic))
		}
		head, _ := sim.Head()
		tl.Logf("trial %2d: up %6s, %s; %s; reorgs handled %d, stream restarts %d; head %d; %s",
			i, up, state, resumed, grepCount(logPath, `msg=reorg`), grepCount(logPath, `msg="restarting`),
			head, strings.Join(notes, "; "))
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
	m.Stop()
	tl.Logf("miner: %d blocks mined, %d reorgs while running; %d of %d bridge processes exited by themselves; "+
		"%d ran over 2s without reconciling", m.mined.Load(), m.reorgs.Load(), selfExits, trials, slowStarts)

	if brokerAt >= 0 {
		for _, h := range healHanging(t, 1, s.Brokers, s.Control, s.Topic) {
			tl.Logf("before the final run: %s", h)
		}
	}

	// Catch up with a fixed head: the bridge must commit its last complete
	// batch although Amp sends nothing more (the transaction's max_age is
	// 100ms). Then a graceful stop, which must exit 0.
	logPath := filepath.Join(dir, "final.log")
	p := bridgetest.Start(t, bin, s.CfgPath, logPath)
	head, _ := sim.Head()
	// 25s: far past max_age (the machine may be busy with other tests),
	// and below the 30s transaction timeout after which the broker aborts
	// an open transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	_, err = s.WaitCaughtUp(ctx, p, 300*time.Millisecond)
	cancel()
	if err != nil {
		t.Errorf("with Amp idle, the bridge did not commit its last complete batch within 25s: %v", err)
		tl.Logf("the broker's transactions:\n%s", txnState(s.Brokers, s.Control, s.Topic))
	} else {
		// The schedule's reorgs may all have come before anything was
		// committed (short trials on a loaded machine): one more, of
		// committed blocks with the bridge running, makes sure the run
		// exercised retractions and tombstones (checked below).
		require.NoError(t, sim.Reorg(3, 4))
		ctx, cancel = context.WithTimeout(context.Background(), 25*time.Second)
		_, err = s.WaitCaughtUp(ctx, p, 300*time.Millisecond)
		cancel()
		if err != nil {
			t.Errorf("after a reorg of depth 3 with Amp idle, the bridge did not commit the new head within 25s: %v", err)
		}
		head, _ = sim.Head()
	}
	code := p.Term(45 * time.Second)
	require.Equal(t, 0, code, "bridge run must exit 0 on SIGTERM; log tail:\n%s", testenv.Tail(logPath, 30))
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	pt, ok, err := bridgetest.CommittedPoint(ctx, s.Brokers, s.Control, s.Stream, ampsim.DefaultNetwork)
	cancel()
	require.NoError(t, err)
	require.True(t, ok, "nothing committed")
	want, _ := sim.BlockHash(head)
	require.Equal(t, head, pt.Number, "after SIGTERM the newest committed watermark is not the head")
	require.Equal(t, want, pt.Hash, "the newest committed watermark is not on the canonical chain")
	tl.Logf("final: reconciled in %s, head %d committed, exit %d after SIGTERM (%s after start)",
		startupTime(logPath), head, code, time.Since(p.Started).Round(time.Millisecond))

	cr := checkTopic(t, s, python, head, tl.Logf)
	// The run exercised the reorg path with committed data.
	assert.Positive(t, cr.Retractions, "no retraction was written: the run exercised no reorg of committed data")
	assert.Positive(t, cr.Tombstones, "no tombstone was written: the run exercised no reorg of committed data")
	// No bridge process panicked or raced, whatever the faults.
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	require.NoError(t, err)
	for _, l := range logs {
		for _, bad := range []string{"panic:", "WARNING: DATA RACE", "fatal error:"} {
			assert.Zero(t, grepCount(l, bad), "%s contains %q:\n%s", filepath.Base(l), bad, testenv.Tail(l, 60))
		}
	}
	if t.Failed() {
		t.Logf("logs kept in %s (set E2E_KEEP_LOGS=dir to keep them after the test)", dir)
	}

	// The downstream recipe of examples/consumer reads the same table.
	t.Run("example-consumer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		bin := filepath.Join(t.TempDir(), "consumer")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/consumer")
		build.Dir = bridgetest.ModuleRoot(t)
		out, err := build.CombinedOutput()
		require.NoError(t, err, "building examples/consumer:\n%s", out)
		cmd := exec.CommandContext(ctx, bin, "-brokers", strings.Join(s.Brokers, ","), "-registry", s.Registry,
			"-topic", s.Topic, "-idle", "5s")
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, "examples/consumer:\n%s", bridgetest.LastLines(string(out), 20))
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		summary := lines[len(lines)-1]
		t.Logf("examples/consumer: %s", summary)
		assert.True(t, strings.HasPrefix(summary, fmt.Sprintf("%d rows (", cr.Surviving)),
			"examples/consumer keeps another table than the independent consumer (%d rows): %s", cr.Surviving, summary)
	})

	// Negative checks: the same checkers must catch a corrupted topic.

	t.Run("corrupt-duplicate", func(t *testing.T) {
		rec := lastInsert(t, s)
		produceRaw(t, s.Brokers, rec)
		vr := s.verify(t)
		t.Logf("bridge verify after producing a copy of %s/%d@%d (exit %d):\n%s", rec.Topic, rec.Partition, rec.Offset, vr.exit, vr.out)
		assert.NotEqual(t, 0, vr.exit, "bridge verify must fail on a duplicated record")
		assert.Positive(t, vr.counts["duplicated"], "bridge verify must count the duplicate")
		cr := s.consume(t, python, head)
		assert.Positive(t, cr.DuplicateKeys, "the consumer must see the (batch id, row) twice")
		assert.Positive(t, cr.DuplicateIdentities, "the consumer must see the transaction twice")
		assert.Positive(t, cr.Amp.Extra, "the consumer must find one row more than Amp returns")
	})
	t.Run("corrupt-tombstone", func(t *testing.T) {
		rec := lastInsert(t, s)
		produceRaw(t, s.Brokers, sink.ReadRecord{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Headers: rec.Headers})
		vr := s.verify(t)
		t.Logf("bridge verify after a stray tombstone for batch %s (exit %d):\n%s", rec.Key, vr.exit, vr.out)
		assert.NotEqual(t, 0, vr.exit, "bridge verify must fail when a live batch was tombstoned")
		assert.Positive(t, vr.counts["missing"], "bridge verify must count the tombstoned rows as missing")
		cr := s.consume(t, python, head)
		assert.Positive(t, cr.Amp.Missing, "the consumer must miss the tombstoned batch's rows")
	})
}

// checkTopic checks the data topic up to the committed head with `bridge
// verify` and with the independent consumer: nothing missing, extra,
// duplicated or unretracted, the surviving rows the simulator's canonical
// chain, and both checkers agreeing. It returns what the consumer saw.
func checkTopic(t *testing.T, s *stack, python string, head uint64, logf func(string, ...any)) consumerResult {
	t.Helper()
	vr := s.verify(t)
	cr := s.consume(t, python, head)
	checkTopicResults(t, s, head, vr, cr, logf)
	return cr
}

// checkTopicResults is checkTopic's checks of what bridge verify and the
// independent consumer reported.
func checkTopicResults(t *testing.T, s *stack, head uint64, vr verifyResult, cr consumerResult, logf func(string, ...any)) {
	t.Helper()
	logf("bridge verify (exit %d):\n%s", vr.exit, vr.out)
	// Not fatal: the independent consumer below still runs and reports.
	verifyOK := assert.Equal(t, 0, vr.exit, "bridge verify must find nothing missing, extra, duplicated or unretracted") &&
		assert.Equal(t, head, vr.upTo, "bridge verify checked another block range than the committed head")

	logf("consumer: %d records (%d inserts, %d retractions, %d tombstones), %d rows survive; Amp expects %d, %d match",
		cr.Records, cr.Inserts, cr.Retractions, cr.Tombstones, cr.Surviving, cr.Amp.Expected, cr.Amp.Matching)
	checkConsumerClean(t, cr)
	wantIDs := expectedIdentities(t, s.Sim, head)
	got := map[string]bool{}
	for _, id := range cr.Identities {
		got[identityKey(id)] = true
	}
	assertSameSet(t, wantIDs, got, "surviving (block, block hash, tx index) vs the simulator's canonical chain")
	require.NotNil(t, cr.Amp)
	assert.Zero(t, cr.Amp.Missing, "rows Amp returns that the topic lacks: %v", cr.Examples["amp_missing"])
	assert.Zero(t, cr.Amp.Extra, "rows in the topic that Amp does not return: %v", cr.Examples["amp_extra"])
	assert.Equal(t, len(wantIDs), cr.Amp.Expected, "Amp's batch query and the simulator's chain disagree")
	// Both checkers agree.
	if verifyOK {
		assert.Equal(t, vr.expected, cr.Amp.Expected, "bridge verify and the independent consumer expect different row counts")
		assert.Equal(t, vr.counts["matching"], cr.Surviving, "bridge verify and the independent consumer see different surviving rows")
	}
}

// checkConsumerClean asserts the independent consumer found nothing wrong
// in the topic's records themselves.
var logTimeRe = regexp.MustCompile(`^time=(\S+) `)

// startupTime is the time from "bridge starting" to the first "checkpoint
// reconciled" in a bridge log ("?" when either is missing).
func startupTime(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	var start, done time.Time
	for line := range strings.Lines(string(b)) {
		m := logTimeRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		switch {
		case start.IsZero() && strings.Contains(line, `msg="bridge starting"`):
			start = ts
		case done.IsZero() && strings.Contains(line, `msg="checkpoint reconciled"`):
			done = ts
		}
	}
	if start.IsZero() || done.IsZero() {
		return "?"
	}
	return done.Sub(start).Round(time.Millisecond).String()
}

// waitLog waits until the file contains s or the timeout passes.
func waitLog(path, s string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && grepCount(path, s) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

func checkConsumerClean(t *testing.T, cr consumerResult) {
	t.Helper()
	for name, n := range map[string]int{
		"duplicate_keys": cr.DuplicateKeys, "duplicate_identities": cr.DuplicateIdentities, "reinserted": cr.Reinserted,
		"dangling_retractions": cr.DanglingRetractions, "header_errors": cr.HeaderErrors,
		"envelope_errors": cr.EnvelopeErrors, "wire_errors": cr.WireErrors, "registry_errors": cr.RegistryErrors,
	} {
		assert.Zero(t, n, "consumer %s: %v", name, cr.Examples[name])
	}
	assert.NotEmpty(t, cr.SchemaIDs, "no record carried a registry schema id")
	assert.Len(t, cr.Identities, cr.Surviving, "surviving rows vs distinct identities")
}

func assertSameSet(t *testing.T, want, got map[string]bool, what string) {
	t.Helper()
	var missing, extra []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	for k := range got {
		if !want[k] {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	assert.Empty(t, missing, "%s: %d missing (first: %v)", what, len(missing), first(missing, 5))
	assert.Empty(t, extra, "%s: %d extra (first: %v)", what, len(extra), first(extra, 5))
	assert.Len(t, got, len(want), what)
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func flushRedis(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, c.FlushAll(ctx).Err(), "FLUSHALL on %s", addr)
}

// lastInsert returns the committed insert (amp-op c) of the newest batch
// of the data topic (the highest amp-range end): nothing retracted it.
func lastInsert(t *testing.T, s *stack) sink.ReadRecord {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...), kgo.ConsumeTopics(s.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	require.NoError(t, err)
	defer cl.Close()
	var last *kgo.Record
	var lastEnd uint64
	seen := 0
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		// The bridge is stopped: once records came, a quiet poll means the
		// whole topic was read.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		fetches := cl.PollFetches(ctx)
		cancel()
		if fetches.NumRecords() == 0 {
			if seen > 0 {
				break
			}
			continue
		}
		seen += fetches.NumRecords()
		fetches.EachRecord(func(rec *kgo.Record) {
			var op, rg string
			for _, h := range rec.Headers {
				switch h.Key {
				case "amp-op":
					op = string(h.Value)
				case "amp-range":
					rg = string(h.Value)
				}
			}
			if op != "c" || rec.Value == nil {
				return
			}
			_, end, _ := strings.Cut(rg, "-")
			n, err := strconv.ParseUint(end, 10, 64)
			if err == nil && (last == nil || n > lastEnd) {
				last, lastEnd = rec, n
			}
		})
	}
	require.NotNil(t, last, "the topic has no insert")
	return sink.ReadRecord{Topic: last.Topic, Partition: last.Partition, Offset: last.Offset, Key: last.Key, Value: last.Value,
		Headers: slices.Clone(last.Headers)}
}

// produceRaw writes one record outside any bridge transaction, to the
// partition it names.
func produceRaw(t *testing.T, brokers []string, rec sink.ReadRecord) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, err)
	defer cl.Close()
	kr := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Headers: slices.Clone(rec.Headers)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, kr).FirstErr())
}
